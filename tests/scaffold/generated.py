"""Helpers for generated projects: a shell with this checkout's fdl and python, and what their
checkpoints hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import clean_env


def shell(script: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with bash, with this interpreter's ``python`` and ``fdl`` first on PATH."""
    bin_dir = Path(sys.executable).parent
    env = clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def saved_epoch(checkpoints: Path) -> int:
    """The epoch recorded in a generated train.py's checkpoint (its one ``training.fdl``)."""
    import flodl as fl

    meta = fl.read_checkpoint(checkpoints / "training.fdl")["training.json"]  # the JSON part
    return json.loads(meta.numpy().tobytes())["epoch"]
