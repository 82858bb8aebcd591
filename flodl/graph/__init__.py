"""Declarative graphs: FlowBuilder, Graph, graph trees, observation, profiling, visualization.

Contract: DESIGN.md §3.1. Names listed in ``__all__`` are re-exported as ``flodl.<name>``
when they belong at the top level (see flodl/__init__.py).
"""

__all__: list[str] = []
