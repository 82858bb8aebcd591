"""fdl's download engine: resumable, sha256-checked when a hash is known, with pip-style progress
and a bounded stall time; bounded, safe zip extraction."""

from fdl.downloads.archive import ExtractLimits, UnsafeArchiveError, extract_zip, parse_size
from fdl.downloads.engine import DownloadError, DownloadResult, download, stall_timeout

__all__ = [
    "DownloadError",
    "DownloadResult",
    "ExtractLimits",
    "UnsafeArchiveError",
    "download",
    "extract_zip",
    "parse_size",
    "stall_timeout",
]
