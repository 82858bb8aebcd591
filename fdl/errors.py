"""One error style and one set of exit codes for the whole CLI.

Every failure a user can act on is raised as :class:`FdlError` and printed by ``fdl.main`` as
``error: <what> — <what to do>`` on stderr, with the exit code it carries.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Exit codes of ``fdl`` (documented in docs/cli.md)."""

    OK = 0
    FAILURE = 1  # the command ran and failed
    USAGE = 2  # bad command line: unknown command, bad option, bad value
    UNAVAILABLE = 3  # something the command needs is missing (a manifest, a daemon, a GPU, network)
    INTERRUPTED = 130  # Ctrl-C


class FdlError(Exception):
    """An error the user can act on.

    ``what`` says what went wrong; ``hint`` says what to do about it.
    """

    def __init__(self, what: str, hint: str | None = None, code: ExitCode = ExitCode.FAILURE):
        super().__init__(what)
        self.what = what
        self.hint = hint
        self.code = ExitCode(code)

    def __str__(self) -> str:
        return f"{self.what} — {self.hint}" if self.hint else self.what


class FdlUsageError(FdlError):
    """The command line itself is wrong (exit code 2)."""

    def __init__(self, what: str, hint: str | None = None):
        super().__init__(what, hint, ExitCode.USAGE)
