"""``torch.fx.symbolic_trace`` of a graph: as the traced root (fx hands ``forward(*args,
**kwargs)`` one proxy each) and inside a traced module. The traced module computes what the
graph does, and tracing leaves the graph as it was: no proxy in its tagged values, state or
loop traces, and the direct path still taken afterwards."""

from __future__ import annotations

import copy
import pickle
import warnings

import pytest
import torch
from torch import nn

import flodl as fl
from tests.graph.helpers import block, halting_loop, traceable, whole_tree_direct


class Wrapper(nn.Module):
    """A hand-written model holding a graph: fx traces into the graph's forward."""

    def __init__(self, graph: fl.Graph) -> None:
        super().__init__()
        self.inner = graph  # not "graph": fx.GraphModule has that attribute

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) * 2


class Traced(nn.Module):
    """A loop body whose iterations the loop keeps (``trace``)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.last: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last = self.lin(x)
        return self.last

    def trace(self) -> torch.Tensor | None:
        return self.last


@pytest.mark.parametrize("name", list(traceable()))
def test_a_traced_graph_computes_what_the_graph_does(name):
    torch.manual_seed(0)
    graph = traceable()[name]
    root = torch.fx.symbolic_trace(graph)
    inside = torch.fx.symbolic_trace(Wrapper(graph))
    # every layer is a recorded call of the trace (none computed once and baked in)
    called = {n.target for n in root.graph.nodes if n.op == "call_module"}
    for name, _ in graph.named_parameters():
        assert any(name.startswith(f"{target}.") for target in called), name
    x = torch.randn(2, 5, 6)
    expected = graph(x)
    assert torch.equal(root(x), expected)
    assert torch.equal(inside(x), expected * 2)
    # gradients flow through the traced module to the graph's own parameters
    root(x).square().mean().backward()
    traced_grads = [p.grad.clone() for p in graph.parameters()]
    graph.zero_grad()
    graph(x).square().mean().backward()
    assert all(
        torch.equal(a, p.grad) for a, p in zip(traced_grads, graph.parameters(), strict=True)
    )


def test_auxiliary_inputs_are_keywords_of_the_traced_module():
    graph = (
        fl.FlowBuilder(nn.Linear(6, 6))
        .input("ctx")
        .input("scale", default=2.0)
        .through(torch.add)
        .using("ctx")
        .through(torch.mul)
        .using("scale")
        .build()
    )
    traced = torch.fx.symbolic_trace(graph)
    x, ctx = torch.randn(2, 6), torch.randn(2, 6)
    assert torch.equal(traced(x, ctx=ctx), graph(x, ctx=ctx))  # the default, 2.0
    assert torch.equal(traced(x, ctx=ctx, scale=3.0), graph(x, ctx=ctx, scale=3.0))
    assert not torch.equal(traced(x, ctx=ctx, scale=3.0), traced(x, ctx=ctx))
    with pytest.raises(fl.GraphInputError, match="missing graph input 'ctx'"):
        traced(x)


def test_the_traced_module_takes_inputs_by_position_and_refuses_unknown_ones():
    graph = (
        fl.FlowBuilder(nn.Linear(6, 6))
        .input("ctx")
        .input("scale", default=2.0)
        .through(torch.add)
        .using("ctx")
        .through(torch.mul)
        .using("scale")
        .build()
    )
    traced = torch.fx.symbolic_trace(graph)
    x, ctx = torch.randn(2, 6), torch.randn(2, 6)
    # as the graph's forward takes them: auxiliary inputs by position too
    assert torch.equal(traced(x, ctx, 3.0), graph(x, ctx, 3.0))
    assert torch.equal(traced(x, ctx, scale=3.0), graph(x, ctx=ctx, scale=3.0))
    assert torch.equal(traced(x, ctx), graph(x, ctx=ctx))  # the default, 2.0
    assert not torch.equal(traced(x, ctx, 3.0), traced(x, ctx))
    with pytest.raises(fl.GraphInputError, match=r"unexpected graph input.*'bogus'"):
        traced(x, ctx=ctx, bogus=1)
    with pytest.raises(fl.GraphInputError, match=r"unexpected graph input.*'ctx'"):
        traced(x, ctx, ctx=ctx)  # twice
    with pytest.raises(fl.GraphInputError, match="4 positional"):
        traced(x, ctx, 3.0, 99)
    # a pickle of the traced module traces its code again: the input lookup is kept as a call
    restored = pickle.loads(pickle.dumps(traced))
    assert torch.equal(restored(x, ctx, 3.0), graph(x, ctx, 3.0))


@pytest.mark.parametrize("where", ["root", "inside"])
def test_tracing_leaves_state_tagged_values_and_loop_traces_as_they_were(where):
    def model() -> fl.Graph:
        return (
            fl.FlowBuilder(nn.Linear(2, 2))
            .through(fl.nn.StateAdd())
            .using("memory")
            .tag("memory")
            .loop_body(Traced())
            .for_n(2)
            .tag("out")
            .build()
        )

    torch.manual_seed(0)
    graph = model()
    untraced = copy.deepcopy(graph)
    x = torch.randn(1, 2)
    for g in (graph, untraced):
        g(x)  # state, tagged values and loop traces now hold tensors
    loop = graph._modules["out"]
    before = (graph.tagged("out"), dict(graph._state), loop.traces)
    assert len(before[2]) == 2 and before[1]["memory"] is not None
    torch.fx.symbolic_trace(graph if where == "root" else Wrapper(graph))
    assert graph.tagged("out") is before[0] and loop.traces is before[2]
    assert graph._state.keys() == before[1].keys()
    assert all(graph._state[k] is v for k, v in before[1].items())
    # the next calls carry state on exactly as in a graph that was never traced
    for _ in range(2):
        out = graph(x)
        assert isinstance(out, torch.Tensor) and torch.equal(out, untraced(x))


def test_export_leaves_tagged_values_and_state_as_they_were():
    graph = fl.FlowBuilder(nn.Linear(2, 2)).through(fl.nn.StateAdd()).using("h").tag("h").build()
    untraced = copy.deepcopy(graph)
    x = torch.randn(1, 2)
    with warnings.catch_warnings():
        # export's own check: a pass that assigned tensors to module attributes warns
        warnings.filterwarnings("error", message=".*assigned during export")
        exported = torch.export.export(graph, (x,), strict=False)  # the default in newer torch
    assert graph.tagged("h") is None and graph._state == {"h": None}
    first_call = copy.deepcopy(untraced)(x)  # zero state
    assert torch.equal(exported.module()(x), first_call)
    for _ in range(2):
        assert torch.equal(graph(x), untraced(x))


class Holder(nn.Module):
    """A plain module holding a graph, as a model holds its parts (not named ``graph``: the
    module torch.export gives back is an fx GraphModule, whose ``graph`` would hide it)."""

    def __init__(self, inner: fl.Graph) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x, **inputs):
        return self.inner(x, **inputs)


PER_PASS = {  # graphs whose pass keeps values on them: tags, auxiliary inputs, state
    "tags": lambda: fl.FlowBuilder(nn.Linear(2, 2)).tag("out").through(nn.ReLU()).build(),
    "auxiliary input": lambda: (
        fl.FlowBuilder(nn.Linear(2, 2)).input("ctx").through(torch.add).using("ctx").build()
    ),
    "state": lambda: (
        fl.FlowBuilder(nn.Linear(2, 2)).through(fl.nn.StateAdd()).using("h").tag("h").build()
    ),
}


@pytest.mark.parametrize("where", ["root", "held"])
@pytest.mark.parametrize("name", list(PER_PASS))
def test_export_of_tags_inputs_and_state_as_root_or_held_by_a_module(name, where):
    # torch 2.4 and 2.5 export on fake tensors without fx's flag: the graph must see it too
    graph = PER_PASS[name]()
    x, inputs = torch.randn(1, 2), {"ctx": torch.randn(1, 2)} if name == "auxiliary input" else {}
    graph(x, **inputs)
    kept = (dict(graph.__dict__["_tagged"]), dict(graph._state))
    untraced = copy.deepcopy(graph)
    model = graph if where == "root" else Holder(graph)
    exported = torch.export.export(model, (x,), inputs, strict=False)
    for now, before in zip((graph.__dict__["_tagged"], graph._state), kept, strict=True):
        assert now.keys() == before.keys()  # as they were: no fake tensor left on the graph
        assert all(now[k] is v for k, v in before.items())
    assert torch.equal(exported.module()(x, **inputs), untraced(x, **inputs))


def test_the_graph_takes_its_direct_path_again_after_tracing():
    graph = fl.FlowBuilder(nn.Linear(6, 6)).also(block()).build()
    torch.fx.symbolic_trace(graph)
    assert whole_tree_direct(graph)
    x = torch.randn(2, 6)
    assert torch.equal(graph(x), torch.fx.symbolic_trace(graph)(x))


UNTRACEABLE = {
    # a halting loop reads its verdict on the host; a scan iterates over the sequence
    "halting loop": (halting_loop, "halting condition"),
    "scan": (
        lambda: fl.FlowBuilder(nn.Linear(6, 6)).scan(nn.GRUCell(6, 6), dim=1).build(),
        "node 'grucell_2' was added by .scan(...)",
    ),
}


@pytest.mark.parametrize("name", list(UNTRACEABLE))
def test_what_fx_cannot_trace_fails_naming_the_node_and_leaves_the_graph_working(name):
    make, named = UNTRACEABLE[name]
    graph = make()
    with pytest.raises(torch.fx.proxy.TraceError) as err:
        torch.fx.symbolic_trace(graph)
    assert named in "\n".join(err.value.__notes__)
    x = torch.randn(2, 5, 6)
    assert torch.equal(graph(x), copy.deepcopy(graph)(x))  # no proxy left behind
