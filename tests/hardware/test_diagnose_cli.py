"""``fdl diagnose`` as a user runs it, on simulated machines; --json checked against its schema."""

from __future__ import annotations

import json
import os
from importlib import resources

import jsonschema
import pytest

from tests.conftest import REPO_ROOT
from tests.fixtures.machines import MACHINES, fdl_env, make_bin, torch_metadata

SCHEMA = json.loads((resources.files("fdl.hardware") / "diagnose.schema.json").read_text())


# The torch every report here sees installed, whatever this environment has: a CPU build of a
# release in the table (its metadata ahead of the real torch on the path; see torch_metadata).
INSTALLED = "2.13.0+cpu"


def diagnose(run_fdl, tmp_path, machine, *args, torch=INSTALLED, **extra):
    pythonpath = os.pathsep.join([str(REPO_ROOT), str(torch_metadata(tmp_path, torch))])
    env = fdl_env(tmp_path, PATH=str(make_bin(tmp_path, machine)), PYTHONPATH=pythonpath, **extra)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return run_fdl("diagnose", *args, env=env, cwd=work)


@pytest.mark.parametrize(
    "machine", [None, "mixed_gtx1060_rtx5060ti", "driver470_gtx1080ti", "driver_library_mismatch"]
)
def test_json_follows_the_schema(run_fdl, tmp_path, machine):
    result = diagnose(run_fdl, tmp_path, machine, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["context"]["mode"] == "global"


def test_json_has_driver_gpus_compatibility_and_recommendation(run_fdl, tmp_path):
    report = json.loads(diagnose(run_fdl, tmp_path, "mixed_gtx1060_rtx5060ti", "--json").stdout)
    nv = report["nvidia"]
    assert nv["driver"] == "580.95.05" and nv["cuda_driver_max"] == "13.0"
    assert [g["sm"] for g in nv["gpus"]] == ["sm_61", "sm_120"]
    # The installed torch here is a CPU build: no GPU is covered by it.
    assert [c["torch"] for c in report["compatibility"]] == ["cpu-build", "cpu-build"]
    assert [c["libtorch"] for c in report["compatibility"]] == ["no-active-variant"] * 2
    assert report["recommendation"]["status"] == "compromise"
    assert report["recommendation"]["visible_devices"] == "1"


def test_an_installed_patch_release_the_table_does_not_list_has_its_lines_archs(run_fdl, tmp_path):
    # the table lists 2.9.1; a 2.9.0 wheel has the same builds
    result = diagnose(run_fdl, tmp_path, "mixed_gtx1060_rtx5060ti", "--json", torch="2.9.0+cu128")
    report = json.loads(result.stdout)
    assert report["torch"]["version"] == "2.9.0+cu128"
    assert report["torch"]["archs"] == "7.0 7.5 8.0 8.6 9.0 10.0 12.0"
    assert [c["torch"] for c in report["compatibility"]] == ["none", "sass"]


def test_libtorch_compatibility_is_numeric(run_fdl, tmp_path):
    home = tmp_path / "flodl-home" / "libtorch"
    variant = home / "precompiled" / "cu128"
    (variant / "lib").mkdir(parents=True)
    (variant / ".arch").write_text(
        "cuda=12.8\ntorch=2.10.0\narchs=7.0 7.5 8.0 8.6 9.0 10.0 12.0\nsource=precompiled\n"
    )
    (home / ".active").write_text("precompiled/cu128\n")
    report = json.loads(diagnose(run_fdl, tmp_path, "mixed_gtx1060_rtx5060ti", "--json").stdout)
    # sm_61 is NOT covered (the original's substring match said "6" in "8.6" was fine)
    assert [c["libtorch"] for c in report["compatibility"]] == ["none", "sass"]
    assert report["libtorch"]["active"] == "precompiled/cu128"
    assert report["libtorch"]["variants"][0]["archs"].startswith("7.0")


def test_text_report_sections(run_fdl, tmp_path):
    result = diagnose(run_fdl, tmp_path, "mixed_gtx1060_rtx5060ti")
    out = result.stdout
    for section in ("System", "Python", "CUDA", "libtorch", "Compatibility", "Recommendation"):
        assert f"\n{section}\n" in f"\n{out}"
    assert "Driver:      580.95.05 (supports CUDA ≤ 13.0)" in out
    assert "[1] NVIDIA GeForce RTX 5060 Ti -- sm_120, 16 GB VRAM" in out  # 16311 MiB
    assert "CUDA_VISIBLE_DEVICES=1" in out
    assert "\x1b[" not in out  # not a terminal: no escapes


def test_text_report_explains_unknowns(run_fdl, tmp_path):
    out = diagnose(run_fdl, tmp_path, "driver_library_mismatch").stdout
    assert "No NVIDIA GPU found" in out
    assert "Driver/library version mismatch" in out
    assert "Docker:      not found" in out


def test_wsl_is_reported(run_fdl, tmp_path):
    report = json.loads(
        diagnose(
            run_fdl,
            tmp_path,
            "wsl_rtx4070_laptop",
            "--json",
            WSL_DISTRO_NAME="Ubuntu",
            WSL_INTEROP="/run/WSL/1_interop",
        ).stdout
    )
    assert report["system"]["wsl"] == "wsl2"
    # the driver is the Windows one: Windows floors apply (576.88 < 580.88 → no CUDA 13)
    assert report["recommendation"]["tag"] == "cu126"


def test_every_fixture_machine_produces_valid_json(tmp_path, monkeypatch):
    # One process per machine would be slow; the in-process path covers the same code.
    from fdl.hardware import detect
    from fdl.hardware.report import build_report
    from fdl.libtorch_home import find_home
    from fdl.variants import resolve

    for machine in MACHINES:
        monkeypatch.setenv("PATH", str(make_bin(tmp_path, machine)))
        monkeypatch.setenv("FDL_NVML", "0")
        m = detect(docker=False)
        report = build_report(m, find_home(tmp_path / "lt"), resolve(m.target()))
        jsonschema.validate(json.loads(json.dumps(report)), SCHEMA)


@pytest.mark.parametrize("table", ["missing", "malformed"])
def test_an_unreadable_release_table_is_reported_and_diagnose_still_exits_0(
    run_fdl, tmp_path, table
):
    path = tmp_path / "table.json"
    if table == "malformed":
        path.write_text('{"releases": []}')
    text = diagnose(run_fdl, tmp_path, "gtx1060", FDL_TORCH_TABLE=str(path))
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    problem = "cannot read the torch release table" if table == "missing" else "is malformed"
    assert "\nRecommendation\n  unknown: " in text.stdout and problem in text.stdout
    assert "[0] NVIDIA GeForce GTX 1060 6GB -- sm_61" in text.stdout  # the facts are still there
    as_json = diagnose(run_fdl, tmp_path, "gtx1060", "--json", FDL_TORCH_TABLE=str(path))
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["recommendation"] is None and problem in report["unknown"]["recommendation"]
    assert problem in report["unknown"]["torch_archs"]


THREE_CARDS = """\
#!/bin/sh
case "$*" in
  *--query-gpu*)
    echo "0, NVIDIA GeForce RTX 4090, 8.9, 24564, 570.133.20"
    echo "1, NVIDIA GeForce GTX 1080 Ti, 6.1, 11178, 570.133.20"
    echo "2, NVIDIA GeForce RTX 5090, 12.0, 32607, 570.133.20" ;;
  *) echo "| NVIDIA-SMI 570.133.20   Driver Version: 570.133.20   CUDA Version: 12.8 |" ;;
esac
"""


def test_vram_is_shown_as_the_size_the_card_is_sold_as(run_fdl, tmp_path):
    # nvidia-smi reports the usable memory, a little under the card's size
    bin_dir = make_bin(tmp_path, None)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(THREE_CARDS)
    smi.chmod(0o755)
    out = diagnose(run_fdl, tmp_path, None, FDL_NVML="0").stdout
    assert "[0] NVIDIA GeForce RTX 4090 -- sm_89, 24 GB VRAM" in out, out
    assert "[1] NVIDIA GeForce GTX 1080 Ti -- sm_61, 11 GB VRAM" in out
    assert "[2] NVIDIA GeForce RTX 5090 -- sm_120, 32 GB VRAM" in out
