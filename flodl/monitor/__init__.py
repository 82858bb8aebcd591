"""The training monitor: one line per epoch, resources, a live dashboard, archives.

Contract: DESIGN.md §3.4. Names listed in ``__all__`` are re-exported as ``flodl.<name>``
when they belong at the top level (see flodl/__init__.py).
"""

__all__: list[str] = []
