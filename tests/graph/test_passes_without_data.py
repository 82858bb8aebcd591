"""A pass on tensors that hold no data: fake tensors (``FakeTensorMode``: shape and memory
estimates) or tensors on the meta device. Such a pass computes shapes, so what it would keep on
the graph (state across calls, tagged values, loop traces) must not outlive it: the next real
call would compute with a fake or meta state, or, after ``to_empty``, with uninitialised memory.

The same holds for the passes aside: a recomputation while autograd runs a backward (activation
checkpointing), which must leave the real forward's values, and a pass under a ``torch.func``
transform (``vmap``, ``grad``, ``jacrev``), whose values are the transform's wrappers.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils.checkpoint import checkpoint

import flodl as fl
from flodl.graph import fx_tracing
from flodl.graph.composites import Loop
from flodl.graph.errors import GraphStateError
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


class Traced(nn.Module):
    """A loop body the loop asks for a trace after every iteration."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        self.last = torch.tanh(self.lin(x))
        return self.last

    def trace(self):
        return self.last


def observed(stateful: bool) -> fl.Graph:
    """Tagged values and a loop keeping traces; with ``stateful``, state at the root and in a
    nested graph too."""
    b = fl.FlowBuilder(nn.Linear(3, 3)).tag("hidden")
    if stateful:
        inner = fl.FlowBuilder(nn.Linear(3, 3)).through(fl.nn.StateAdd()).using("h").tag("h")
        inner = inner.label("cell").build()
        b = b.through(fl.nn.StateAdd()).using("memory").tag("memory").through(inner)
    return b.loop_body(Traced()).for_n(2).tag("out").build()


def left(graph: fl.Graph) -> list[object]:
    """What passes leave on the tree, by identity: tagged values, state, loop traces."""
    found: list[object] = []
    for m in graph.modules():
        if isinstance(m, fl.Graph):
            found += [*m._tagged.values(), *m._state.values()]
        elif isinstance(m, Loop):
            found += m.traces
    return found


def same(found: list[object], before: list[object]) -> bool:
    return len(found) == len(before) and all(a is b for a, b in zip(found, before, strict=True))


REENTRANT = pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])


