"""fdl's download engine: resumable, verified, with pip-style progress; safe zip extraction."""

from fdl.downloads.archive import UnsafeArchiveError, extract_zip
from fdl.downloads.engine import DownloadResult, download

__all__ = ["DownloadResult", "UnsafeArchiveError", "download", "extract_zip"]
