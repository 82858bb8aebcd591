"""Graph building blocks PyTorch does not have (StateAdd, routers, halting modules, Reshape, ...) and ``flodl.nn.functional``.

Contract: DESIGN.md §3.1. Names listed in ``__all__`` are re-exported as ``flodl.<name>``
when they belong at the top level (see flodl/__init__.py).
"""

__all__: list[str] = []
