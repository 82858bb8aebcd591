"""Helpers for running generated projects: which flodl APIs the template needs, and a shell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import flodl
from tests.conftest import clean_env

# What the generated model, training script and tests call (DESIGN.md §3).
NEEDED = (
    "FlowBuilder",
    "Graph",
    "Monitor",
    "manual_seed",
    "save_optimizer_state",
    "load_optimizer_state",
)
NEEDED_OPTIM = ("CosineScheduler", "set_lr")


def missing_apis() -> list[str]:
    missing = [f"fl.{name}" for name in NEEDED if not hasattr(flodl, name)]
    missing += [f"fl.optim.{name}" for name in NEEDED_OPTIM if not hasattr(flodl.optim, name)]
    return missing


def skip_reason() -> str:
    return "the generated project needs flodl APIs that are not in this build yet: " + ", ".join(
        missing_apis()
    )


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
