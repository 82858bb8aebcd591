"""The resolver on real machines, seen through their (replayed) nvidia-smi output."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fdl.errors import FdlUsageError
from fdl.hardware import probe_nvidia
from fdl.variants import GpuTarget, Target, load_table, resolve
from fdl.variants.table import parse_table
from tests.fixtures.machines import MACHINES

NEWEST = load_table().newest.torch


def target_for(machine: str | None, os_family: str = "linux") -> Target:
    report = probe_nvidia()
    return Target(
        os_family=os_family,
        platform="linux-x86_64",
        driver=report.driver,
        gpus=tuple(GpuTarget(g.index, g.name, g.cc) for g in report.gpus),
        python="3.11",
    )


# machine -> (torch, tag, status)
EXPECTED = {
    None: (NEWEST, "cpu", "cpu"),
    "gtx1060": (NEWEST, "cu126", "ok"),  # Pascal: only cu126 still carries sm_60
    "rtx5060ti": (NEWEST, "cu132", "ok"),  # Blackwell on 580: the newest CUDA 13 build
    "a100x4": (NEWEST, "cu126", "ok"),  # driver 550: CUDA 13 needs 580
    "h200x8": (NEWEST, "cu126", "ok"),  # driver 570: same
    "driver470_gtx1080ti": ("2.7.1", "cu118", "ok"),  # 470 < 525: only CUDA 11 wheels load
    "blackwell_driver575": ("2.11.0", "cu128", "ok"),  # sm_120 needs cu128+; cu13x needs 580
    "mixed_gtx1060_rtx5060ti": (NEWEST, "cu132", "compromise"),  # nothing covers sm_61 and sm_120
    "driver_library_mismatch": (NEWEST, "cpu", "cpu"),
    "driver_not_loaded": (NEWEST, "cpu", "cpu"),
}


@pytest.mark.parametrize("machine", [None, *MACHINES])
def test_real_machines(machine, gpu_machine):
    gpu_machine(machine)
    os_family = "windows" if machine and machine.startswith("wsl") else "linux"
    plan = resolve(target_for(machine, os_family))
    expected = EXPECTED.get(machine, (NEWEST, "cu126", "ok"))
    assert (plan.torch, plan.tag, plan.status) == expected, plan.reasons
    assert plan.reasons  # every choice is explained
    json.dumps(plan.to_dict())  # and serialisable


def test_old_driver_explains_and_offers_the_upgrade(gpu_machine):
    gpu_machine("driver470_gtx1080ti")
    plan = resolve(target_for("driver470_gtx1080ti"))
    text = " ".join(plan.reasons)
    assert f"torch {NEWEST} has no build for this machine" in text
    assert "needs driver ≥ 525.60.13 (have 470.256.02)" in text
    assert any("upgrade the NVIDIA driver to ≥ 525.60.13" in a for a in plan.alternatives)


def test_blackwell_on_575_says_cuda13_needs_580(gpu_machine):
    gpu_machine("blackwell_driver575")
    plan = resolve(target_for("blackwell_driver575"))
    assert any("580.65.06" in a for a in plan.alternatives), plan.alternatives
    assert any("native kernels sm_120 (exact)" in r for r in plan.reasons)


def test_mixed_gpus_compromise_names_devices_and_source_build(gpu_machine):
    gpu_machine("mixed_gtx1060_rtx5060ti")
    plan = resolve(target_for("mixed_gtx1060_rtx5060ti"))
    assert plan.visible_devices == "1"  # the RTX 5060 Ti
    assert any("no single pre-built" in r for r in plan.reasons)
    assert plan.source_build and 'TORCH_CUDA_ARCH_LIST="6.1;12.0"' in plan.source_build
    assert any(
        a.startswith(f"torch {NEWEST} + cu126 instead: usable on GPU 0") for a in plan.alternatives
    ), plan.alternatives
    # nvidia-smi's index counts in PCI bus order, CUDA's default fastest first
    assert any("CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1" in w for w in plan.warnings)


GTX1080 = GpuTarget(0, "NVIDIA GeForce GTX 1080", (6, 1))
RTX5090 = GpuTarget(1, "NVIDIA GeForce RTX 5090", (12, 0))


def test_a_compromise_looks_at_older_releases_for_the_newest_gpu():
    # driver 575: the CUDA 13 builds (sm_120) need 580, so the newest release's only loadable
    # build is cu126, without Blackwell kernels; torch 2.11's cu128 runs on the RTX 5090
    mixed = Target(driver="575.64.03", gpus=(GTX1080, RTX5090), python="3.11")
    plan = resolve(mixed)
    assert (plan.torch, plan.tag, plan.status) == ("2.11.0", "cu128", "compromise"), plan.reasons
    assert plan.visible_devices == "1"
    assert resolve(Target(driver="575.64.03", gpus=(RTX5090,))).requirement == plan.requirement
    alternatives = " | ".join(plan.alternatives)
    assert f"torch {NEWEST} + cu126 instead: usable on GPU 0" in alternatives
    assert "cu130" not in alternatives.replace("+ cu130 / cu132", "")  # cannot load on 575
    assert (
        f"upgrade the NVIDIA driver to ≥ 580.65.06 for torch {NEWEST} + cu130 / cu132 "
        "(usable on GPU 1)" in alternatives
    )
    assert (
        f"one environment per GPU generation: torch {NEWEST} + cu126 for GPU 0 "
        "(e.g. .venvs/cu126); torch 2.11.0 + cu128 for GPU 1 (e.g. .venvs/cu128)" in alternatives
    )
    # pinned, the compromise stays within the release
    pinned = resolve(mixed, torch=NEWEST)
    assert (pinned.torch, pinned.tag, pinned.visible_devices) == (NEWEST, "cu126", "0")


def test_an_old_driver_is_offered_the_smallest_upgrade_too():
    # Only the newest release's upgrade (to 525) was offered; an older torch needs only 450.
    gtx1080 = GpuTarget(0, "NVIDIA GeForce GTX 1080", (6, 1))
    driver390 = Target(driver="390.157", gpus=(gtx1080,), python="3.11")
    plan = resolve(driver390)
    assert (plan.status, plan.tag) == ("no-build", "cpu")
    assert plan.alternatives == [
        f"upgrade the NVIDIA driver to ≥ 525.60.13 for torch {NEWEST} + cu126",
        "a smaller upgrade: the NVIDIA driver to ≥ 450.80.02 for torch 2.7.1 + cu118 "
        "(an older torch)",
    ]
    pinned = resolve(driver390, torch=NEWEST)  # --torch: the upgrade for that release alone
    assert not any("smaller upgrade" in a for a in pinned.alternatives)
    # from 450 on, that older torch is what setup installs, not an alternative
    driver520 = dataclasses.replace(driver390, driver="520.61.05")
    assert (resolve(driver520).torch, resolve(driver520).tag) == ("2.7.1", "cu118")


def test_a_gpu_no_build_supports_is_named():
    k40 = Target(driver="470.256.02", gpus=(GpuTarget(0, "Tesla K40m", (3, 5)),), python="3.11")
    plan = resolve(k40)
    assert plan.status == "no-build" and plan.tag == "cpu"
    text = " ".join(plan.reasons)
    assert (
        "no build in fdl's release table has kernels for GPU 0 Tesla K40m (sm_35) (the oldest "
        "architecture any of them supports is sm_37): a driver upgrade cannot change that" in text
    ), text
    assert not any("upgrade the NVIDIA driver" in a for a in plan.alternatives)
    assert any('TORCH_CUDA_ARCH_LIST="3.5"' in a for a in plan.alternatives)


def test_pinned_release_is_respected(gpu_machine):
    gpu_machine("blackwell_driver575")
    plan = resolve(target_for("blackwell_driver575"), torch="2.14")
    assert plan.torch == "2.14.1" and plan.status == "no-build" and plan.tag == "cpu"
    assert any("2.11.0 + cu128 fits every GPU" in a for a in plan.alternatives)
    plan = resolve(target_for("blackwell_driver575"), torch="2.9")
    assert (plan.torch, plan.tag, plan.status) == ("2.9.1", "cu128", "ok")


def test_forced_variant_is_checked_and_warned(gpu_machine):
    gpu_machine("gtx1060")
    plan = resolve(target_for("gtx1060"), tag="cu130")  # driver 535: CUDA 13 needs 580
    assert plan.tag == "cu130" and plan.status == "unusable"
    assert plan.warnings == [
        "cu130 runs on no GPU here (torch will see no CUDA device): needs driver ≥ 580.65.06 "
        "(have 535.183.01); no kernels for GPU 0 (sm_61); compiled: 7.5 8.0 8.6 9.0 10.0 12.0"
    ]
    assert plan.visible_devices is None


def test_a_forced_variant_that_runs_on_some_gpus_says_which(gpu_machine):
    gpu_machine("mixed_gtx1060_rtx5060ti")
    some = resolve(target_for("mixed_gtx1060_rtx5060ti"), tag="cu126")
    assert some.status == "compromise" and some.visible_devices == "0"
    assert any("cu126 will not run everywhere here" in w for w in some.warnings)


def test_unknown_release_and_tag_are_usage_errors():
    with pytest.raises(FdlUsageError, match="not in fdl's release table"):
        resolve(Target(), torch="1.0")
    with pytest.raises(FdlUsageError, match="no 'cu999' build"):
        resolve(Target(), tag="cu999")


def test_volta_loses_cu128_in_2_11():
    v100 = Target(driver="550.54.15", gpus=(GpuTarget(0, "Tesla V100-SXM2-32GB", (7, 0)),))
    assert resolve(v100, torch="2.10").tag in ("cu126", "cu128")
    considered = {c.build.tag: c.fits_all for c in resolve(v100, torch="2.11").considered}
    assert considered["cu128"] is False and considered["cu126"] is True


def test_unknown_driver_and_cc_are_warned_not_guessed():
    plan = resolve(Target(driver=None, gpus=(GpuTarget(0, "Mystery GPU", None),)))
    assert plan.status == "ok"
    assert any("driver version unknown" in w for w in plan.warnings)
    (unknown_cc,) = [w for w in plan.warnings if "compute capability is unknown" in w]
    # diagnose and setup both show this: it points at what checks it, not at a command to re-run
    assert "fdl setup's verification launches a kernel on it after the install" in unknown_cc
    assert "verify with 'fdl setup'" not in unknown_cc


def test_a_driver_that_lists_no_gpu_is_not_no_gpu():
    problem = "nvidia-smi is installed but reported no GPU (…); reboot"
    plan = resolve(Target(driver_problem=problem, python="3.11"))
    assert plan.tag == "cpu" and plan.warnings == [problem]
    assert not any("no NVIDIA GPU detected" in r for r in plan.reasons), plan.reasons
    assert any("the GPUs are unknown until it answers" in r for r in plan.reasons)


def test_macos_gets_the_default_pypi_wheel():
    plan = resolve(Target(os_family="macos", platform="macos-arm64"))
    assert plan.index_url is None and plan.tag == "cpu"


def test_mirror_changes_the_index_url(monkeypatch):
    monkeypatch.setenv("FDL_TORCH_MIRROR", "http://mirror.local/pt/")
    assert resolve(Target()).index_url == "http://mirror.local/pt/whl/cpu"


def test_libtorch_names_follow_the_cxx11_abi_change():
    table = load_table()
    names = {
        v: table.libtorch_file(table.release(v), "cu126", "linux-x86_64")
        for v in ("2.6", "2.7", "2.8")
    }
    assert names["2.6"] == "libtorch-cxx11-abi-shared-with-deps-2.6.0%2Bcu126.zip"
    assert names["2.7"] == "libtorch-cxx11-abi-shared-with-deps-2.7.1%2Bcu126.zip"
    assert names["2.8"] == "libtorch-shared-with-deps-2.8.0%2Bcu126.zip"  # cxx11, new name
    win = table.libtorch_file(table.release("2.9"), "cu128", "windows-x86_64")
    assert win == "libtorch-win-shared-with-deps-2.9.1%2Bcu128.zip"  # not the Linux name
    assert (
        table.libtorch_file(table.release("2.9"), "cpu", "macos-arm64")
        == "libtorch-macos-arm64-2.9.1.zip"
    )


def test_table_is_consistent():
    table = load_table()
    versions = [r.torch for r in table.releases]
    assert versions == sorted(versions, key=lambda v: tuple(map(int, v.split("."))), reverse=True)
    for release in table.releases:
        assert release.builds[-1].tag == "cpu"
        for build in release.builds[:-1]:
            assert build.sass and table.cuda_driver_floor(build.cuda_major, "linux")
            assert set(build.ptx) <= set(build.sass)


def test_a_malformed_table_fails_loudly(tmp_path, monkeypatch):
    bad = tmp_path / "t.json"
    bad.write_text('{"releases": []}')
    load_table.cache_clear()
    try:
        from fdl.errors import FdlError

        with pytest.raises(FdlError, match="malformed"):
            load_table(str(bad))
    finally:
        load_table.cache_clear()
    with pytest.raises(KeyError):
        parse_table({})


def test_a_missing_table_is_an_error_not_a_traceback(tmp_path, monkeypatch):
    from fdl.errors import ExitCode, FdlError

    monkeypatch.setenv("FDL_TORCH_TABLE", str(tmp_path / "nope.json"))
    load_table.cache_clear()
    try:
        with pytest.raises(FdlError, match=r"cannot read the torch release table") as err:
            load_table()
    finally:
        load_table.cache_clear()
    assert "nope.json (FDL_TORCH_TABLE): No such file or directory" in err.value.what
    assert err.value.code == ExitCode.UNAVAILABLE and "unset it" in (err.value.hint or "")


def test_aarch64_only_considers_builds_published_for_it():
    gh200 = (GpuTarget(0, "NVIDIA GH200 480GB", (9, 0)),)
    new_driver = Target(platform="linux-aarch64", driver="580.82.07", gpus=gh200)
    assert resolve(new_driver).tag == "cu132"
    old_driver = Target(platform="linux-aarch64", driver="570.133.20", gpus=gh200)
    plan = resolve(old_driver)  # cu126 has no aarch64 wheels; CUDA 13 needs 580
    assert (plan.torch, plan.tag) == ("2.11.0", "cu128")
    assert all(c.build.tag != "cu126" for c in plan.considered)


def test_says_when_plain_pypi_would_be_wrong():
    # PyPI's Linux wheel of 2.14 is its CUDA 13.0 build (requires cuda-toolkit 13.0.x), which a
    # 550 driver cannot load
    a100 = Target(driver="550.127.05", gpus=(GpuTarget(0, "NVIDIA A100-SXM4-80GB", (8, 0)),))
    plan = resolve(a100, torch="2.14")
    assert plan.tag == "cu126"
    assert any(
        "a plain 'pip install torch' would install the cu130 build" in r for r in plan.reasons
    ), plan.reasons


def test_an_installed_patch_release_has_its_lines_builds():
    table = load_table()
    listed = table.release("2.9")
    patch = table.installed_release("2.9.0+cu128")
    assert patch.torch == "2.9.0" and patch.minor == "2.9"
    assert [(b.tag, b.sass, b.ptx, b.stable) for b in patch.builds] == [
        (b.tag, b.sass, b.ptx, b.stable) for b in listed.builds
    ]
    assert {b.torch for b in patch.builds} == {"2.9.0"}  # pins name the installed patch
    assert listed.libtorch_sha256 and not patch.libtorch_sha256  # a hash is one file's
    assert table.installed_release("2.9.1") is listed
    assert table.installed_release(" v2.9.1+cpu") is listed
    assert table.installed_release("2.3.1") is None  # a line the table does not know
    assert table.installed_release("2.99.0") is None


def test_a_table_with_an_extra_release_keeps_order_and_leaves_the_shipped_one_alone():
    table = load_table()
    patch = table.installed_release("2.9.0")
    extended = table.with_release(patch)
    torches = [r.torch for r in extended.releases]
    assert torches.index("2.9.1") + 1 == torches.index("2.9.0")
    assert extended.release("2.9.0") is patch and extended.release("2.9") is not patch
    assert "2.9.0" not in [r.torch for r in load_table().releases]
    assert table.with_release(table.release("2.9")).releases == table.releases  # no duplicate
    plan = resolve(Target(python="3.11"), torch="2.9.0", table=extended)
    assert (plan.torch, plan.requirement) == ("2.9.0", "torch==2.9.0+cpu")


def test_python_too_new_for_the_release_that_fits_is_explained():
    gtx1080ti = GpuTarget(0, "NVIDIA GeForce GTX 1080 Ti", (6, 1))
    old_driver = Target(driver="470.256.02", gpus=(gtx1080ti,), python="3.14")
    plan = resolve(old_driver)
    assert plan.status == "no-build" and plan.tag == "cpu"
    assert any(
        "torch 2.7.1 + cu118 would run on every GPU here, but has no wheels for Python 3.14"
        " (supports 3.9–3.13)" in r
        for r in plan.reasons
    ), plan.reasons
    assert plan.alternatives[0].startswith("use Python 3.13")
    # the same machine on a Python the old release supports gets it, with no such note
    plan = resolve(dataclasses.replace(old_driver, python="3.13"))
    assert (plan.torch, plan.tag) == ("2.7.1", "cu118")
    assert not any("no wheels for Python" in r for r in plan.reasons)
