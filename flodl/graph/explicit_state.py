"""A stateful graph as a function of its state: ``graph.explicit_state()``.

A graph with forward references keeps state across calls on itself (``graph._state``, in each
graph of the tree that has such references). That suits a training loop over one sequence, but
not a program that must hand the state in and out: ``torch.export`` reads state kept on a module
once, as a constant, and one model serving several independent sequences needs one state per
sequence. :class:`ExplicitState` runs the graph with the state it is given and returns the state
the pass leaves, and leaves the graph's own state as it was.

Which state is carried: the forward-reference state of every graph in the tree, keyed by the
graph's module path (as ``state_dict()`` names its parameters) and the tag: ``"memory"`` for
the graph itself, ``"encoder.h"`` for tag ``h`` of the graph at ``encoder``. A loop body's state
is not carried: the loop resets its body before every run, so it never outlives a pass. A module
that keeps state of its own (it defines ``reset_state``) cannot be carried, and is refused when
the wrapper is made.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.compiler import is_compiling

from flodl.graph.composites import Loop
from flodl.graph.errors import GraphInputError

if TYPE_CHECKING:
    from flodl.graph.graph import Graph

State = dict[str, "torch.Tensor | None"]


def _walk(
    module: nn.Module, path: str = "", seen: set[int] | None = None
) -> Iterator[tuple[str, nn.Module]]:
    """Every module under ``module`` once (at its first path, as ``named_modules`` does), leaving
    out loop bodies' subtrees."""
    seen = set() if seen is None else seen
    seen.add(id(module))
    yield path, module
    for name, child in module._modules.items():
        if child is None or id(child) in seen or (isinstance(module, Loop) and name == "body"):
            continue
        yield from _walk(child, f"{path}.{name}" if path else name, seen)


def _put_state(graph: Graph, values: dict[str, torch.Tensor | None]) -> None:
    if is_compiling():  # dynamo of torch 2.4 cannot trace a write into a module's __dict__
        graph._state = values
    else:  # a third of nn.Module.__setattr__'s cost, which checks for parameters and modules
        graph.__dict__["_state"] = values


class ExplicitState(nn.Module):
    """A stateful graph called as ``output, state = step(*args, state=state, **inputs)``.

    Made by :meth:`flodl.Graph.explicit_state`. ``state`` maps each key of :attr:`keys` to a
    tensor, or to None for "start from zeros" (what the graph's own first call reads); leaving
    ``state`` out starts every value from zeros. The returned state holds the values the pass
    wrote (with their autograd history: detach them between optimizer steps, as
    ``graph.end_step()`` does for kept state). The graph's own state is left as it was, so one
    graph serves any number of independent sequences, and the wrapper exports with its state as
    inputs and outputs: ``torch.export.export(step, (x,), {"state": state})``. The graph is
    ``step.module`` (its parameters are the wrapper's, under ``module.``).

    >>> import torch
    >>> import flodl as fl
    >>> memory = (fl.FlowBuilder().through(fl.nn.StateAdd()).using("memory")
    ...           .tag("memory").build())
    >>> step = memory.explicit_state()
    >>> step.keys
    ('memory',)
    >>> x = torch.tensor([[1.0, 2.0]])
    >>> y, state = step(x)  # no state given: zeros, as a first call reads
    >>> y, state = step(x, state=state)
    >>> y.tolist(), memory(x).tolist()  # the graph's own first call: its state was left alone
    ([[2.0, 4.0]], [[1.0, 2.0]])
    """

    def __init__(self, graph: Graph) -> None:
        from flodl.graph.graph import Graph  # here: graph.py imports this module

        super().__init__()
        # `module`, as DistributedDataParallel names what it wraps (and not `graph`: the module
        # torch.export gives back is an fx GraphModule, whose `graph` attribute would hide it)
        self.module = graph
        if "state" in graph.inputs:
            raise GraphInputError(
                "explicit_state(): the graph has an input named 'state', the keyword that takes "
                "the state; rename that input"
            )
        carriers: list[tuple[str, Graph, tuple[str, ...]]] = []
        own_state: list[str] = []
        for path, module in _walk(graph):
            if isinstance(module, Graph):
                tags = tuple(module.__dict__["_state"])
                if tags:
                    carriers.append((path, module, tags))
            elif callable(getattr(module, "reset_state", None)):
                own_state.append(f"{path or 'the graph'} ({type(module).__name__})")
        if own_state:
            raise GraphInputError(
                "explicit_state() carries forward-reference state only, and these modules keep "
                f"state of their own (they define reset_state): {', '.join(own_state)}"
            )
        if not carriers:
            raise GraphInputError(
                "explicit_state(): the graph keeps no state across calls (no forward "
                "references outside loop bodies); call the graph itself"
            )
        # plain lists: the graphs are submodules of `module` already
        self._carriers = carriers
        self._graphs = graph._graphs()  # all of the tree's graphs, loop bodies too
        self.keys: tuple[str, ...] = tuple(
            f"{path}.{tag}" if path else tag for path, _, tags in carriers for tag in tags
        )

    def forward(
        self, *args: Any, state: Mapping[str, torch.Tensor | None] | None = None, **inputs: Any
    ) -> tuple[Any, State]:
        given = self._given(state)
        kept = [(g, g.__dict__["_state"]) for g in self._graphs]
        installed: list[tuple[str, dict[str, torch.Tensor | None]]] = []
        try:
            for path, graph, tags in self._carriers:
                prefix = f"{path}." if path else ""
                values = {tag: given[prefix + tag] for tag in tags}
                _put_state(graph, values)  # the pass writes into this dict
                installed.append((prefix, values))
            output = self.module(*args, **inputs)
        finally:
            for graph, values in kept:
                _put_state(graph, values)
        return output, {
            prefix + tag: value for prefix, values in installed for tag, value in values.items()
        }

    def _given(self, state: Mapping[str, torch.Tensor | None] | None) -> State:
        keys = self.keys
        if state is None:
            return dict.fromkeys(keys)
        if not isinstance(state, Mapping):
            raise GraphInputError(
                f"state must be a dict of {len(keys)} tensors keyed {list(keys)}, or None; "
                f"got {type(state).__name__}"
            )
        unknown = [k for k in state if k not in keys]
        missing = [k for k in keys if k not in state]
        if unknown or missing:
            parts = [
                f"unknown {unknown}" if unknown else "",
                f"missing {missing}" if missing else "",
            ]
            raise GraphInputError(
                f"state keys do not match the graph's: {'; '.join(p for p in parts if p)} "
                f"(expected {list(keys)}; None as a value starts that one from zeros)"
            )
        for key, value in state.items():
            if value is not None and not isinstance(value, torch.Tensor):
                raise GraphInputError(
                    f"state[{key!r}] must be a tensor or None, got {type(value).__name__}"
                )
        return dict(state)

    @staticmethod
    def zeros(state: Mapping[str, torch.Tensor | None]) -> State:
        """A fresh state shaped like ``state``: zeros (None stays None). What a new sequence
        starts from, as a tensor input (an exported program takes tensors, not None)."""
        return {k: None if v is None else torch.zeros_like(v) for k, v in state.items()}

    def extra_repr(self) -> str:
        return f"keys={list(self.keys)}"
