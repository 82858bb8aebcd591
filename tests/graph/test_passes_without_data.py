"""A pass on tensors that hold no data: fake tensors (``FakeTensorMode``: shape and memory
estimates) or tensors on the meta device. Such a pass computes shapes, so what it would keep on
the graph (state across calls, tagged values, loop traces) must not outlive it: the next real
call would compute with a fake or meta state, or, after ``to_empty``, with uninitialised memory.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import flodl as fl
from tests.graph.helpers import whole_tree_direct


def model() -> fl.Graph:
    """State at the root and in a nested graph, tagged values, and a loop that keeps traces."""
    inner = fl.FlowBuilder(nn.Linear(3, 3)).through(fl.nn.StateAdd()).using("h").tag("h")
    inner = inner.label("cell").build()
    return (
        fl.FlowBuilder(nn.Linear(3, 3))
        .through(fl.nn.StateAdd())
        .using("memory")
        .tag("memory")
        .through(inner)
        .loop_body(nn.Tanh())
        .for_n(2)
        .tag("out")
        .build()
    )


class Holder(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


def kept(graph: fl.Graph) -> list[object]:
    """What a pass leaves on the graph, by identity: state, tagged values, loop traces."""
    inner = graph.children_graphs()["cell"]
    return [
        *graph._state.values(),
        *inner._state.values(),
        graph.tagged("out"),
        graph._modules["out"].traces,
    ]


@pytest.mark.parametrize("where", ["root", "held"])
def test_a_fake_pass_leaves_the_graph_as_it_was_and_the_sequence_goes_on(where):
    torch.manual_seed(0)
    graph = model()
    untouched = copy.deepcopy(graph)
    x = torch.randn(2, 3)
    for g in (graph, untouched):
        g(x)  # state, tagged values and loop traces now hold real tensors
    assert whole_tree_direct(graph)  # the fake pass below would take the direct path
    before = kept(graph)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        out = (graph if where == "root" else Holder(graph))(mode.from_tensor(torch.randn(5, 3)))
    assert isinstance(out, FakeTensor) and out.shape == (5, 3)
    assert all(a is b for a, b in zip(kept(graph), before, strict=True))
    for _ in range(2):  # bit for bit the sequence of a graph that never saw the fake pass
        real = graph(x)
        assert type(real) is torch.Tensor and torch.equal(real, untouched(x))


def test_a_meta_pass_before_to_empty_leaves_no_state_and_the_first_real_call_reads_zeros():
    torch.manual_seed(0)
    reference = model()
    with torch.device("meta"):
        graph = model()
    out = graph(torch.empty(4, 3, device="meta"))  # shapes, as a memory planner asks
    assert out.is_meta and out.shape == (4, 3)
    assert graph._state == {"memory": None} and graph.tagged("out") is None
    graph.to_empty(device="cpu")
    graph.load_state_dict(reference.state_dict())
    x = torch.randn(4, 3)
    for _ in range(3):  # without the fix: empty_like of the meta state, uninitialised memory
        assert torch.equal(graph(x), reference(x))


@pytest.mark.parametrize("where", ["root", "held"])
def test_to_empty_after_real_calls_starts_the_state_again_from_zeros(where):
    """``to_empty`` materializes storage without values: state kept from real calls would
    become uninitialised memory, so it starts again from zeros, also when a parent module's
    ``to_empty`` reaches the graph; ``.to()`` still carries it."""
    torch.manual_seed(0)
    graph, fresh = model(), model()
    fresh.load_state_dict(graph.state_dict())
    x = torch.randn(4, 3)
    for _ in range(2):
        graph(x)
    carried = graph._state["memory"]
    graph.to(torch.float32)
    assert torch.equal(graph._state["memory"], carried)
    (graph if where == "root" else Holder(graph)).to_empty(device="cpu")
    inner = graph.children_graphs()["cell"]
    assert graph._state == {"memory": None} and inner._state == {"h": None}
    graph.load_state_dict(fresh.state_dict())
    for _ in range(3):  # the sequence of a graph that never ran
        assert torch.equal(graph(x), fresh(x))


def test_a_sequence_of_fake_passes_carries_its_state_through_explicit_state():
    torch.manual_seed(0)
    graph = model()
    graph(torch.randn(2, 3))
    before = kept(graph)
    step = graph.explicit_state()
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        x = mode.from_tensor(torch.randn(7, 3))
        _, state = step(x)
        out, state = step(x, state=state)
    assert isinstance(out, FakeTensor) and set(state) == {"memory", "cell.h"}
    assert all(isinstance(v, FakeTensor) and v.shape == (7, 3) for v in state.values())
    assert all(a is b for a, b in zip(kept(graph), before, strict=True))
