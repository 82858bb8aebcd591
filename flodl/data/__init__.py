"""Data loading: resident and streaming DataLoader, datasets, partitioning across ranks.

Contract: DESIGN.md §3.5. Names listed in ``__all__`` are re-exported as ``flodl.<name>``
when they belong at the top level (see flodl/__init__.py).
"""

__all__: list[str] = []
