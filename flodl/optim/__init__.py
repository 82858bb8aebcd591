"""Training utilities: learning-rate schedulers as pure calculators, optimizer helpers, param groups by graph path.

Contract: DESIGN.md §3.2. Names listed in ``__all__`` are re-exported as ``flodl.<name>``
when they belong at the top level (see flodl/__init__.py).
"""

__all__: list[str] = []
