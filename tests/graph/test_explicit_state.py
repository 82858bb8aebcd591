"""``graph.explicit_state()``: forward-reference state handed in and out of a pass."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

import flodl as fl

from .helpers import AddRef


def memory_graph(step: nn.Module | None = None, label: str | None = None) -> fl.Graph:
    """memory_t = step(x_t + memory_{t-1})."""
    b = fl.FlowBuilder().through(fl.nn.StateAdd()).using("memory")
    b = b.through(step or nn.Identity()).tag("memory")
    return (b.label(label) if label else b).build()


def assert_runs_as_the_graph(graph: fl.Graph, x: torch.Tensor, calls: int = 2) -> fl.ExplicitState:
    """Calls through explicit_state, handing the state on, give what an untouched copy of the
    graph gives carrying its own."""
    step = graph.explicit_state()
    twin = copy.deepcopy(graph)
    state = None
    for _ in range(calls):
        out, state = step(x, state=state)
        assert torch.equal(out, twin(x))
    return step


def tree() -> fl.Graph:
    """A tree with state at three levels: the root, a labelled child, an unlabelled child."""
    torch.manual_seed(0)
    return (
        fl.FlowBuilder(nn.Linear(3, 3))
        .through(AddRef())
        .using("h")
        .through(memory_graph(nn.Linear(3, 3), label="encoder"))
        .through(memory_graph(nn.Tanh()))
        .tag("h")
        .build()
    )


def test_keys_name_each_graph_by_module_path_and_tag():
    g = tree()
    assert g.explicit_state().keys == ("h", "encoder.memory", "h.memory")
    assert {name for name, m in g.named_modules() if isinstance(m, fl.Graph)} == {
        "",
        "encoder",
        "h",
    }


def test_explicit_state_reproduces_the_graphs_own_sequence_bit_for_bit():
    implicit, explicit = tree(), tree()
    step = explicit.explicit_state()
    xs = [torch.randn(2, 3, requires_grad=True) for _ in range(4)]
    state = None
    for x in xs:
        want = implicit(x)
        got, state = step(x.detach().requires_grad_(), state=state)
        assert torch.equal(got, want)
        for key, value in state.items():
            graph_path, _, tag = key.rpartition(".")
            kept = implicit.get_submodule(graph_path)._state[tag]
            assert torch.equal(value, kept)
    # backpropagation through time reaches every step, as with kept state
    want_grads = torch.autograd.grad(want.sum(), list(implicit.parameters()))
    got_grads = torch.autograd.grad(got.sum(), list(explicit.parameters()))
    for a, b in zip(want_grads, got_grads, strict=True):
        assert torch.equal(a, b)


def test_the_graphs_own_state_is_left_as_it_was():
    g = memory_graph()
    x = torch.tensor([[1.0, 2.0]])
    g(x)
    kept = g._state["memory"]
    step = g.explicit_state()
    out, state = step(x, state={"memory": torch.full((1, 2), 10.0)})
    assert out.tolist() == [[11.0, 12.0]] and state["memory"].tolist() == [[11.0, 12.0]]
    assert g._state["memory"] is kept
    assert g(x).tolist() == [[2.0, 4.0]]  # its own sequence goes on from its own state


def test_independent_sequences_share_one_graph():
    g = memory_graph(nn.Linear(2, 2))
    step = g.explicit_state()
    a, b = torch.randn(1, 2), torch.randn(1, 2)
    ref_a, ref_b = copy.deepcopy(g), copy.deepcopy(g)
    sa = sb = None
    for _ in range(3):  # interleaved: a, b, a, b, ...
        out_a, sa = step(a, state=sa)
        out_b, sb = step(b, state=sb)
        assert torch.equal(out_a, ref_a(a)) and torch.equal(out_b, ref_b(b))


def test_none_starts_a_value_from_zeros_and_zeros_makes_a_fresh_state():
    g = memory_graph()
    step = g.explicit_state()
    x = torch.tensor([[1.0, 2.0]])
    _, state = step(x, state={"memory": None})
    assert state["memory"].tolist() == [[1.0, 2.0]]
    fresh = fl.ExplicitState.zeros(state)
    assert fresh["memory"].tolist() == [[0.0, 0.0]] and state["memory"].tolist() == [[1.0, 2.0]]
    assert step(x, state=fresh)[0].tolist() == [[1.0, 2.0]]
    assert fl.ExplicitState.zeros({"memory": None}) == {"memory": None}


def test_auxiliary_inputs_pass_through_by_keyword():
    g = fl.FlowBuilder().input("ctx").through(AddRef()).using("ctx", "memory").tag("memory").build()
    step = g.explicit_state()
    x, ctx = torch.ones(1, 2), torch.full((1, 2), 3.0)
    out, state = step(x, state=None, ctx=ctx)
    assert out.tolist() == [[4.0, 4.0]]
    assert step(x, state=state, ctx=ctx)[0].tolist() == [[8.0, 8.0]]


def test_a_loop_bodys_state_is_not_carried():
    # the loop resets its body before every run: that state never outlives a pass
    g = fl.FlowBuilder().loop_body(memory_graph()).for_n(3).through(AddRef()).using("out")
    step = assert_runs_as_the_graph(g.tag("out").build(), torch.ones(1, 2))
    assert step.keys == ("out",)


def test_a_map_bodys_state_is_carried():
    g = fl.FlowBuilder().map(memory_graph()).each().build()
    step = assert_runs_as_the_graph(g, torch.ones(2, 3))
    assert len(step.keys) == 1 and step.keys[0].endswith(".memory")


def test_bad_state_is_refused_naming_the_keys_and_nothing_changes():
    g = tree()
    step = g.explicit_state()
    g(torch.ones(1, 3))
    before = {name: dict(m._state) for name, m in g.named_modules() if isinstance(m, fl.Graph)}
    good = dict.fromkeys(step.keys)
    cases = [
        ([1, 2], r"state must be a dict of 3 tensors.*got list"),
        ({**good, "encoder.hidden": None}, r"unknown \['encoder.hidden'\]"),
        ({"h": None}, r"missing \['encoder.memory', 'h.memory'\]"),
        ({**good, "h": [0.0, 1.0]}, r"state\['h'\] must be a tensor or None, got list"),
    ]
    for state, message in cases:
        with pytest.raises(fl.GraphInputError, match=message):
            step(torch.ones(1, 3), state=state)
    # a pass that fails midway leaves the graph's state as it was, too
    with pytest.raises(RuntimeError):
        step(torch.ones(1, 3), state={**good, "h": torch.ones(1, 7)})
    after = {name: dict(m._state) for name, m in g.named_modules() if isinstance(m, fl.Graph)}
    assert after.keys() == before.keys()
    for name, values in before.items():
        assert all(after[name][tag] is value for tag, value in values.items())


class Counter(nn.Module):
    """A module keeping state of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x

    def reset_state(self) -> None:
        self.calls = 0


