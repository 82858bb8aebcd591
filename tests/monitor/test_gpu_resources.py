"""The GPU paths on a machine without a GPU.

With NVML: a fake libnvidia-ml.so.1 (replaying an L4 machine's readings) is put on LD_LIBRARY_PATH
of a subprocess, so nvidia-ml-py and the monitor run unchanged and only the driver is simulated.
Without NVML: torch.cuda (the boundary with torch) reports devices, and the allocator's counters
must still give the VRAM figures."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import flodl as fl
from tests import fake_nvml

GiB = 1024**3

FIXTURE = Path(__file__).parent / "fixtures" / "fake_nvml.c"

SCRIPT = """
import io, json
import flodl as fl
from flodl.monitor.resources import hardware_summary
out = io.StringIO()
mon = fl.Monitor(2, stream=out)
record = mon.log(0, 1.5, {"loss": 0.5})
mon.close()
print(json.dumps({"line": out.getvalue(), "resources": record.to_json()["resources"],
                  "hardware": hardware_summary()}))
"""


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory) -> Path:
    return fake_nvml.build(FIXTURE, tmp_path_factory.mktemp("nvml"))


@pytest.mark.slow  # a subprocess importing torch
def test_gpu_utilisation_and_vram_per_device(fake_driver, repo_root):
    env = {
        "LD_LIBRARY_PATH": str(fake_driver),
        "PYTHONPATH": str(repo_root),
        "PATH": "/usr/bin:/bin",
    }
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    gpus = report["resources"]["gpus"]
    assert [(g["dev"], g["name"], g["util"]) for g in gpus] == [
        (0, "NVIDIA L4", 87.0),
        (1, "NVIDIA L4", 64.0),
    ]
    assert [g["vram_alloc"] for g in gpus] == [3 * 1024**3, 1024**3]
    assert report["resources"]["gpu"] == 75.5  # mean over devices
    assert report["resources"]["vram_total"] == 24152899584
    assert "  VRAM: 3.0 GB / 22.5 GB (76%)  CPU: " in report["line"]
    assert report["hardware"].endswith(" | NVIDIA L4 (22GB) | NVIDIA L4 (22GB)")


@pytest.fixture
def cuda_without_nvml(monkeypatch):
    """Two CUDA devices as torch.cuda reports them, and no nvidia-ml-py (its import fails)."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    reserved = {0: 3 * GiB, 1: 512 * 1024**2}
    cuda = torch.cuda
    monkeypatch.setattr(cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(cuda, "device_count", lambda: 2)
    monkeypatch.setattr(cuda, "memory_reserved", lambda device=None: reserved[device])
    monkeypatch.setattr(cuda, "mem_get_info", lambda device=None: (10 * GiB, 16 * GiB))
    monkeypatch.setattr(cuda, "get_device_name", lambda device=None: f"Fake GPU {device}")
    return reserved


def test_without_nvml_the_allocator_counters_give_vram(cuda_without_nvml):
    out = io.StringIO()
    mon = fl.Monitor(2, stream=out, color=False)
    try:
        record = mon.log(0, 1.5, {"loss": 0.5})
    finally:
        mon.close()
    line = out.getvalue()
    # device 0's reservation over its total; no utilisation without NVML, so no "(x%)"
    assert "  VRAM: 3.0 GB / 16.0 GB  CPU: " in line, line
    resources = record.to_json()["resources"]
    assert (resources["vram_alloc"], resources["vram_total"]) == (3 * GiB, 16 * GiB)
    assert "gpu" not in resources  # unknown utilisation is left out, not shown as 0
    assert [(g["dev"], g["name"], g["vram_alloc"]) for g in resources["gpus"]] == [
        (0, "Fake GPU 0", 3 * GiB),
        (1, "Fake GPU 1", 512 * 1024**2),
    ]
