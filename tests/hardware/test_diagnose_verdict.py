"""``fdl diagnose`` judges the installed torch on the hardware: a working CPU build on a machine
without a GPU is fine, and a newer release is an option, never a fix."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest

from fdl.hardware import detect
from fdl.hardware.python_env import TorchInstall
from fdl.hardware.report import verdict
from fdl.variants import load_table, resolve
from fdl.variants.table import version_key
from tests.hardware.test_diagnose_cli import INSTALLED, SCHEMA, diagnose


def test_cpu_build_without_a_gpu_is_fine_and_a_newer_release_is_optional(run_fdl, tmp_path):
    result = diagnose(run_fdl, tmp_path, None)  # no nvidia-smi on PATH
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"fine: torch {INSTALLED} is the right build" in out
    assert "Fix it" not in out and "Recommendation" not in out
    assert "(optional)" in out
    newest = load_table().releases[0].torch
    assert version_key(newest) > version_key(INSTALLED.split("+")[0])
    assert f"torch {newest} is newer than the installed release: an optional upgrade" in out
    report = json.loads(diagnose(run_fdl, tmp_path, None, "--json").stdout)
    assert report["verdict"]["status"] == "fine"


def test_a_cpu_build_on_a_gpu_machine_needs_fixing(run_fdl, tmp_path):
    result = diagnose(run_fdl, tmp_path, "gtx1060")
    assert result.returncode == 0, result.stderr
    assert f"fix: torch {INSTALLED} is a CPU build: the GPUs stay unused" in result.stdout
    assert "Recommendation" in result.stdout and "Fix it: fdl setup" in result.stdout
    report = json.loads(diagnose(run_fdl, tmp_path, "gtx1060", "--json").stdout)
    assert report["verdict"] == {
        "status": "fix",
        "summary": report["verdict"]["summary"],
        "newer": None,
    }


@pytest.mark.parametrize(
    ("machine", "advice"),
    [
        ("driver_library_mismatch", "the driver was upgraded without a reboot: reboot"),
        ("driver_not_loaded", "reinstall the NVIDIA driver"),
    ],
)
def test_an_installed_driver_that_lists_no_gpu_is_not_fine(run_fdl, tmp_path, machine, advice):
    result = diagnose(run_fdl, tmp_path, machine)
    assert result.returncode == 0, result.stderr
    verdict_line = result.stdout.split("\nVerdict\n", 1)[1].splitlines()[0]
    assert verdict_line.startswith("  driver: nvidia-smi is installed but reported no GPU (")
    assert advice in verdict_line and f"until then torch {INSTALLED} sees no GPU" in verdict_line
    assert "fine:" not in result.stdout and "Nothing to do" not in result.stdout
    assert "Fix the NVIDIA driver first" in result.stdout
    report = json.loads(diagnose(run_fdl, tmp_path, machine, "--json").stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["verdict"]["status"] == "driver" and advice in report["verdict"]["summary"]


def test_a_loaded_driver_without_nvidia_smi_is_not_a_machine_without_a_gpu(run_fdl, tmp_path):
    root = tmp_path / "root" / "sys/module/nvidia"
    root.mkdir(parents=True)
    (root / "version").write_text("575.64.03\n")
    result = diagnose(run_fdl, tmp_path, None, FDL_PROBE_ROOT=str(tmp_path / "root"))
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "fine:" not in out and "no NVIDIA GPU here" not in out
    assert (
        "driver: the NVIDIA kernel module 575.64.03 is loaded but nvidia-smi was not found" in out
    )
    assert "fdl setup refuses to choose a build" in out and "no NVIDIA GPU detected" not in out


def cpu_machine(torch: TorchInstall | None):
    machine = detect(docker=False)
    machine = dataclasses.replace(machine, nvidia=dataclasses.replace(machine.nvidia, gpus=[]))
    return dataclasses.replace(machine, torch=torch)


def test_a_cuda_build_without_a_gpu_works_and_no_torch_needs_fixing():
    cuda = TorchInstall("2.13.0+cu126", "cu126", "12.6", None)
    machine = cpu_machine(cuda)
    plan = resolve(machine.target())
    judged = verdict(machine, plan, [])
    assert judged["status"] == "works" and "the CPU build is smaller" in judged["summary"]
    missing = cpu_machine(None)
    assert verdict(missing, plan, [])["status"] == "fix"
    assert verdict(machine, None, []) is None  # nothing to judge against
