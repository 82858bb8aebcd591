"""The extracted reference, cached on disk by package, version and source content hash.

``$FLODL_HOME/api-ref-cache/<package>-<version>-<hash>.json`` (FLODL_HOME defaults to
``~/.flodl``). A hit costs one pass hashing the source files and one JSON load; a changed file,
a new version or a new schema is a miss. Writes are atomic (temp file + rename), and an
unreadable cache file is ignored and replaced, never trusted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fdl.apiref.atomic import atomic_write
from fdl.apiref.model import SCHEMA_ID, ApiReference

KEEP = 8  # cached references kept per package; older ones are pruned


def cache_dir() -> Path:
    home = os.environ.get("FLODL_HOME") or str(Path.home() / ".flodl")
    return Path(home) / "api-ref-cache"


def cache_path(package: str, version: str, source_hash: str) -> Path:
    schema = SCHEMA_ID.rsplit("/", 1)[-1]
    return cache_dir() / f"{package}-{version}-s{schema}-{source_hash[:24]}.json"


def read(path: Path) -> ApiReference | None:
    try:
        return ApiReference.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write(path: Path, ref: ApiReference) -> None:
    """Store ``ref`` atomically; a cache that cannot be written is not an error."""
    try:
        atomic_write(path, ref.to_json())
        _prune(path.parent, ref.package)
    except OSError:
        return


def _prune(directory: Path, package: str) -> None:
    cached = sorted(
        directory.glob(f"{package}-*.json"), key=lambda p: p.stat().st_mtime, reverse=True
    )
    for old in cached[KEEP:]:
        old.unlink(missing_ok=True)
