"""The Python environment and the torch installed in it — read from package metadata, no import.

``torch/version.py`` is a plain generated file (``cuda = '12.8'``), so its build is readable as
text; importing torch (seconds, gigabytes of libraries) is left to ``fdl setup``'s verification.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

COMPANIONS = ("torchvision", "torchaudio")


@dataclass
class TorchInstall:
    version: str  # "2.8.0+cu128"
    tag: str | None  # "cu128", "cpu", "rocm6.4" (a PyPI wheel without local tag: from its CUDA)
    cuda: str | None  # from torch/version.py
    location: str | None
    companions: dict[str, str] = field(default_factory=dict)

    @property
    def public_version(self) -> str:
        return self.version.split("+")[0]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PythonEnv:
    version: str
    executable: str
    prefix: str
    kind: str  # venv | conda | system

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def probe_python() -> PythonEnv:
    if os.environ.get("CONDA_PREFIX") and sys.prefix == os.environ["CONDA_PREFIX"]:
        kind = "conda"
    elif sys.prefix != sys.base_prefix:
        kind = "venv"
    else:
        kind = "system"
    version = ".".join(map(str, sys.version_info[:3]))
    return PythonEnv(version, sys.executable, sys.prefix, kind)


def _version_py_cuda(dist: metadata.Distribution) -> str | None:
    try:
        text = open(str(dist.locate_file("torch/version.py")), encoding="utf-8").read()  # noqa: SIM115
    except OSError:
        return None
    match = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return match.group(1) if match else None


def probe_torch(python: str | None = None) -> tuple[TorchInstall | None, str | None]:
    """(installed torch, reason when absent) — here, or in the environment of ``python``."""
    if python and python != sys.executable:
        return _probe_torch_in(python)
    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return None, "torch is not installed in this environment"
    version = dist.version
    tag = version.split("+", 1)[1] if "+" in version else None
    cuda = _version_py_cuda(dist)
    if tag is None:  # a PyPI wheel: Linux ones are CUDA builds, macOS/Windows ones CPU builds
        tag = "cu" + cuda.replace(".", "") if cuda else "cpu"
    companions = {}
    for name in COMPANIONS:
        with contextlib.suppress(metadata.PackageNotFoundError):
            companions[name] = metadata.version(name)
    location = str(dist.locate_file("torch"))
    return TorchInstall(version, tag, cuda, location, companions), None


def _probe_torch_in(python: str) -> tuple[TorchInstall | None, str | None]:
    """Ask another interpreter the same question (its metadata, still no torch import)."""
    import json
    import subprocess

    script = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "from fdl.hardware.python_env import probe_torch; "
        "t, why = probe_torch(); print(json.dumps([t and t.to_dict(), why]))"
    )
    root = str(Path(__file__).resolve().parents[2])  # this checkout's fdl, importable there
    try:
        proc = subprocess.run(
            [python, "-c", script, root], capture_output=True, text=True, timeout=60
        )
        data, why = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as err:
        return None, f"could not ask {python} about torch: {err}"
    return (TorchInstall(**data) if data else None), why
