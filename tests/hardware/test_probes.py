"""Hardware probes degrade to "unknown" with a reason; every value they report is validated."""

from __future__ import annotations

import pytest

from fdl.hardware import detect, probe_nvidia
from fdl.hardware.nvidia import cc_from_name, parse_proc_version, parse_query
from fdl.hardware.system import detect_wsl


def test_full_query_with_mixed_gpus(gpu_machine):
    gpu_machine("mixed_gtx1060_rtx5060ti")
    report = probe_nvidia()
    assert [(g.index, g.sm, g.vram_mib) for g in report.gpus] == [
        (0, "sm_61", 6144),
        (1, "sm_120", 16311),
    ]
    assert report.driver == "580.95.05" and report.cuda_driver_max == "13.0"
    assert report.gpus[1].short_name == "RTX 5060 Ti"
    assert {g.cc_source for g in report.gpus} == {"nvidia-smi"}


def test_old_driver_without_compute_cap_falls_back_to_the_name_table(gpu_machine):
    gpu_machine("driver470_gtx1080ti")
    report = probe_nvidia()
    assert report.source == "nvidia-smi (legacy query)"
    (gpu,) = report.gpus
    assert (gpu.name, gpu.cc, gpu.cc_source) == ("NVIDIA GeForce GTX 1080 Ti", (6, 1), "name-table")
    assert report.driver == "470.256.02" and report.cuda_driver_max == "11.4"
    assert any("cannot report compute capability" in p for p in report.problems)


def test_driver_library_mismatch_is_a_reason_not_a_gpu(gpu_machine):
    gpu_machine("driver_library_mismatch")
    report = probe_nvidia()
    assert report.gpus == []  # (the driver may still be read from the kernel module)
    assert any("Driver/library version mismatch" in p for p in report.problems)


def test_driver_not_loaded(gpu_machine):
    gpu_machine("driver_not_loaded")
    report = probe_nvidia()
    assert report.gpus == []
    assert any("exited 9" in p and "couldn't communicate" in p for p in report.problems)


def test_no_nvidia_smi_at_all(gpu_machine):
    gpu_machine(None)
    report = probe_nvidia()
    assert report.gpus == [] and report.smi_path is None
    assert any("nvidia-smi not found" in p for p in report.problems)


def test_query_parser_skips_garbage_and_keeps_commas_in_names():
    text = (
        "0, NVIDIA GeForce RTX 3090, 8.6, 24576, 550.54.15\n"
        "garbage line\n"
        "1, Weird, Name, With Commas, 7.5, 15360, 550.54.15\n"
        "2, NVIDIA A100, 8.0, [N/A], 550.54.15\n"
        "x, Bad Index, 8.0, 100, 550.54.15\n"
        "3, Bad Driver, 8.0, 100, sm_Failed\n"
    )
    gpus, driver = parse_query(text, with_cc=True)
    assert [(g.index, g.name, g.cc, g.vram_mib) for g in gpus] == [
        (0, "NVIDIA GeForce RTX 3090", (8, 6), 24576),
        (1, "Weird, Name, With Commas", (7, 5), 15360),
        (2, "NVIDIA A100", (8, 0), None),
    ]
    assert driver == "550.54.15"


def test_proc_driver_version_parser():
    text = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.144.03  Mon Dec 30 17:44:08 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    assert parse_proc_version(text) == "550.144.03"
    assert parse_proc_version("nothing here") is None


def test_name_table():
    assert cc_from_name("NVIDIA GeForce RTX 5090") == (12, 0)
    assert cc_from_name("Tesla T4") == (7, 5)
    assert cc_from_name("NVIDIA H200") == (9, 0)
    assert cc_from_name("NVIDIA GeForce RTX 4070 Laptop GPU") == (8, 9)
    assert cc_from_name("Matrox G200") is None


def test_wsl_detection_is_case_insensitive():
    assert detect_wsl("5.15.167.4-microsoft-standard-WSL2", {}) == "wsl2"
    assert detect_wsl("4.4.0-19041-Microsoft", {}) == "wsl1"  # WSL1 spells it "Microsoft"
    assert detect_wsl("6.8.0-45-generic", {}) is None


def test_detect_never_raises_and_explains_unknowns(gpu_machine):
    gpu_machine(None)  # PATH without docker or nvidia-smi
    machine = detect()
    assert machine.system.cpu_threads and machine.python.version
    assert "docker_client" in machine.unknown and "gpus" in machine.unknown
    assert machine.system.docker_client is None


def test_installed_torch_is_read_from_metadata_without_importing_it():
    import subprocess
    import sys

    from tests.conftest import clean_env

    code = (
        "import sys; from fdl.hardware.python_env import probe_torch; t, why = probe_torch(); "
        "print(t.version, t.tag, 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), check=True
    ).stdout.split()
    from importlib.metadata import version

    assert out[0] == version("torch")
    assert out[2] == "False"  # torch was never imported
    if "+" in out[0]:
        assert out[1] == out[0].split("+")[1]


