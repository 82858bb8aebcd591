"""Errors of the ``fdl.yml`` task runner::

FdlError
 ├── ManifestError             a manifest that cannot be used: names the file, line and key
 └── SchemaError (ValueError)  an option schema that cannot be used; ``key`` is the dotted
                               place inside the schema (the manifest loader reports it as
                               a ManifestError, the schema cache ignores the probe)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fdl.errors import ExitCode, FdlError

if TYPE_CHECKING:
    from fdl.tasks.source import KeyPath, Source

__all__ = ["ManifestError", "SchemaError"]


class ManifestError(FdlError):
    """A manifest that cannot be used: names the file, the line and the key."""

    def __init__(self, source: Source | Path, key: KeyPath, problem: str, hint: str | None = None):
        from fdl.tasks.source import Source, dotted_key  # source.py raises this error

        where = source.where(key) if isinstance(source, Source) else str(source)
        dotted = dotted_key(key)
        what = f"{where}: {dotted}: {problem}" if dotted else f"{where}: {problem}"
        super().__init__(what, hint or "fix the manifest and run again", ExitCode.FAILURE)


class SchemaError(FdlError, ValueError):
    """A schema that cannot be used; ``key`` is the dotted place inside the schema."""

    def __init__(self, key: tuple[str | int, ...], problem: str):
        super().__init__(problem)
        self.key = key
        self.problem = problem
