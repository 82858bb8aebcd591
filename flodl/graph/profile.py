"""Profiling: where a forward pass spends its time, per node and per topological level.

``enable_profiling()`` swaps the graph's compiled forward for a variant generated with a clock
read around every node (CUDA is synchronised before each read when CUDA is in use, so GPU times
are kernel times, not launch times). ``disable_profiling()`` swaps the plain forward back: with
profiling off, the forward contains no timing code at all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from flodl.graph.graph import Graph


def now() -> float:
    """A clock read for profiling; waits for queued CUDA work first so it is counted."""
    if torch.cuda.is_initialized():  # cheap, and False whenever CUDA was never used
        torch.cuda.synchronize()
    return time.perf_counter()


def format_duration(seconds: float) -> str:
    """``850us``, ``12.40ms``, ``1.3s`` — compact and monotone in precision."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f}us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f}ms"
    return f"{seconds:.1f}s"


@dataclass(frozen=True)
class NodeTiming:
    """One node's share of the forward: ``id``, first tag ("" if none), kind (``"graph"`` for a
    nested graph, whose own nodes are in ``Profile.children``), seconds, level."""

    id: str
    tag: str
    kind: str
    seconds: float
    level: int


@dataclass(frozen=True)
class LevelTiming:
    """The nodes of one topological level (they only depend on earlier levels)."""

    index: int
    seconds: float
    num_nodes: int


@dataclass(frozen=True)
class Profile:
    """Timings of the most recent forward pass of one graph (children nest in ``children``).

    >>> import torch, flodl as fl
    >>> from torch import nn
    >>> g = fl.FlowBuilder(nn.Linear(4, 4)).tag("enc").through(nn.ReLU()).build()
    >>> g.enable_profiling(); _ = g(torch.ones(2, 4))
    >>> p = g.profile()
    >>> [n.id for n in p.nodes], p.timing("enc") > 0
    (['linear_1', 'relu_2'], True)
    """

    total: float
    nodes: tuple[NodeTiming, ...]
    levels: tuple[LevelTiming, ...]
    children: dict[str, Profile] = field(default_factory=dict)

    def timing(self, name: str) -> float:
        """Seconds of the node with tag or id ``name`` (0.0 if not timed)."""
        for n in self.nodes:
            if n.id == name or n.tag == name:
                return n.seconds
        return 0.0

    def by_node(self) -> dict[str, float]:
        return {n.id: n.seconds for n in self.nodes}

    def __str__(self) -> str:
        lines = [
            f"Forward: {format_duration(self.total)} "
            f"({len(self.levels)} levels, {len(self.nodes)} nodes)"
        ]
        for level in self.levels:
            lines.append(f"  Level {level.index}  {format_duration(level.seconds)}")
            for n in (n for n in self.nodes if n.level == level.index):
                name = f'{n.id} "{n.tag}"' if n.tag else n.id
                lines.append(f"    {name:<40} {format_duration(n.seconds)}")
        for label, child in self.children.items():
            inner = str(child).replace("\n", "\n    ")
            lines.append(f"  [{label}] {inner}")
        return "\n".join(lines)


def levels(graph: Graph) -> dict[str, int]:
    """Topological level of every node: inputs are -1, a node is 1 + its deepest input."""
    out: dict[str, int] = {}
    for node in graph.nodes:
        if node.kind in ("identity", "input"):
            out[node.id] = -1
            continue
        sources = [leaf.source for r in node.refs for leaf in r.leaves()]
        deps = list(node.inputs) + [s for s in sources if s is not None]
        out[node.id] = 1 + max((out.get(d, -1) for d in deps), default=-1)
    return out


def _describe_nodes(graph: Graph) -> dict[str, tuple[str, str, int]]:
    """node id -> (first tag, kind, level), computed once per graph."""
    from flodl.graph.graph import Graph

    level_of = levels(graph)
    out = {}
    for node in graph.nodes:
        kind = "graph" if node.attr and isinstance(graph.module_of(node.id), Graph) else node.kind
        out[node.id] = (node.tags[0] if node.tags else "", kind, level_of[node.id])
    return out


def record(graph: Graph, raw: list[tuple[str, float]], total: float) -> None:
    """Called by the profiling forward at the end of a pass."""
    from flodl.graph.graph import Graph

    meta = graph.__dict__.get("_profile_meta")
    if meta is None:
        meta = graph.__dict__["_profile_meta"] = _describe_nodes(graph)
    nodes = [NodeTiming(node_id, *meta[node_id][:2], s, meta[node_id][2]) for node_id, s in raw]
    per_level: dict[int, list[float]] = {}
    for n in nodes:
        per_level.setdefault(n.level, []).append(n.seconds)
    level_rows = tuple(LevelTiming(i, sum(v), len(v)) for i, v in sorted(per_level.items()))
    children: dict[str, Profile] = {}
    for node in graph.nodes:
        module = graph.module_of(node.id) if node.attr else None
        if isinstance(module, Graph) and module._last_profile is not None:
            children[module.label or node.id] = module._last_profile
    graph._last_profile = Profile(total, tuple(nodes), level_rows, children)


class ProfilingMethods:
    """``enable_profiling`` / ``disable_profiling`` / ``profile`` (mixed into ``fl.Graph``)."""

    _profiling: bool
    _last_profile: Profile | None

    def enable_profiling(self) -> None:
        """Time every node of every forward from now on (this graph and all nested graphs)."""
        for graph in self._profiled_graphs():
            graph._profiling = True
            graph._install()

    def disable_profiling(self) -> None:
        """Back to the plain forward (no timing code); forgets the last profile."""
        for graph in self._profiled_graphs():
            graph._profiling = False
            graph._last_profile = None
            graph._install()

    @property
    def profiling(self) -> bool:
        return self._profiling

    def profile(self) -> Profile | None:
        """Timings of the most recent forward (None when profiling is off or nothing ran yet)."""
        return self._last_profile

    def _profiled_graphs(self) -> list[Graph]:
        from flodl.graph.graph import Graph

        return [m for m in self.modules() if isinstance(m, Graph)]  # type: ignore[attr-defined]
