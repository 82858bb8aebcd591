"""Source discovery + cache + extraction, in one call."""

from __future__ import annotations

from pathlib import Path

from fdl.apiref import cache
from fdl.apiref.model import ApiReference
from fdl.apiref.source import find_source


def load_reference(path: str | Path | None = None, *, use_cache: bool = True) -> ApiReference:
    """The API reference of the installed flodl, or of the package at ``path``.

    >>> ref = load_reference()
    >>> ref.package
    'flodl'
    """
    source = find_source(path)
    key = cache.cache_path(source.name, source.version(), source.content_hash())
    if use_cache:
        hit = cache.read(key)
        if hit is not None:
            return hit
    from fdl.apiref.extract import extract

    ref = extract(source)
    if use_cache:
        cache.write(key, ref)
    return ref
