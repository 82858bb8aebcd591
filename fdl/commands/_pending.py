"""The honest answer of a command whose implementation has not landed in this build."""

from __future__ import annotations

from fdl.errors import ExitCode, FdlError

NOT_YET = "(not available in this build yet)"


def pending(command: str) -> FdlError:
    """The error a not-yet-implemented command raises instead of pretending to work."""
    return FdlError(
        f"'fdl {command}' is not available in this build yet",
        "see docs/cli.md for what each command will do",
        ExitCode.UNAVAILABLE,
    )
