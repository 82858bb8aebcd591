"""Loop traces: what a loop body reports after each iteration of the last forward pass.

A loop body opts in by defining ``trace(self)``, called after every iteration: it returns a
tensor (the loop's *traces*, read by the loop's tag or node id) or a dict of named tensors (each
name's *named traces*, read by that name), or None to skip an iteration. A new run of the loop
replaces the previous traces. This is the Python form of the Rust original's ``Module::trace``
and ``LoopBody::step`` with ``TraceEmit``.

A dotted name reads a child graph: ``traces("encoder.refine")``.

>>> import torch, flodl as fl
>>> from torch import nn
>>> class Halve(nn.Module):
...     def forward(self, x):
...         self.last = x / 2
...         return self.last
...     def trace(self):
...         return {"norm": self.last.norm()}
>>> g = fl.FlowBuilder().loop_body(Halve()).for_n(3).tag("halving").build()
>>> _ = g(torch.tensor([8.0]))
>>> [float(t) for t in g.traces("norm")]
[4.0, 2.0, 1.0]
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

import torch

from flodl.graph.composites import Loop
from flodl.graph.errors import TraceError
from flodl.graph.nodes import NodeKind

if TYPE_CHECKING:
    from flodl.graph.graph import Graph


class TraceMethods:
    """``traces``, ``last_trace``, ``traces_by_node``, ``traces_named`` (mixed into ``fl.Graph``)."""

    def traces(self, name: str) -> list[torch.Tensor]:
        """The traces of the last forward for ``name``: the tag of a loop node (the tensors its
        body's ``trace()`` returned, one per iteration), else a name a body published in a dict.
        ``[]`` when the loop has not run yet; an unknown name raises :class:`TraceError`."""
        graph, local = self._trace_owner(name)
        loops = graph._loop_nodes()
        node_id = graph.tag_map.get(local)
        if node_id is not None and node_id in loops:
            graph._check_collisions()
            return list(loops[node_id].traces)
        named = graph._named_lookup(local)
        if named is not None:
            return named
        if node_id is not None:
            kind = graph.node(node_id).kind
            raise TraceError(f"traces({name!r}): the tag is on a {kind} node, not on a loop")
        raise graph._unknown(name, local, loops)

    def last_trace(self, tag: str) -> torch.Tensor | None:
        """The last of :meth:`traces` (the final iteration's), or None when there is none."""
        found = self.traces(tag)
        return found[-1] if found else None

    def traces_by_node(self, node_id: str) -> list[torch.Tensor]:
        """The tensor traces of the loop node ``node_id`` (e.g. ``"loop_2"``) in the last
        forward; a node that is not a loop raises :class:`TraceError`."""
        graph, local = self._trace_owner(node_id)
        node = graph.node(local)
        loop = graph._loop_nodes().get(node.id)
        if loop is None:
            raise TraceError(f"traces_by_node({node_id!r}): node is a {node.kind}, not a loop")
        return list(loop.traces)

    def traces_named(self, name: str) -> list[torch.Tensor]:
        """The named traces ``name`` (a key of the dicts a body's ``trace()`` returned) of the
        last forward. A name no loop has published raises :class:`TraceError`."""
        graph, local = self._trace_owner(name)
        named = graph._named_lookup(local)
        if named is None:
            raise graph._unknown(name, local, graph._loop_nodes(), named_only=True)
        return named

    # ------------------------------------------------------------------ helpers
    def _trace_owner(self, name: str) -> tuple[Graph, str]:
        if not isinstance(name, str) or not name:
            raise TraceError(f"a trace name is a non-empty string, got {name!r}")
        prefix, _, local = name.rpartition(".")
        root: Graph = self  # type: ignore[assignment]
        return (root.subgraph(prefix) if prefix else root), local

    def _loop_nodes(self) -> dict[str, Loop]:
        graph: Graph = self  # type: ignore[assignment]
        out = {}
        for node in graph.nodes:
            if node.kind is NodeKind.LOOP and node.attr:
                module = graph.module_of(node.id)
                if isinstance(module, Loop):
                    out[node.id] = module
        return out

    def _named_lookup(self, name: str) -> list[torch.Tensor] | None:
        self._check_collisions()
        for loop in self._loop_nodes().values():
            if name in loop.named_traces:
                return list(loop.named_traces[name])
        return None

    def _check_collisions(self) -> None:
        """A named trace published by two loops, or named like a loop tag that has tensor
        traces, is ambiguous: refuse rather than guess which one a read means."""
        graph: Graph = self  # type: ignore[assignment]
        loops = self._loop_nodes()
        owner: dict[str, str] = {}
        for node_id, loop in loops.items():
            for key in loop.named_traces:
                if key in owner and owner[key] != node_id:
                    raise TraceError(
                        f"trace name {key!r} is published by both loop {owner[key]!r} and loop "
                        f"{node_id!r}: give the names a prefix in each body's trace()"
                    )
                owner[key] = node_id
                tagged = graph.tag_map.get(key)
                if tagged in loops and loops[tagged].traces:
                    raise TraceError(
                        f"trace name {key!r} (published by loop {node_id!r}) is also the tag of "
                        f"loop {tagged!r}, which has tensor traces: rename one of them"
                    )

    def _unknown(
        self, shown: str, local: str, loops: dict[str, Loop], named_only: bool = False
    ) -> TraceError:
        graph: Graph = self  # type: ignore[assignment]
        names = sorted({k for loop in loops.values() for k in loop.named_traces})
        if not named_only:
            names += [t for t, n in graph.tag_map.items() if n in loops]
        close = difflib.get_close_matches(local, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        if not loops:
            return TraceError(f"no trace {shown!r}: this graph has no loop")
        known = ", ".join(repr(n) for n in names) or "none yet (traces appear after a forward)"
        return TraceError(f"no trace {shown!r} in this graph (known: {known}){hint}")
