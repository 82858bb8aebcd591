"""fdl's download engine: resumable, sha256-checked when a hash is known, with pip-style progress
and a bounded stall time; bounded, safe zip extraction."""

from fdl.downloads.archive import ExtractLimits, extract_zip, parse_size
from fdl.downloads.engine import DownloadResult, download, stall_timeout
from fdl.downloads.errors import ChecksumMismatchError, DownloadError, UnsafeArchiveError

__all__ = [
    "ChecksumMismatchError",
    "DownloadError",
    "DownloadResult",
    "ExtractLimits",
    "UnsafeArchiveError",
    "download",
    "extract_zip",
    "parse_size",
    "stall_timeout",
]