def _fake_docker(tmp_path, monkeypatch, daemon: bool) -> None:
    import shutil
    import stat

    bin_dir = tmp_path / "docker-bin"
    bin_dir.mkdir()
    server = (
        'echo "27.3.1"; exit 0'
        if daemon
        else 'echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. '
        'Is the docker daemon running?" >&2; exit 1'
    )
    script = bin_dir / "docker"
    script.write_text(
        f"#!{shutil.which('sh')}\n"
        'if [ "$1" = "--version" ]; then echo "Docker version 27.3.1, build ce12230"; exit 0; fi\n'
        f"{server}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_docker_client_without_daemon(tmp_path, monkeypatch):
    from fdl.hardware.system import probe_docker

    _fake_docker(tmp_path, monkeypatch, daemon=False)
    client, server, problems = probe_docker()
    assert (client, server) == ("27.3.1", None)
    assert any("daemon not answering" in p and "Cannot connect" in p for p in problems)


def test_docker_client_and_daemon(tmp_path, monkeypatch):
    from fdl.hardware.system import probe_docker

    _fake_docker(tmp_path, monkeypatch, daemon=True)
    assert probe_docker() == ("27.3.1", "27.3.1", [])


# --- The real probes on laid-out trees (FDL_PROBE_ROOT) and a fake NVML library ---------------


def lay_out(root, files: dict[str, str]):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def diagnose_json(run_fdl, tmp_path, **env: str) -> dict:
    import json

    from tests.fixtures.machines import fdl_env

    result = run_fdl("diagnose", "--json", env=fdl_env(tmp_path, **env), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_wsl2_nvidia_smi_outside_path_is_found(run_fdl, tmp_path):
    from tests.fixtures.machines import write_fake_smi

    root = lay_out(
        tmp_path / "root", {"proc/sys/kernel/osrelease": "5.15.167.4-microsoft-standard-WSL2\n"}
    )
    smi = write_fake_smi(root / "usr/lib/wsl/lib/nvidia-smi", "wsl_rtx4070_laptop")
    data = diagnose_json(run_fdl, tmp_path, FDL_PROBE_ROOT=str(root))  # PATH has no nvidia-smi
    assert data["system"]["wsl"] == "wsl2"
    assert data["system"]["kernel"] == "5.15.167.4-microsoft-standard-WSL2"
    assert data["nvidia"]["smi_path"] == str(smi)
    assert [g["name"] for g in data["nvidia"]["gpus"]] == ["NVIDIA GeForce RTX 4070 Laptop GPU"]
    assert data["recommendation"]["tag"] == "cu126"  # Windows driver floors (576 < 580)


def test_wsl_without_the_nvidia_library_dir_is_wsl1(tmp_path, monkeypatch):
    from fdl.hardware.system import detect_wsl

    monkeypatch.setenv("FDL_PROBE_ROOT", str(tmp_path))
    env = {"WSL_DISTRO_NAME": "Ubuntu"}
    assert detect_wsl("6.6.0-custom", env) == "wsl1"
    (tmp_path / "usr/lib/wsl/lib").mkdir(parents=True)
    assert detect_wsl("6.6.0-custom", env) == "wsl2"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({".dockerenv": ""}, "docker"),
        ({"run/.containerenv": "engine=podman\n"}, "podman"),
        ({"proc/1/cgroup": "0::/kubepods/besteffort/pod42/0123abcd\n"}, "container"),
        ({"proc/1/cgroup": "0::/init.scope\n"}, None),
        ({}, None),
    ],
)
def test_container_detection(run_fdl, tmp_path, files, expected):
    root = lay_out(tmp_path / "root", files)
    data = diagnose_json(run_fdl, tmp_path, FDL_PROBE_ROOT=str(root))
    assert data["system"]["container"] == expected


def test_cpu_model_and_driver_from_the_kernel_when_nvidia_smi_is_broken(tmp_path, monkeypatch):
    from fdl.hardware.system import probe_system
    from tests.fixtures.machines import make_bin

    root = lay_out(
        tmp_path / "root",
        {
            "proc/cpuinfo": "processor\t: 0\nmodel name\t: AMD Ryzen 9 7950X 16-Core Processor\n",
            "proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX x86_64 Kernel Module"
            "  580.95.05  Tue Sep 23 09:53:24 UTC 2025\n",
        },
    )
    monkeypatch.setenv("FDL_PROBE_ROOT", str(root))
    monkeypatch.setenv("PATH", str(make_bin(tmp_path, "driver_library_mismatch")))
    monkeypatch.setenv("FDL_NVML", "0")
    facts, _ = probe_system(docker=False)
    assert facts.cpu_model == "AMD Ryzen 9 7950X 16-Core Processor"
    report = probe_nvidia()
    assert report.gpus == [] and report.driver == "580.95.05"  # from /proc
    lay_out(root, {"sys/module/nvidia/version": "580.82.07\n"})
    assert probe_nvidia().driver == "580.82.07"  # /sys wins: it is the loaded module


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory):
    """libnvidia-ml.so.1 built from tests/hardware/fixtures/fake_nvml_driver.c (2 x L4, driver 550)."""
    from pathlib import Path

    from tests import fake_nvml

    source = Path(__file__).parent / "fixtures" / "fake_nvml_driver.c"
    return fake_nvml.build(source, tmp_path_factory.mktemp("nvml"))


