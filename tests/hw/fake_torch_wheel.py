"""A tiny wheel named ``torch`` standing in for a torch build, and a PEP 503 index serving it."""

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

    def sum(self):
        return _Tensor([sum(self.values)])

    def item(self):
        return self.values[0]


def ones(n):
    return _Tensor([1.0] * n)
"""
VERSION_PY = 'cuda = {cuda!r}\n__version__ = "{version}"\n'
CUDA_INIT = """
def is_available():
    return False

def get_arch_list():
    return []

def device_count():
    return 0
"""


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(version: str, tag: str, *, broken: bool = False) -> tuple[str, bytes]:
    """(file name, bytes) of ``torch-<version>+<tag>-py3-none-any.whl``."""
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
        "torch/cuda/__init__.py": CUDA_INIT.encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {full}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: flodl-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [_record_line(n, d) for n, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return f"torch-{full}-py3-none-any.whl", buf.getvalue()


def serve_index(server, tag: str, wheels: list[tuple[str, bytes]]) -> None:
    """``/whl/<tag>/torch/`` (PEP 503) listing ``wheels``, each served with its sha256."""
    links = []
    for name, data in wheels:
        href = f"/files/{name}".replace("+", "%2B")
        server.add(f"/files/{name}", data)
        links.append(f'<a href="{href}#sha256={hashlib.sha256(data).hexdigest()}">{name}</a><br/>')
    page = "<!DOCTYPE html><html><body>" + "".join(links) + "</body></html>"
    server.add(f"/whl/{tag}/torch/", page.encode(), etag=None, content_type="text/html")
    server.add(
        f"/whl/{tag}/",
        b'<html><body><a href="torch/">torch</a></body></html>',
        etag=None,
        content_type="text/html",
    )
