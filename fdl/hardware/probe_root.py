"""Where the filesystem probes look: ``/``, or the directory in ``FDL_PROBE_ROOT``.

Every fact read from a file (``/proc``, ``/sys``, ``/.dockerenv``, ``/usr/lib/wsl``) goes through
:func:`host_path`, so the real probe code can be pointed at a laid-out tree — a WSL2 machine, a
container, a driver whose ``nvidia-smi`` is broken — in tests, or at a mounted system image.
"""

from __future__ import annotations

import os
from pathlib import Path

PROBE_ROOT_ENV = "FDL_PROBE_ROOT"


def host_path(path: str) -> Path:
    """``path`` (absolute, as on a live system) under the probe root."""
    root = os.environ.get(PROBE_ROOT_ENV)
    return Path(root, path.lstrip("/")) if root else Path(path)
