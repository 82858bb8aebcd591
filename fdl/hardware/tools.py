"""Run an external tool and get its output, or a reason it failed — never an exception."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass


@dataclass
class ToolResult:
    ok: bool
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    reason: str | None = None  # why it failed, in words


def run_tool(argv: list[str], timeout: float = 10.0) -> ToolResult:
    """Run ``argv``; ``ok`` only for exit code 0. Output is capped (a tool must not flood us)."""
    exe = shutil.which(argv[0]) if "/" not in argv[0] else argv[0]
    if exe is None:
        return ToolResult(False, reason=f"{argv[0]} not found on PATH")
    try:
        proc = subprocess.run(
            [exe, *argv[1:]],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return ToolResult(False, reason=f"{argv[0]} did not answer within {timeout:g}s")
    except OSError as exc:
        return ToolResult(False, reason=f"{argv[0]} could not run: {exc.strerror or exc}")
    out, err = proc.stdout[:1_000_000], proc.stderr[:100_000]
    if proc.returncode != 0:
        first = (out.strip() or err.strip()).splitlines()[:1]
        detail = f": {first[0]}" if first else ""
        return ToolResult(
            False, out, err, proc.returncode, f"{argv[0]} exited {proc.returncode}{detail}"
        )
    return ToolResult(True, out, err, 0)
