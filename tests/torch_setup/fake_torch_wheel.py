"""A tiny wheel named ``torch`` standing in for a torch build, and a PEP 503 index serving it.

A CUDA stand-in can report simulated GPUs (``gpus=``): it honours CUDA_VISIBLE_DEVICES and
CUDA_DEVICE_ORDER like the real runtime (fastest first unless ``PCI_BUS_ID``), and a kernel on a
GPU its arch list does not cover fails with torch's own message.
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile

TORCH_INIT = """
__version__ = "{version}"
from torch import version, cuda


class _Tensor:
    def __init__(self, values):
        self.values = list(values)

    def __mul__(self, k):
        return _Tensor([v * k for v in self.values])

    def sum(self):
        return _Tensor([sum(self.values)])

    def item(self):
        return self.values[0]


def ones(n, device="cpu"):
    if device.startswith("cuda:"):
        cuda._launch(int(device[5:]))
    return _Tensor([1.0] * n)
"""
VERSION_PY = 'cuda = {cuda!r}\n__version__ = "{version}"\n'
CUDA_INIT = """
import os as _os

_GPUS = {gpus!r}
_ARCHS = {archs!r}


def _visible():
    # CUDA numbers GPUs fastest first (here: the newest architecture first) unless told to use
    # PCI bus order, which is nvidia-smi's (and _GPUS's) order
    gpus = _GPUS
    if _os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        gpus = sorted(_GPUS, key=lambda g: tuple(g["cc"]), reverse=True)
    wanted = _os.environ.get("CUDA_VISIBLE_DEVICES")
    if wanted is None:
        return gpus
    picked = []
    for item in wanted.split(","):
        if not item.strip().isdigit() or int(item) >= len(gpus):
            break  # like CUDA: an invalid entry hides it and every GPU after it
        picked.append(gpus[int(item)])
    return picked


def is_available():
    return bool(_visible())


def get_arch_list():
    return list(_ARCHS) if is_available() else []


def device_count():
    return len(_visible())


def get_device_name(i):
    return _visible()[i]["name"]


def get_device_capability(i):
    return tuple(_visible()[i]["cc"])


def synchronize(i=None):
    pass


def _launch(i):
    major, minor = _visible()[i]["cc"]
    native = any(a == f"sm_{{major}}{{m}}" for a in _ARCHS for m in range(minor + 1))
    ptx = any(a.startswith("compute_") and int(a[8:]) <= major * 10 + minor for a in _ARCHS)
    if not (native or ptx):
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device")
"""
DISTRIBUTED_INIT = """
def is_available():
    return True


def is_nccl_available():
    return True
"""


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


WHEEL = b"Wheel-Version: 1.0\nGenerator: flodl-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def build_wheel(
    version: str,
    tag: str,
    *,
    broken: bool = False,
    gpus: list[dict] | None = None,
    archs: list[str] | None = None,
) -> tuple[str, bytes]:
    """(file name, bytes) of ``torch-<version>+<tag>-py3-none-any.whl``.

    ``gpus``: ``[{"name": ..., "cc": [6, 1]}, ...]`` the build sees (a CPU build sees none);
    ``archs``: its ``torch.cuda.get_arch_list()`` (``["sm_75", ..., "compute_120"]``).
    """
    full = f"{version}+{tag}"
    dist = f"torch-{full}.dist-info"
    files = {
        "torch/__init__.py": (
            "raise ImportError('libtorch_cuda.so: cannot open shared object file')\n"
            if broken
            else TORCH_INIT.format(version=full)
        ).encode(),
        "torch/version.py": VERSION_PY.format(
            cuda=None if tag == "cpu" else "12.8", version=full
        ).encode(),
        "torch/cuda/__init__.py": CUDA_INIT.format(
            gpus=list(gpus or []) if tag != "cpu" else [], archs=list(archs or [])
        ).encode(),
        "torch/distributed/__init__.py": DISTRIBUTED_INIT.encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {full}\n".encode(),
    }
    return f"torch-{full}-py3-none-any.whl", _zip_wheel(files, dist)


def _zip_wheel(files: dict[str, bytes], dist: str) -> bytes:
    """A pure-Python wheel's bytes: ``files`` plus its ``WHEEL`` and ``RECORD`` in ``dist``."""
    files = {**files, f"{dist}/WHEEL": WHEEL}
    record = [_record_line(n, d) for n, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def build_companion(name: str, version: str, tag: str, torch: str) -> tuple[str, bytes]:
    """(file name, bytes) of ``<name>-<version>+<tag>-py3-none-any.whl`` (torchvision, torchaudio)
    requiring ``torch==<torch>``, as the real ones pin their torch."""
    full = f"{version}+{tag}"
    dist = f"{name}-{full}.dist-info"
    files = {
        f"{name}/__init__.py": f'__version__ = "{full}"\n'.encode(),
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {full}\nRequires-Dist: torch=={torch}\n"
        ).encode(),
    }
    return f"{name}-{full}-py3-none-any.whl", _zip_wheel(files, dist)


def serve_index(server, tag: str, wheels: list[tuple[str, bytes]]) -> None:
    """``/whl/<tag>/<project>/`` (PEP 503) listing ``wheels`` (torch, and any companions), each
    served with its sha256."""
    projects: dict[str, list[str]] = {"torch": []}
    for name, data in wheels:
        href = f"/files/{name}".replace("+", "%2B")
        server.add(f"/files/{name}", data)
        link = f'<a href="{href}#sha256={hashlib.sha256(data).hexdigest()}">{name}</a><br/>'
        projects.setdefault(name.split("-")[0], []).append(link)
    for project, links in projects.items():
        page = "<!DOCTYPE html><html><body>" + "".join(links) + "</body></html>"
        server.add(f"/whl/{tag}/{project}/", page.encode(), etag=None, content_type="text/html")
    root = "".join(f'<a href="{p}/">{p}</a>' for p in projects)
    server.add(
        f"/whl/{tag}/",
        f"<html><body>{root}</body></html>".encode(),
        etag=None,
        content_type="text/html",
    )
