"""Run an external tool and get its output, or a reason it failed — never an exception."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass


@dataclass
class ToolResult:
    ok: bool
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    reason: str | None = None  # why it failed, in words
    timed_out: bool = False


def run_tool(argv: list[str], timeout: float = 10.0) -> ToolResult:
    """Run ``argv``; ``ok`` only for exit code 0. Output is capped (a tool must not flood us).

    The tool runs in its own process group: on a timeout the whole group is killed, so a hung
    wrapper script (or a driver tool's helpers) leaves no orphans behind.
    """
    exe = shutil.which(argv[0]) if "/" not in argv[0] else argv[0]
    if exe is None:
        return ToolResult(False, reason=f"{argv[0]} not found on PATH")
    try:
        proc = subprocess.Popen(
            [exe, *argv[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as exc:
        return ToolResult(False, reason=f"{argv[0]} could not run: {exc.strerror or exc}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return ToolResult(
            False, reason=f"{argv[0]} did not answer within {timeout:g}s", timed_out=True
        )
    except BaseException:  # Ctrl-C: its own session does not get the signal from the terminal
        _kill_group(proc)
        raise
    out, err = out[:1_000_000], err[:100_000]
    if proc.returncode != 0:
        first = (out.strip() or err.strip()).splitlines()[:1]
        detail = f": {first[0]}" if first else ""
        return ToolResult(
            False, out, err, proc.returncode, f"{argv[0]} exited {proc.returncode}{detail}"
        )
    return ToolResult(True, out, err, 0)


def _kill_group(proc: subprocess.Popen) -> None:
    if hasattr(os, "killpg"):  # POSIX; on Windows the process alone
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=5)  # the pipes close once the group is gone
