"""fdl — the flodl toolchain.

Hardware detection, torch/libtorch variant resolution and download, project scaffolding, an
``fdl.yml`` task runner, an API reference for AI assistants, the ``/port`` skill and its
validator. Run ``fdl --help``.

This package must stay cheap to import: ``fdl --help`` never imports torch, requests, docker,
jinja2 or griffe; commands import what they need inside their own body.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

__all__ = ["__version__"]


def _read_flodl_version() -> str:
    # `import flodl` would import torch; read the single-source version file instead.
    spec = importlib.util.find_spec("flodl")
    if spec is None or spec.origin is None:
        return "0+unknown"
    text = Path(spec.origin).with_name("_version.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.MULTILINE)
    return match.group(1) if match else "0+unknown"


__version__ = _read_flodl_version()