@REENTRANT
def test_a_checkpointed_graph_without_state_keeps_the_forwards_values_and_its_gradients(reentrant):
    torch.manual_seed(0)
    graph = observed(stateful=False)
    reference = copy.deepcopy(graph)
    x = torch.randn(2, 3, requires_grad=True)
    reference(x).sum().backward()
    out = checkpoint(graph, x, use_reentrant=reentrant)
    before = left(graph)
    assert len(before) == 4 and graph.tagged("out") is not None
    out.sum().backward()  # recomputes the forward (non-reentrant: stops once it has enough)
    assert same(left(graph), before)  # the real forward's values, not the recomputation's
    assert torch.equal(graph.tagged("out"), reference.tagged("out"))
    for a, b in zip(graph.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


class Checkpointed(nn.Module):
    def __init__(self, inner: nn.Module, reentrant: bool) -> None:
        super().__init__()
        self.inner, self.reentrant = inner, reentrant

    def forward(self, x):
        return checkpoint(self.inner, x, use_reentrant=self.reentrant)


@REENTRANT
def test_a_stateless_part_checkpointed_inside_a_graph_with_state(reentrant):
    """What the error below recommends: the state-keeping steps outside the checkpoint."""

    def make(wrap: bool) -> tuple[fl.Graph, fl.Graph]:
        torch.manual_seed(0)
        part = fl.FlowBuilder(nn.Linear(3, 3)).tag("z").through(nn.Tanh()).build()
        g = fl.FlowBuilder(nn.Linear(3, 3)).through(fl.nn.StateAdd()).using("memory")
        step = Checkpointed(part, reentrant) if wrap else part
        return g.through(step).tag("memory").build(), part

    (graph, part), (reference, reference_part) = make(True), make(False)
    x = torch.randn(2, 3)
    for _ in range(3):
        out = graph(x)
        z = part.tagged("z")
        out.sum().backward()
        reference(x).sum().backward()
        assert part.tagged("z") is z and torch.equal(z, reference_part.tagged("z"))
        for a, b in zip(graph.parameters(), reference.parameters(), strict=True):
            assert torch.equal(a.grad, b.grad)
        graph.end_step()
        reference.end_step()


# Reentrant over state only in a nested graph is left out: were the root to miss that state,
# the rerun would loop (the state read is the checkpoint's own output, which reruns it again).
@pytest.mark.parametrize(
    ("where", "reentrant"),
    [("root", False), ("root", True), ("nested", False)],
    ids=["root-non-reentrant", "root-reentrant", "nested-non-reentrant"],
)
def test_checkpointing_a_graph_with_state_fails_at_the_recomputation(where, reentrant):
    def make() -> fl.Graph:
        torch.manual_seed(0)
        if where == "root":
            return observed(stateful=True)
        inner = fl.FlowBuilder(nn.Linear(3, 3)).through(fl.nn.StateAdd()).using("h").tag("h")
        return fl.FlowBuilder(nn.Linear(3, 3)).through(inner.label("cell").build()).build()

    graph, reference = make(), make()
    x = torch.randn(2, 3, requires_grad=True)
    # two checkpointed calls before one backward: each advanced the state once
    outs = [checkpoint(graph, x, use_reentrant=reentrant) for _ in range(2)]
    for _ in range(2):
        reference(x)
    before = left(graph)
    with pytest.raises(GraphStateError, match=r"'cell\.h'.*torch\.utils\.checkpoint"):
        sum(outs).sum().backward()
    assert same(left(graph), before)
    assert torch.equal(graph(x), reference(x))


@pytest.mark.parametrize("transform", ["vmap", "grad", "jacrev"])
@pytest.mark.parametrize("where", ["root", "held"])
def test_a_pass_under_a_torch_func_transform_leaves_the_graph_as_it_was(where, transform):
    torch.manual_seed(0)
    graph = observed(stateful=True)
    untouched = copy.deepcopy(graph)
    x = torch.randn(2, 3)
    for g in (graph, untouched):
        g(x)  # state, tagged values and loop traces now hold tensors
    xs = torch.randn(4, 2, 3)
    state = {"memory": graph._state["memory"], "cell.h": graph.subgraph("cell")._state["h"]}
    each = [graph.explicit_state()(v, state=state)[0] for v in xs]  # what each sample computes
    before = left(graph)
    run = graph if where == "root" else Holder(graph)
    if transform == "vmap":  # each sample reads the state the graph holds
        torch.testing.assert_close(torch.func.vmap(run)(xs), torch.stack(each))
    elif transform == "grad":
        torch.func.grad(lambda v: run(v).sum())(x)
    else:
        torch.func.jacrev(run)(x)
    assert same(left(graph), before)
    for _ in range(2):  # the sequence of a graph that never saw the transform
        out = graph(x)
        assert type(out) is torch.Tensor and torch.equal(out, untouched(x))


def test_vmap_over_a_graph_without_state_keeps_working():
    torch.manual_seed(0)
    graph = observed(stateful=False)
    xs = torch.randn(4, 2, 3)
    out = torch.func.vmap(graph)(xs)
    assert graph.tagged("out") is None  # no ordinary pass yet: nothing kept
    torch.testing.assert_close(out, torch.stack([graph(v) for v in xs]))
    before = left(graph)
    torch.testing.assert_close(torch.func.vmap(graph)(xs), out)
    assert same(left(graph), before)
    assert whole_tree_direct(graph)  # ordinary passes still take the direct path


def test_the_private_torch_functions_that_recognize_these_passes_exist():
    """Read with a fallback that detects nothing: a torch without them must be noticed here."""
    assert fx_tracing.backward_task is torch._C._current_graph_task_id
    assert fx_tracing.transforming is torch._C._are_functorch_transforms_active