def test_nvml_lists_the_gpus_when_nvidia_smi_is_absent(run_fdl, tmp_path, fake_nvml):
    data = diagnose_json(run_fdl, tmp_path, FDL_NVML="1", LD_LIBRARY_PATH=str(fake_nvml))
    nv = data["nvidia"]
    assert nv["smi_path"] is None and nv["source"] == "nvml"
    assert (nv["driver"], nv["cuda_driver_max"]) == ("550.127.05", "12.4")
    assert [
        (g["index"], g["name"], g["sm"], g["vram_mib"], g["compute_capability_source"])
        for g in nv["gpus"]
    ] == [(0, "NVIDIA L4", "sm_89", 23034, "nvml"), (1, "NVIDIA L4", "sm_89", 23034, "nvml")]
    assert data["recommendation"]["tag"] == "cu126"  # Ada on 550: CUDA 13 needs 580


def test_nvml_supplies_the_compute_capability_an_old_nvidia_smi_cannot(
    run_fdl, tmp_path, fake_nvml
):
    from tests.fixtures.machines import make_bin

    data = diagnose_json(
        run_fdl,
        tmp_path,
        PATH=str(make_bin(tmp_path, "driver470_gtx1080ti")),
        FDL_NVML="1",
        LD_LIBRARY_PATH=str(fake_nvml),
    )
    (gpu,) = data["nvidia"]["gpus"]
    assert data["nvidia"]["source"] == "nvidia-smi (legacy query)"
    assert data["nvidia"]["driver"] == "470.256.02"  # nvidia-smi's word first
    # NVML (the fake answers 8.9) is asked before the name table (which would say 6.1)
    assert (gpu["compute_capability"], gpu["compute_capability_source"]) == ("8.9", "nvml")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a reaper counts as gone)."""
    from pathlib import Path

    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def test_a_hung_nvidia_smi_is_asked_once_and_leaves_no_process_behind(tmp_path, monkeypatch):
    import shutil
    import stat
    import time

    from fdl.hardware.nvidia import broken_driver

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls, pids = tmp_path / "calls", tmp_path / "pids"
    smi = bin_dir / "nvidia-smi"
    # a wrapper that hangs in a child process, as a wedged driver call does
    smi.write_text(
        f"#!{shutil.which('sh')}\n"
        f'echo "$*" >> {calls}\n'
        f"{shutil.which('sleep')} 60 &\n"
        f"echo $! >> {pids}\n"
        "wait\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("FDL_NVML", "0")
    monkeypatch.setenv("FDL_PROBE_ROOT", str(tmp_path / "root"))  # no kernel module facts
    start = time.monotonic()
    report = probe_nvidia(timeout=1)
    elapsed = time.monotonic() - start
    assert len(calls.read_text().splitlines()) == 1  # the banner is not asked after a timeout
    assert elapsed < 4, elapsed
    assert report.gpus == [] and "nvidia-smi did not answer within 1s" in report.problems[0]
    deadline = time.monotonic() + 5
    child = int(pids.read_text().split()[0])
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)  # the whole process group was killed
    problem = broken_driver(report)
    assert problem and "the driver does not respond: reboot" in problem


def test_a_loaded_kernel_module_without_nvidia_smi_is_a_driver_problem(tmp_path, monkeypatch):
    from fdl.hardware.nvidia import broken_driver
    from tests.fixtures.machines import make_bin

    monkeypatch.setenv("PATH", str(make_bin(tmp_path, None)))
    monkeypatch.setenv("FDL_NVML", "0")
    monkeypatch.setenv("FDL_PROBE_ROOT", str(tmp_path / "root"))
    assert broken_driver(probe_nvidia()) is None  # no driver at all: a CPU machine
    lay_out(tmp_path / "root", {"sys/module/nvidia/version": "575.64.03\n"})
    # the host's module seen from a container without GPU access: no device node, no GPU here
    assert broken_driver(probe_nvidia()) is None
    lay_out(tmp_path / "root", {"dev/nvidiactl": ""})
    problem = broken_driver(probe_nvidia())
    assert problem and problem.startswith(
        "the NVIDIA kernel module 575.64.03 is loaded but nvidia-smi was not found"
    )
