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
from tests.fixtures.machines import lay_out_gpu_signs
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
    ("machine", "signs", "advice"),
    [
        ("driver_library_mismatch", {"nodes": True}, "the driver was upgraded without a reboot"),
        ("driver_not_loaded", {"pci": True}, "reinstall the NVIDIA driver"),
    ],
)
def test_an_installed_driver_that_lists_no_gpu_is_not_fine(
    run_fdl, tmp_path, machine, signs, advice
):
    root = str(lay_out_gpu_signs(tmp_path / "root", **signs))
    result = diagnose(run_fdl, tmp_path, machine, FDL_PROBE_ROOT=root)
    assert result.returncode == 0, result.stderr
    verdict_line = result.stdout.split("\nVerdict\n", 1)[1].splitlines()[0]
    assert verdict_line.startswith("  driver: nvidia-smi is installed but reported no GPU (")
    assert advice in verdict_line and f"until then torch {INSTALLED} sees no GPU" in verdict_line
    assert "fine:" not in result.stdout and "Nothing to do" not in result.stdout
    assert "Fix the NVIDIA driver first" in result.stdout
    report = json.loads(diagnose(run_fdl, tmp_path, machine, "--json", FDL_PROBE_ROOT=root).stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["verdict"]["status"] == "driver" and advice in report["verdict"]["summary"]


def test_a_loaded_driver_without_nvidia_smi_is_not_a_machine_without_a_gpu(run_fdl, tmp_path):
    root = str(lay_out_gpu_signs(tmp_path / "root", module="575.64.03", nodes=True))
    result = diagnose(run_fdl, tmp_path, None, FDL_PROBE_ROOT=root)
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "fine:" not in out and "no NVIDIA GPU here" not in out
    assert (
        "driver: the NVIDIA kernel module 575.64.03 is loaded but nvidia-smi was not found" in out
    )
    assert "fdl setup refuses to choose a build" in out and "no NVIDIA GPU detected" not in out


@pytest.mark.parametrize(
    ("machine", "signs"),
    [
        (None, {"module": "575.64.03"}),  # a container without GPU access on a GPU host
        ("driver_not_loaded", {}),  # a CPU VM made from an image with the driver's tools
        ("driver_library_mismatch", {"module": "575.64.03"}),  # the same, in a container
    ],
)
def test_driver_traces_without_a_gpu_are_a_cpu_machine(run_fdl, tmp_path, machine, signs):
    root = str(lay_out_gpu_signs(tmp_path / "root", **signs))
    result = diagnose(run_fdl, tmp_path, machine, FDL_PROBE_ROOT=root)
    assert result.returncode == 0, result.stderr
    assert f"fine: torch {INSTALLED} is the right build" in result.stdout
    assert "driver:" not in result.stdout


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
