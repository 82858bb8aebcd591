"""Errors of the download engine and of zip extraction::

    FdlError
     ├── DownloadError                    a download failed (network, disk space, stall)
     │    ├── ChecksumMismatchError       the file's sha256 is not the expected one (deleted)
     │    └── IncompleteDownloadError     internal: the stream ended early; the engine retries
     │         └── StalledDownloadError   internal: no byte arrived within the read timeout
     ├── UnsafeArchiveError               a zip that would escape its folder or exceed limits
     └── InsufficientSpaceError           no room to unpack an archive (it is kept)

The two internal errors never leave :func:`fdl.downloads.download`: it resumes, and raises a
:class:`DownloadError` once its retries or its stall budget are spent.
"""

from __future__ import annotations

from pathlib import Path

from fdl.errors import ExitCode, FdlError

__all__ = ["ChecksumMismatchError", "DownloadError", "InsufficientSpaceError", "UnsafeArchiveError"]


class DownloadError(FdlError):
    """A download failed; the message names the URL and the hint what to do (resume, mirror)."""


class ChecksumMismatchError(DownloadError):
    """The downloaded file's sha256 is not the expected one (the file was deleted)."""


class IncompleteDownloadError(DownloadError):
    """The server closed the stream before Content-Length bytes arrived (retry resumes).

    ``offset``: where this attempt appended; ``received``: bytes it got before failing.
    """

    def __init__(self, message: str, *, offset: int = 0, received: int = 0) -> None:
        super().__init__(message)
        self.offset = offset
        self.received = received


class StalledDownloadError(IncompleteDownloadError):
    """No byte arrived within the read timeout."""


class UnsafeArchiveError(FdlError):
    """A zip that would write outside its folder, or unpack beyond the extraction limits."""


class InsufficientSpaceError(FdlError):
    """An archive does not fit on the disk once unpacked (checked before anything is written)."""


def unwritable(path: Path, err: OSError, what: str = "write to") -> FdlError:
    """A read-only or forbidden location as one ``error:`` line (exit 3), not a traceback."""
    reason = err.strerror or type(err).__name__
    return FdlError(
        f"cannot {what} {err.filename or path}: {reason}",
        "make it writable, or choose another location (--path DIR, or FLODL_HOME for the "
        "global libtorch home)",
        ExitCode.UNAVAILABLE,
    )
