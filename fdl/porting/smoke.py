"""The smoke run of ``fdl check``: the script, for real, on a tiny budget, under a timeout.

The child runs with ``FLODL_SMOKE=1``: a training script runs at most 2 epochs of at most 2
batches each (per rank). ``fl.data.DataLoader`` caps the batches of every epoch, ``fl.Trainer``
caps its own loop, and a loop you wrote is ended by the ``fl.Monitor`` that logs it: after the 2nd
epoch it finishes and raises ``SmokeBudgetReached`` (exit code 0), reported here as a pass,
"stopped by the smoke budget after 2 epochs". Code after that loop does not run. So a real
training script finishes in seconds and still goes through build, forward, backward, the
optimizer step and logging. Loops that use none of these can read ``FLODL_SMOKE`` themselves.
The timeout is the backstop: a script that does not finish in time fails the check, and its
whole process group is killed.

The script runs as ``python SCRIPT`` would, from its own directory on ``sys.path``; in a src
layout (the nearest ``pyproject.toml`` has a ``src/`` beside it) ``src/`` is on the path too, so
``src/<pkg>/train.py`` can import its own package without being installed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

RUNNER = Path(__file__).with_name("_smoke_runner.py")
SMOKE_ENV = "FLODL_SMOKE"
TAIL_LINES = 20


@dataclass
class SmokeResult:
    status: str  # passed | failed | timeout
    seconds: float
    returncode: int | None
    exception: dict | None = None  # type, module, message, notes, frames (from the runner)
    location: dict | None = None  # the innermost frame inside the script
    output_tail: list[str] = field(default_factory=list)
    # set when flodl's Monitor ended the run at the smoke budget: {"epochs": 2, "message": ...}
    budget_stop: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def run_smoke(
    script: Path, *, timeout: float, python: str = sys.executable, args: list[str] | None = None
) -> SmokeResult:
    """Run ``script`` with ``FLODL_SMOKE=1`` in its own process group; never raises on failure."""
    script = script.resolve()
    with tempfile.TemporaryDirectory(prefix="fdl-check-") as tmp:
        report = Path(tmp) / "report.json"
        env = {
            **os.environ,
            SMOKE_ENV: "1",
            "FDL_CHECK_REPORT": str(report),
            "PYTHONUNBUFFERED": "1",
        }
        start = time.perf_counter()
        proc = subprocess.Popen(
            [python, str(RUNNER), str(script), *(args or [])],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=env,
            start_new_session=True,  # one group: DDP workers it spawns die with it
        )
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            output, _ = proc.communicate()
            return SmokeResult(
                "timeout", time.perf_counter() - start, None, output_tail=_tail(output)
            )
        seconds = time.perf_counter() - start
        document = _read(report) or {}
    if proc.returncode == 0:
        result = SmokeResult("passed", seconds, 0, output_tail=_tail(output))
        stop = document.get("budget_stop")
        if isinstance(stop, dict):
            epochs = stop.get("epochs")
            after = f" after {epochs} epochs" if isinstance(epochs, int) else ""
            result.budget_stop = {
                "epochs": epochs,
                "message": f"stopped by the smoke budget{after}",
            }
        return result
    exception = document.get("exception")
    location = None
    if exception:
        inside = [f for f in exception["frames"] if Path(f["file"]).resolve() == script]
        location = inside[-1] if inside else None
    return SmokeResult("failed", seconds, proc.returncode, exception, location, _tail(output))


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _read(report: Path) -> dict | None:
    try:
        document = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def _tail(output: str) -> list[str]:
    return output.rstrip("\n").splitlines()[-TAIL_LINES:] if output else []