def test_graphs_that_cannot_be_carried_are_refused_when_the_wrapper_is_made():
    with pytest.raises(fl.GraphInputError, match="keeps no state across calls"):
        fl.FlowBuilder(nn.Linear(2, 2)).build().explicit_state()
    with pytest.raises(fl.GraphInputError, match=r"keep state of their own.*: memory \(Counter\)"):
        memory_graph(Counter()).explicit_state()
    named_state = fl.FlowBuilder().input("state").through(AddRef()).using("state", "m").tag("m")
    with pytest.raises(fl.GraphInputError, match="has an input named 'state'"):
        named_state.build().explicit_state()
    # reset by the loop before every run: allowed
    g = fl.FlowBuilder().loop_body(Counter()).for_n(2).through(memory_graph()).build()
    assert g.explicit_state().keys[0].endswith(".memory")


def test_a_graph_used_twice_in_the_tree_is_carried_once():
    shared = memory_graph()
    g = fl.FlowBuilder().through(shared).through(shared).build()
    assert len(assert_runs_as_the_graph(g, torch.ones(1, 2)).keys) == 1


def test_the_wrapper_copies_pickles_and_moves_with_its_graph():
    step = memory_graph(nn.Linear(2, 2)).explicit_state()
    x = torch.ones(1, 2)
    _, state = step(x)
    for twin in (copy.deepcopy(step), pickle.loads(pickle.dumps(step))):
        assert twin.keys == step.keys
        assert twin._carriers[0][1] is twin.module  # the copy carries its own graph's state
        assert torch.equal(twin(x, state=state)[0], step(x, state=state)[0])
    step.double()
    out, new = step(x.double(), state={k: v.double() for k, v in state.items()})
    assert out.dtype == torch.float64 and new["memory"].dtype == torch.float64


def test_export_takes_the_state_as_inputs_and_outputs():
    g = memory_graph(nn.Linear(2, 2))
    step = g.explicit_state()
    x = torch.randn(1, 2)
    _, state = step(x)
    program = torch.export.export(step, (x,), {"state": state}, strict=False)
    signature = program.graph_signature
    # x and the state in; the output and the new state out; no state baked in as a constant
    assert (len(signature.user_inputs), len(signature.user_outputs)) == (2, 2)
    assert list(signature.lifted_tensor_constants) == []
    run = program.module()
    eager_state = exported_state = state
    for _ in range(3):
        want, eager_state = step(x, state=eager_state)
        got, exported_state = run(x, state=exported_state)
        assert torch.equal(got, want) and torch.equal(
            exported_state["memory"], eager_state["memory"]
        )


def test_compiles_without_graph_breaks():
    step = memory_graph(nn.Linear(2, 2)).explicit_state()
    x = torch.randn(1, 2)
    _, state = step(x)
    explained = torch._dynamo.explain(step)(x, state=state)
    assert explained.graph_break_count == 0
    compiled = torch.compile(step, backend="eager", fullgraph=True)
    want, _ = step(x, state=state)
    got, _ = compiled(x, state=state)
    assert torch.equal(got, want)
