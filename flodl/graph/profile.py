"""Profiling: where a forward pass spends its time, per node and per topological level.

``enable_profiling()`` swaps the graph's compiled forward for a variant generated with a clock
read around every node (CUDA is synchronised before each read when CUDA is in use, so GPU times
are kernel times, not launch times). ``disable_profiling()`` swaps the plain forward back: with
profiling off, the forward contains no timing code at all.
"""

from __future__ import annotations

import difflib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

from flodl.graph.nodes import NodeKind

if TYPE_CHECKING:
    from flodl.graph.graph import Graph


# Node kinds the profiling forward does not time: they run no code (the value is an argument,
# or a scan's carried state, timed with the scan).
UNTIMED_KINDS = frozenset({NodeKind.IDENTITY, NodeKind.INPUT, NodeKind.SCAN_STATE})


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
    nested graph, whose own nodes are in ``Profile.children``), seconds, level, and every tag
    of the node in definition order (``tags``)."""

    id: str
    tag: str
    kind: str
    seconds: float
    level: int
    tags: tuple[str, ...] = ()


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
    # Names of nodes that are never timed (the identity entry, auxiliary inputs): they cost 0.
    untimed: frozenset[str] = frozenset()

    def timing(self, name: str) -> float:
        """Seconds of the node with id or tag ``name`` (any of a node's tags).

        A dotted path reads a nested graph's profile: ``timing("encoder.hidden")``. The identity
        entry and auxiliary inputs run no code and give 0.0. A name that matches no node raises
        :class:`~flodl.graph.paths.PathError` (a typo must not read as "costs nothing").
        """
        inner = self._child_of(name)
        if inner is not None:
            return inner[0].timing(inner[1])
        for n in self.nodes:
            if name == n.id or name in n.tags:
                return n.seconds
        if name in self.untimed:
            return 0.0
        from flodl.graph.paths import PathError

        known = self.names()
        close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.5)
        raise PathError(
            f"timing({name!r}): no node or tag of that name in this profile (names are node "
            "ids, tags, and 'label.name' for nested graphs)",
            str(name),
            close,
        )

    def _child_of(self, name: object) -> tuple[Profile, str] | None:
        """(child profile, rest of the name) for ``child.rest`` — the longest matching child key
        (keys of graphs inside composites have dots: ``loop_2.body``)."""
        if not isinstance(name, str):
            return None
        keys = {k: k for k in self.children} | self._tagged_keys()
        found = [k for k in keys if name.startswith(k + ".")]
        if not found:
            return None
        key = max(found, key=len)
        return self.children[keys[key]], name[len(key) + 1 :]

    def _tagged_keys(self) -> dict[str, str]:
        """A composite's children under its tags too (``L.body`` for ``loop_2.body``), as
        every other path-taking method of a graph reads them."""
        out: dict[str, str] = {}
        for n in self.nodes:
            for key in self.children:
                if key.startswith(n.id + "."):
                    out.update({tag + key[len(n.id) :]: key for tag in n.tags})
        return out

    def names(self) -> list[str]:
        """Every name ``timing`` accepts: node ids, tags, then nested graphs' names as paths."""
        out = [x for n in self.nodes for x in (n.id, *n.tags)] + sorted(self.untimed)
        for label, child in self.children.items():
            out += [f"{label}.{x}" for x in child.names()]
        return out

    def by_node(self) -> dict[str, float]:
        return {n.id: n.seconds for n in self.nodes}

    def __str__(self) -> str:
        lines = [
            f"Forward: {format_duration(self.total)} "
            f"({len(self.levels)} levels, {len(self.nodes)} nodes)"
        ]
        for level in self.levels:
            count = f"  {level.num_nodes} nodes" if level.num_nodes > 1 else ""
            lines.append(f"  Level {level.index}  {format_duration(level.seconds)}{count}")
            for n in (n for n in self.nodes if n.level == level.index):
                tags = " ".join(f'"{t}"' for t in n.tags or ((n.tag,) if n.tag else ()))
                name = f"{n.id} {tags}" if tags else n.id
                lines.append(f"    {name:<40} {format_duration(n.seconds)}")
        for label, child in self.children.items():
            inner = str(child).replace("\n", "\n    ")
            lines.append(f"  [{label}] {inner}")
        return "\n".join(lines)


def levels(graph: Graph) -> dict[str, int]:
    """Topological level of every node: inputs are -1, a node is 1 + its deepest input."""
    out: dict[str, int] = {}
    for node in graph.nodes:
        if node.kind in (NodeKind.IDENTITY, NodeKind.INPUT):
            out[node.id] = -1
            continue
        sources = [leaf.source for r in node.refs for leaf in r.leaves()]
        deps = list(node.inputs) + [s for s in sources if s is not None]
        out[node.id] = 1 + max((out.get(d, -1) for d in deps), default=-1)
    return out


COMPOSITE_KINDS = frozenset({NodeKind.LOOP, NodeKind.GATE, NodeKind.SWITCH, NodeKind.MAP})


def _top_graphs(module: nn.Module) -> list[tuple[str, Graph]]:
    """The Graphs inside ``module`` that are not inside another Graph there (path, graph)."""
    from flodl.graph.graph import Graph

    out: list[tuple[str, Graph]] = []
    for path, sub in module.named_modules():
        if path and isinstance(sub, Graph) and not any(path.startswith(p + ".") for p, _ in out):
            out.append((path, sub))
    return out


@dataclass(frozen=True)
class _NodeMeta:
    tags: tuple[str, ...]
    kind: str
    level: int


def _describe_nodes(graph: Graph) -> tuple[dict[str, _NodeMeta], frozenset[str]]:
    """(node id -> tags, kind, level; names of the nodes never timed), once per graph."""
    from flodl.graph.graph import Graph

    level_of = levels(graph)
    meta = {}
    for node in graph.nodes:
        kind = "graph" if node.attr and isinstance(graph.module_of(node.id), Graph) else node.kind
        meta[node.id] = _NodeMeta(tuple(node.tags), kind, level_of[node.id])
    untimed = frozenset(
        name for node in graph.nodes if node.kind in UNTIMED_KINDS for name in (node.id, *node.tags)
    )
    return meta, untimed


def record(graph: Graph, raw: list[tuple[str, float]], total: float) -> None:
    """Called by the profiling forward at the end of a pass."""
    from flodl.graph.graph import Graph

    described = graph.__dict__.get("_profile_meta")
    if described is None:
        described = graph.__dict__["_profile_meta"] = _describe_nodes(graph)
    meta, untimed = described
    nodes = []
    for node_id, seconds in raw:
        m = meta[node_id]
        first = m.tags[0] if m.tags else ""
        nodes.append(NodeTiming(node_id, first, m.kind, seconds, m.level, m.tags))
    per_level: dict[int, list[float]] = {}
    for n in nodes:
        per_level.setdefault(n.level, []).append(n.seconds)
    level_rows = tuple(LevelTiming(i, sum(v), len(v)) for i, v in sorted(per_level.items()))
    children: dict[str, Profile] = {}
    for node in graph.nodes:
        module = graph.module_of(node.id) if node.attr else None
        if isinstance(module, Graph):
            if module._last_profile is not None:
                children[module.label or node.id] = module._last_profile
        elif module is not None and node.kind in COMPOSITE_KINDS:
            # Graphs used as loop bodies, gate experts, switch branches, map bodies: keyed by
            # their path below the node ("loop_2.body", "gate_3.experts.1"). A loop body's
            # profile is that of its last iteration; the loop node's time covers them all.
            for path, sub in _top_graphs(module):
                if sub._last_profile is not None:
                    children[f"{node.id}.{path}"] = sub._last_profile
    graph._last_profile = Profile(total, tuple(nodes), level_rows, children, untimed)


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
        # Nested graphs first: a graph's direct plan takes in those of the graphs nested in it.
        for graph in reversed(self._profiled_graphs()):
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
