"""Declarative graphs: FlowBuilder, Graph, merge ops and the errors of the graph layer.

Guide: docs/graph-builder.md. Everything in ``__all__`` is re-exported as ``flodl.<name>``.
"""

from flodl.graph.builder import FlowBuilder, LoopBuilder, MapBuilder
from flodl.graph.errors import (
    BuildIssue,
    GraphBuildError,
    GraphInputError,
    GraphStateError,
    NotBuiltError,
    TraceError,
)
from flodl.graph.explicit_state import ExplicitState
from flodl.graph.graph import Graph, UnknownTagError
from flodl.graph.merge import MergeOp
from flodl.graph.observe import Reduce
from flodl.graph.paths import PathError, PathKind, PathTarget
from flodl.graph.pickling import GraphPickleError
from flodl.graph.profile import LevelTiming, NodeTiming, Profile
from flodl.graph.training import TrainingNotSetUpError
from flodl.graph.trend import Trend, TrendGroup
from flodl.graph.visual import GraphvizError

__all__: list[str] = [
    "BuildIssue",
    "ExplicitState",
    "FlowBuilder",
    "Graph",
    "GraphBuildError",
    "GraphInputError",
    "GraphPickleError",
    "GraphStateError",
    "GraphvizError",
    "LevelTiming",
    "LoopBuilder",
    "MapBuilder",
    "MergeOp",
    "NodeTiming",
    "NotBuiltError",
    "PathError",
    "PathKind",
    "PathTarget",
    "Profile",
    "Reduce",
    "TraceError",
    "TrainingNotSetUpError",
    "Trend",
    "TrendGroup",
    "UnknownTagError",
]
