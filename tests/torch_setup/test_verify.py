"""Post-install verification, against stand-in torch packages that report simulated GPUs.

The stand-in is a real ``torch`` package on PYTHONPATH of the verifying interpreter (the process
boundary), answering like a CUDA build would: arch list, capabilities, kernels that fail with
torch's own message when the arch is missing, NCCL present or not.
"""

from __future__ import annotations

import json
import sys

from fdl.torch_setup import verify_torch

FAKE = """
import json as _json
_SPEC = _json.loads({spec!r})
__version__ = _SPEC["version"]


class version:
    cuda = _SPEC["cuda"]


class _T:
    def __init__(self, v, device="cpu"):
        self.v, self.device = list(v), device

    def __mul__(self, k):
        return _T([x * k for x in self.v], self.device)

    def sum(self):
        return _T([sum(self.v)], self.device)

    def item(self):
        return self.v[0]


def ones(n, device="cpu"):
    if device.startswith("cuda:"):
        dev = _SPEC["devices"][int(device[5:])]
        if not dev.get("works", True):
            raise RuntimeError("CUDA error: no kernel image is available for execution on the device")
    return _T([1.0] * n, device)


class cuda:
    @staticmethod
    def is_available():
        return bool(_SPEC["devices"])

    @staticmethod
    def get_arch_list():
        return _SPEC["arch_list"]

    @staticmethod
    def device_count():
        return len(_SPEC["devices"])

    @staticmethod
    def get_device_name(i):
        return _SPEC["devices"][i]["name"]

    @staticmethod
    def get_device_capability(i):
        return tuple(_SPEC["devices"][i]["cc"])

    @staticmethod
    def synchronize(i=None):
        pass


class distributed:
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def is_nccl_available():
        return _SPEC["nccl"]


import sys as _sys
_sys.modules["torch.distributed"] = distributed
"""

CU126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
GTX1060 = {"name": "NVIDIA GeForce GTX 1060 6GB", "cc": [6, 1]}
RTX5060TI = {"name": "NVIDIA GeForce RTX 5060 Ti", "cc": [12, 0]}


def fake_torch(tmp_path, monkeypatch, **spec):
    spec = {"version": "2.14.0+cu126", "cuda": "12.6", "arch_list": CU126, "nccl": True, **spec}
    pkg = tmp_path / "fake" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE.format(spec=json.dumps(spec)))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))


def test_all_gpus_covered_and_kernels_run(tmp_path, monkeypatch):
    fake_torch(tmp_path, monkeypatch, devices=[GTX1060, GTX1060])
    result = verify_torch(sys.executable, expected_gpus=2)
    assert result.ok, result.problems
    assert "GPU 0 NVIDIA GeForce GTX 1060 6GB (sm_61): archs sass, kernel ok" in result.lines
    assert "NCCL: available" in result.lines


def test_missing_arch_and_failing_kernel_are_reported(tmp_path, monkeypatch):
    fake_torch(tmp_path, monkeypatch, devices=[GTX1060, {**RTX5060TI, "works": False}])
    result = verify_torch(sys.executable, expected_gpus=2)
    assert not result.ok
    text = "; ".join(result.problems)
    assert "GPU 1 NVIDIA GeForce RTX 5060 Ti (sm_120) is not in torch's arch list" in text
    assert "no kernel image is available" in text
    assert "GPU 0" not in text


def test_missing_nccl_with_two_gpus(tmp_path, monkeypatch):
    fake_torch(tmp_path, monkeypatch, devices=[GTX1060, GTX1060], nccl=False)
    result = verify_torch(sys.executable, expected_gpus=2)
    assert not result.ok and any("NCCL is missing" in p for p in result.problems)


def test_cpu_build_on_a_gpu_machine(tmp_path, monkeypatch):
    fake_torch(tmp_path, monkeypatch, version="2.14.0+cpu", cuda=None, arch_list=[], devices=[])
    result = verify_torch(sys.executable, expected_gpus=1)
    assert not result.ok
    assert any(
        "torch.cuda.is_available() is False" in p and "a CPU build" in p for p in result.problems
    )


def test_a_torch_that_cannot_import(tmp_path, monkeypatch):
    pkg = tmp_path / "fake" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "raise OSError('libcudnn.so.9: cannot open shared object file')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    result = verify_torch(sys.executable)
    assert not result.ok and "libcudnn.so.9" in result.problems[0]


def test_an_interpreter_that_does_not_exist(tmp_path):
    result = verify_torch(str(tmp_path / "nope" / "python"))
    assert not result.ok and "could not run" in result.problems[0]


def stand_in_wheel(tmp_path, monkeypatch, tag: str, gpus: list[dict], archs: list[str]) -> None:
    """The stand-in torch of tests/torch_setup/fake_torch_wheel.py, unpacked on PYTHONPATH: it
    honours CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER as the CUDA runtime does."""
    import io
    import zipfile

    from tests.torch_setup.fake_torch_wheel import build_wheel

    _, data = build_wheel("2.14.1", tag, gpus=gpus, archs=archs)
    zipfile.ZipFile(io.BytesIO(data)).extractall(tmp_path / "wheel")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "wheel"))


def test_an_inherited_cuda_visible_devices_is_named_as_the_likely_cause(tmp_path, monkeypatch):
    stand_in_wheel(tmp_path, monkeypatch, "cu126", [GTX1060], CU126)
    assert verify_torch(sys.executable, expected_gpus=1).ok  # the install itself is fine
    for inherited in ("", "GPU-not-a-uuid"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", inherited)
        result = verify_torch(sys.executable, expected_gpus=1)
        assert not result.ok
        (problem,) = result.problems
        assert problem.startswith("1 GPU(s) present but torch.cuda.is_available() is False")
        assert f"CUDA_VISIBLE_DEVICES={inherited!r} is set in this environment" in problem
        assert "unset it" in problem


def test_an_inherited_mask_hiding_some_gpus_is_named(tmp_path, monkeypatch):
    stand_in_wheel(tmp_path, monkeypatch, "cu126", [GTX1060, GTX1060], CU126)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    (problem,) = verify_torch(sys.executable, expected_gpus=2).problems
    assert "torch sees 1 GPU(s), 2 expected: CUDA_VISIBLE_DEVICES='1' is set" in problem
    # the plan's own mask replaces the inherited one (and counts in nvidia-smi's order)
    assert verify_torch(sys.executable, expected_gpus=1, visible_devices="0").ok
