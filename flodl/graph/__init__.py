"""Declarative graphs: FlowBuilder, Graph, merge ops and the errors of the graph layer.

Contract: DESIGN.md §3.1. Everything in ``__all__`` is re-exported as ``flodl.<name>``.
"""

from flodl.graph.builder import FlowBuilder, LoopBuilder, MapBuilder
from flodl.graph.errors import BuildIssue, GraphBuildError, GraphInputError
from flodl.graph.graph import Graph, UnknownTagError
from flodl.graph.merge import MergeOp
from flodl.graph.training import TrainingNotSetUpError

__all__: list[str] = [
    "BuildIssue",
    "FlowBuilder",
    "Graph",
    "GraphBuildError",
    "GraphInputError",
    "LoopBuilder",
    "MapBuilder",
    "MergeOp",
    "TrainingNotSetUpError",
    "UnknownTagError",
]
