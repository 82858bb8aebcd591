"""The extracted reference, cached on disk by what it was made from and what made it.

``$FLODL_HOME/api-ref-cache/<package>-<version>-s<schema>-<source hash>-x<extractor>.json``
(FLODL_HOME defaults to ``~/.flodl``). The extractor part fingerprints the code that turns
source into a reference (this directory's modules and griffe's version), so an upgraded or
edited fdl never serves a reference an older extractor made. A hit costs one pass hashing the
source files and one JSON load; a changed file, a new version, a new schema or a new extractor
is a miss. Writes are atomic (temp file + rename), and an unreadable cache file is ignored and
replaced, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from importlib import metadata
from pathlib import Path

from fdl.apiref.atomic import atomic_write
from fdl.apiref.model import SCHEMA_ID, ApiReference

KEEP = 8  # cached references kept per package; older ones are pruned
EXTRACTOR_DIR = Path(__file__).resolve().parent  # fdl/apiref: the code that makes a reference


def cache_dir() -> Path:
    home = os.environ.get("FLODL_HOME") or str(Path.home() / ".flodl")
    return Path(home) / "api-ref-cache"


def cache_path(package: str, version: str, source_hash: str) -> Path:
    schema = SCHEMA_ID.rsplit("/", 1)[-1]
    extractor = extractor_fingerprint(EXTRACTOR_DIR)[:12]
    return cache_dir() / f"{package}-{version}-s{schema}-{source_hash[:24]}-x{extractor}.json"


@cache
def extractor_fingerprint(directory: Path) -> str:
    """sha256 over the extractor's modules and griffe's version: what a cached reference depends
    on besides the described source. Read from the files, so an edited checkout counts too."""
    digest = hashlib.sha256()
    try:
        digest.update(f"griffe {metadata.version('griffe')}\0".encode())
    except metadata.PackageNotFoundError:
        digest.update(b"griffe ?\0")
    for path in sorted(directory.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


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
