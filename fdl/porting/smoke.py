"""The smoke run of ``fdl check``: the script, for real, on a tiny budget, under a timeout.

The child runs with ``FLODL_SMOKE=1``. flodl's Monitor, Trainer and DataLoader read it and cap
the work (at most 2 epochs of at most 2 batches), so a real training script finishes in seconds
and still goes through build, forward, backward, the optimizer step, logging and checkpointing.
Code that loops on its own can read ``FLODL_SMOKE`` too. The timeout is the backstop: a script
that does not finish in time fails the check, and its whole process group is killed.
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
        exception = _read(report)
    if proc.returncode == 0:
        return SmokeResult("passed", seconds, 0, output_tail=_tail(output))
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
        return json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _tail(output: str) -> list[str]:
    return output.rstrip("\n").splitlines()[-TAIL_LINES:] if output else []
