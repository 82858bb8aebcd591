"""One error style and one set of exit codes for the whole CLI.

Every failure a user can act on is raised as :class:`FdlError` and printed by ``fdl.main`` as
``error: <what> — <what to do>`` on stderr, with the exit code it carries.

Each package keeps its exceptions in its own ``errors.py``; this is the whole tree (a builtin in
parentheses is a second base)::

    Exception
     └── FdlError                             fdl.errors (what, hint, exit code)
          ├── FdlUsageError                   fdl.errors: the command line is wrong (exit 2)
          ├── DownloadError                   fdl.downloads.errors
          │    ├── ChecksumMismatchError      the file's sha256 is not the expected one
          │    └── IncompleteDownloadError    internal: retried, never reaches the user
          │         └── StalledDownloadError  internal: no byte within the read timeout
          ├── UnsafeArchiveError              fdl.downloads.errors: a zip that would escape
          │                                   its folder or exceed the extraction limits
          ├── InsufficientSpaceError          fdl.downloads.errors: no room to unpack an
          │                                   archive
          ├── ManifestError                   fdl.tasks.errors: an unusable fdl.yml
          ├── SchemaError (ValueError)        fdl.tasks.errors: an unusable option schema
          ├── PortError                       fdl.port.errors: ``fdl port`` cannot go on
          └── UnsupportedError                fdl.port.errors: a construct the translation
               │                              cannot write (the model stays one step)
               ├── ModeUnsupportedError       fdl.port.errors: an operation in one mode only
               │                              that cannot follow the mode (its module stays
               │                              one step)
               └── ShapesDisagreeError        internal: examples of different shapes decide a
                                              shape test differently (its module stays one
                                              step)
    KeyboardInterrupt
     └── SmokeStopped                         fdl.porting.smoke: a signal stopped ``fdl check``
                                              and its smoke run (an interrupt, not an error)

Renamed classes (``ChecksumMismatch``, ``Unsupported``) keep no alias: fdl's interface is its
command line, and its modules are internal (docs/development.md, "Public and internal names").
"""

from __future__ import annotations

import enum

__all__ = ["ExitCode", "FdlError", "FdlUsageError"]


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
