"""Fixtures for hardware, variant and download tests.

GPUs are simulated at the process boundary: a fake ``nvidia-smi`` on PATH replays the outputs in
fixtures/nvidia_smi/<machine>/. PATH holds nothing else, so a real driver never leaks in.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import zipfile
from pathlib import Path

import pytest

from tests.hw.loopback import LoopbackServer

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia_smi"
MACHINES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())

FAKE_SMI = """#!{sh}
d='{dir}'
case "$*" in
  *compute_cap*) f=query ;;
  *--query-gpu*) f=legacy ;;
  *) f=banner ;;
esac
[ -f "$d/$f.txt" ] || exit 6
{cat} "$d/$f.txt"
[ -f "$d/$f.rc" ] && exit "$({cat} "$d/$f.rc")"
exit 0
"""


def write_fake_smi(path: Path, machine: str) -> Path:
    """An executable at ``path`` replaying ``machine``'s nvidia-smi outputs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        FAKE_SMI.format(dir=FIXTURES / machine, cat=shutil.which("cat"), sh=shutil.which("sh"))
    )
    path.chmod(path.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    return path


def make_bin(tmp: Path, machine: str | None) -> Path:
    """A PATH directory holding only the fake nvidia-smi for ``machine`` (or nothing)."""
    bin_dir = tmp / f"bin-{machine or 'none'}"
    bin_dir.mkdir(exist_ok=True)
    if machine:
        write_fake_smi(bin_dir / "nvidia-smi", machine)
    return bin_dir


@pytest.fixture
def gpu_machine(tmp_path, monkeypatch):
    """``gpu_machine("gtx1060")`` puts that machine's fake nvidia-smi (alone) on PATH."""

    def use(machine: str | None) -> dict[str, str]:
        bin_dir = make_bin(tmp_path, machine)
        env = {"PATH": str(bin_dir), "FDL_NVML": "0"}
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("WSL_DISTRO_NAME", raising=False)
        return env

    return use


@pytest.fixture
def server():
    with LoopbackServer() as srv:
        yield srv


def libtorch_zip(
    *,
    lib: str = "libtorch.so",
    extra: dict[str, bytes] | None = None,
    symlinks: dict[str, str] | None = None,
    top: str = "libtorch",
) -> bytes:
    """A small archive shaped like libtorch's: ``libtorch/{lib,include,share}``."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{top}/lib/{lib}", b"\x7fELF fake torch library " * 200)
        zf.writestr(f"{top}/include/torch/torch.h", b"#pragma once\n")
        zf.writestr(f"{top}/share/cmake/Torch/TorchConfig.cmake", b"# cmake\n")
        zf.writestr(f"{top}/build-version", b"2.14.0+cpu\n")
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return buf.getvalue()


def fdl_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """Environment for a CLI run: no GPU on PATH, fdl's home inside tmp_path."""
    env = {
        "PATH": str(make_bin(tmp_path, None)),
        "FDL_NVML": "0",
        "FLODL_HOME": str(tmp_path / "flodl-home"),
        "HOME": str(tmp_path / "home"),
    }
    env.update(extra)
    return env


__all__ = ["MACHINES", "fdl_env", "libtorch_zip", "make_bin", "os", "write_fake_smi"]
