"""The safe ``.fdl`` checkpoint format: no pickle, bounded parsing, atomic writes, partial loads.

Contract: DESIGN.md §3.3. Names listed in ``__all__`` are re-exported as ``flodl.<name>``
when they belong at the top level (see flodl/__init__.py).
"""

__all__: list[str] = []
