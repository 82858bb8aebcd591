"""``using``, auxiliary inputs and forward references (state across calls)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import flodl as fl

from .helpers import AddRef, Scale, TakesCtx, identity_linear


def test_backward_ref_reaches_forward_named_keyed_by_tag():
    add = AddRef()
    g = fl.FlowBuilder(identity_linear(2)).tag("ctx").through(add).using("ctx").build()
    out = g(torch.tensor([[3.0, 5.0]]))
    torch.testing.assert_close(out, torch.tensor([[6.0, 10.0]]))
    assert list(add.seen[-1]) == ["ctx"]


def test_positional_and_keyword_refs_call_the_module_with_arguments():
    g = (
        fl.FlowBuilder()
        .tag("a")
        .through(Scale(2.0))
        .tag("b")
        .through(TakesCtx())
        .using("a", bonus="b")
        .build()
    )
    x = torch.tensor([1.0])
    # stream = 2x; ctx = x; bonus = 2x  ->  2x + x + 10 * 2x = 23x
    torch.testing.assert_close(g(x), torch.tensor([23.0]))
    assert "_m['takesctx_3'](v_scale_2, input, bonus=v_scale_2)" in g.code


def test_gradients_flow_through_a_backward_ref():
    g = fl.FlowBuilder(nn.Linear(2, 2)).tag("ctx").through(nn.Linear(2, 2)).through(AddRef())
    g = g.using("ctx").build()
    x = torch.randn(3, 2, requires_grad=True)
    g(x).sum().backward()
    assert x.grad is not None and all(p.grad is not None for p in g.parameters())


def memory_graph(step: nn.Module | None = None):
    """memory_t = step(x_t + memory_{t-1})."""
    return (
        fl.FlowBuilder()
        .through(fl.nn.StateAdd())
        .using("memory")
        .through(step or nn.Identity())
        .tag("memory")
        .build()
    )


def test_forward_ref_accumulates_across_calls_and_resets():
    g = memory_graph()
    x = torch.tensor([[1.0, 2.0]])
    outs = [g(x).tolist() for _ in range(3)]
    assert outs == [[[1.0, 2.0]], [[2.0, 4.0]], [[3.0, 6.0]]]
    assert g.has_state()
    g.reset_state()
    assert g(x).tolist() == [[1.0, 2.0]]


def test_detach_state_keeps_values_but_cuts_the_autograd_chain():
    g = memory_graph()
    x = torch.ones(1, 2, requires_grad=True)
    g(x).sum().backward()
    g.end_step()
    out = g(x)
    assert out.tolist() == [[2.0, 2.0]]  # the value carried over
    out.sum().backward()  # no "backward through the graph a second time": the chain was cut
    assert g.step_count == 1


def test_without_end_step_the_second_backward_reaches_the_freed_graph():
    g = memory_graph(nn.Linear(2, 2))
    x = torch.ones(1, 2, requires_grad=True)
    g(x).sum().backward()
    with pytest.raises(RuntimeError, match="second time"):
        g(x).sum().backward()


def test_first_call_backward_with_zero_filled_forward_ref():
    g = (
        fl.FlowBuilder(nn.Linear(2, 2))
        .through(AddRef())
        .using("memory")
        .through(nn.Linear(2, 2))
        .tag("memory")
        .build()
    )
    x = torch.randn(1, 2, requires_grad=True)
    g(x).sum().backward()
    assert x.grad is not None and all(p.grad is not None for p in g.parameters())


def test_backward_and_forward_refs_together():
    g = fl.FlowBuilder().tag("ctx").through(AddRef()).using("ctx", "memory").tag("memory").build()
    x = torch.ones(1, 2)
    assert g(x).tolist() == [[2.0, 2.0]]  # x + ctx + 0
    assert g(x).tolist() == [[4.0, 4.0]]  # x + ctx + previous 2


def test_state_follows_to_and_dtype_changes():
    g = memory_graph()
    g(torch.ones(1, 2))
    g.double()
    assert g._state["memory"].dtype == torch.float64
    out = g(torch.ones(1, 2, dtype=torch.float64))
    assert out.dtype == torch.float64 and out.tolist() == [[2.0, 2.0]]


# how a cell keeps its (h, c): (wrap, unwrap)
STATE_SHAPES = {
    "tuple": (tuple, tuple),
    "list": (list, tuple),
    "nested dict": (lambda hc: {"h": hc[0], "c": [hc[1]]}, lambda s: (s["h"], s["c"][0])),
}


class PairCell(nn.Module):
    """An LSTM cell keeping its ``(h, c)`` as ``wrap`` makes it (zeros on the first call)."""

    def __init__(self, shape: str) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(2, 2)
        self.wrap, self.unwrap = STATE_SHAPES[shape]

    def forward(self, x, state):
        return self.wrap(
            self.cell(x, None if isinstance(state, torch.Tensor) else self.unwrap(state))
        )


class Hidden(nn.Module):
    def __init__(self, shape: str) -> None:
        super().__init__()
        self.unwrap = STATE_SHAPES[shape][1]

    def forward(self, state):
        return self.unwrap(state)[0]


@pytest.mark.parametrize("shape", list(STATE_SHAPES))
def test_state_holding_tensors_in_containers_is_detached_moved_and_copied(shape):
    g = fl.FlowBuilder().through(PairCell(shape)).using("hc").tag("hc").through(Hidden(shape))
    g = g.build()
    opt = torch.optim.SGD(g.parameters(), lr=0.01)
    for _ in range(2):  # truncated BPTT: the second backward stays inside its own step
        g(torch.randn(3, 2)).pow(2).mean().backward()
        opt.step()
        g.end_step()
    leaves = torch.utils._pytree.tree_leaves(g._state["hc"])
    assert len(leaves) == 2 and not any(t.requires_grad for t in leaves)
    twin = copy.deepcopy(g)
    x = torch.randn(3, 2)
    assert torch.equal(twin(x), g(x))
    g.double()
    assert all(t.dtype == torch.float64 for t in torch.utils._pytree.tree_leaves(g._state["hc"]))
    assert g(x.double()).dtype == torch.float64
    g.to_empty(device="cpu")  # storage without values: the state starts again from zeros
    assert g._state["hc"] is None


def test_nested_graph_state_is_reset_and_detached_by_the_parent():
    inner = memory_graph()
    outer = fl.FlowBuilder().through(inner).build()
    x = torch.ones(1, 2, requires_grad=True)
    outer(x).sum().backward()
    outer.end_step()
    outer(x).sum().backward()  # the child's state was detached too
    outer.reset_state()
    assert outer(x).tolist() == [[1.0, 1.0]]


def test_auxiliary_inputs_by_keyword_and_position():
    g = fl.FlowBuilder().input("ctx").through(TakesCtx()).using("ctx").build()
    x, c = torch.ones(2), torch.full((2,), 5.0)
    torch.testing.assert_close(g(x, ctx=c), torch.full((2,), 6.0))
    torch.testing.assert_close(g(x, c), torch.full((2,), 6.0))
    assert g.inputs == ("input", "ctx")


def test_missing_and_unexpected_inputs_raise_clear_errors():
    g = fl.FlowBuilder().input("ctx").through(TakesCtx()).using("ctx").build()
    with pytest.raises(
        fl.GraphInputError, match=r"missing graph input 'ctx'.*graph\(x, ctx=\.\.\.\)"
    ):
        g(torch.ones(2))
    with pytest.raises(TypeError, match=r"unexpected graph input.*'cxt'"):
        g(torch.ones(2), ctx=torch.ones(2), cxt=torch.ones(2))


def test_using_before_input_is_a_same_pass_wire_not_state():
    g = fl.FlowBuilder().through(TakesCtx()).using("ctx").input("ctx").build()
    assert not g.has_state()
    torch.testing.assert_close(g(torch.ones(1), ctx=torch.ones(1)), torch.full((1,), 2.0))


def test_nested_graph_with_auxiliary_input_receives_it_through_using():
    inner = fl.FlowBuilder().input("ctx").through(TakesCtx()).using("ctx").build()
    outer = fl.FlowBuilder().input("c").through(inner).using("c").build()
    torch.testing.assert_close(outer(torch.ones(1), c=torch.ones(1)), torch.full((1,), 2.0))


def test_using_on_split_wires_every_branch():
    a, b = AddRef(), AddRef()
    g = fl.FlowBuilder().tag("x").split(a, b).using("x").merge(fl.MergeOp.ADD).build()
    torch.testing.assert_close(g(torch.ones(1)), torch.full((1,), 4.0))


def test_using_after_also_targets_the_inner_module():
    g = fl.FlowBuilder().tag("x").also(AddRef()).using("x").build()
    torch.testing.assert_close(g(torch.ones(1)), torch.full((1,), 3.0))  # x + (x + x)


def test_fork_then_using_wires_into_the_fork():
    g = fl.FlowBuilder().tag("x").fork(AddRef()).using("x").tag("side").build()
    g(torch.ones(1))
    torch.testing.assert_close(g.tagged("side"), torch.full((1,), 2.0))


def test_a_tag_on_the_identity_entry_can_be_a_forward_ref():
    # The fork reads the graph's previous input (zeros on the first call).
    g = fl.FlowBuilder().fork(AddRef()).using("x").tag("side").tag("x").build()
    g(torch.ones(1))
    torch.testing.assert_close(g.tagged("side"), torch.ones(1))
    g(torch.full((1,), 5.0))
    torch.testing.assert_close(g.tagged("side"), torch.full((1,), 6.0))


def test_refs_into_a_nested_graph_must_match_its_inputs():
    inner = fl.FlowBuilder().input("ctx").through(TakesCtx()).using("ctx").build()
    with pytest.raises(fl.GraphBuildError, match=r"takes the auxiliary inputs \['ctx'\]"):
        fl.FlowBuilder().tag("a").tag("b").through(inner).using("a", "b").build()


class Heads(nn.Module):
    """x + Σ heads, where heads is the list a tag-group ref delivers."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list = []

    def forward(self, x, heads):
        self.received = heads
        return x + torch.stack(heads).sum(0)


class RefsSeen(nn.Module):
    def forward_named(self, x, refs):
        self.seen = refs
        return x


def heads_graph(receiver: nn.Module, **kw) -> fl.FlowBuilder:
    b = fl.FlowBuilder().split(Scale(1.0), Scale(2.0), Scale(3.0)).tag_group("h").merge()
    return b.through(receiver).using(**kw) if kw else b.through(receiver).using("h")


def test_a_tag_group_ref_delivers_the_members_values_as_one_list_in_order():
    receiver = Heads()
    g = heads_graph(receiver).build()
    x = torch.tensor([1.0])
    # merge = 6x; the list is [x, 2x, 3x]
    torch.testing.assert_close(g(x), torch.tensor([12.0]))
    assert [t.item() for t in receiver.received] == [1.0, 2.0, 3.0]
    assert "[v_scale_2, v_scale_3, v_scale_4]" in g.code


def test_a_tag_group_ref_by_keyword_and_into_forward_named():
    keyword = Heads()
    g = heads_graph(keyword, heads="h").build()
    torch.testing.assert_close(g(torch.tensor([1.0])), torch.tensor([12.0]))
    named = RefsSeen()
    g = heads_graph(named).build()
    g(torch.tensor([1.0]))
    assert list(named.seen) == ["h"] and [t.item() for t in named.seen["h"]] == [1.0, 2.0, 3.0]
    # the built-in consumers sum every member
    g = heads_graph(fl.nn.StateAdd()).build()
    torch.testing.assert_close(g(torch.tensor([1.0])), torch.tensor([12.0]))


def test_a_tag_group_defined_later_is_a_forward_ref_to_every_member():
    g = (
        fl.FlowBuilder()
        .through(fl.nn.StateAdd())
        .using("h")
        .split(Scale(1.0), Scale(2.0))
        .tag_group("h")
        .merge()
        .build()
    )
    x = torch.tensor([1.0])
    # s_t = x + h0_{t-1} + h1_{t-1} = x + 3 s_{t-1}; output 3 s_t
    assert [g(x).item() for _ in range(3)] == [3.0, 12.0, 39.0]
    g.reset_state()
    assert g(x).item() == 3.0
    assert "h [h_0, h_1] (previous call)" in g.summary()


def test_a_misspelt_group_ref_suggests_the_group_never_itself():
    b = heads_graph(Heads()).through(Heads()).using("hh")
    with pytest.raises(fl.GraphBuildError) as info:
        b.build()
    message = str(info.value)
    assert "unresolved ref 'hh'" in message and "did you mean 'h'?" in message
    assert "did you mean 'hh'" not in message


def ctx_child(label: str | None = "cond") -> fl.Graph:
    b = fl.FlowBuilder().input("ctx").through(TakesCtx()).using("ctx")
    return (b.label(label) if label else b).build()


def test_a_nested_graph_whose_inputs_are_not_wired_fails_at_build_not_forward():
    b = fl.FlowBuilder(nn.Linear(2, 2)).through(ctx_child())
    line = __import__("inspect").currentframe().f_lineno - 1
    with pytest.raises(fl.GraphBuildError) as info:
        b.build()
    message = str(info.value)
    assert "nested graph 'cond' at node 'graph_2' needs its auxiliary input(s) 'ctx'" in message
    assert f"test_refs_and_state.py:{line} in .through(...)" in message
    assert ".using(ctx=<tag>)" in message


def test_nested_graph_inputs_are_checked_wherever_the_graph_is_called():
    for make, role in [
        (lambda b: b.gate(EqualRouterOf2(), Scale(1.0), ctx_child(None)), "expert 1 of node"),
        (lambda b: b.switch(fl.nn.FixedSelector(0), ctx_child(), Scale(1.0)), "branch 0"),
        (lambda b: b.map(ctx_child()).each(), "map body"),
        (lambda b: b.loop_body(ctx_child()).for_n(2), "loop body"),
        (lambda b: b.loop_body(Scale(1.0)).while_cond(ctx_child(), 2), "halting condition"),
    ]:
        with pytest.raises(fl.GraphBuildError, match=f"the {role}.*'ctx'"):
            make(fl.FlowBuilder()).build()
    # wired, it runs: the loop body gets the ref on every iteration
    g = fl.FlowBuilder().tag("c").loop_body(ctx_child()).for_n(2).using(ctx="c").build()
    torch.testing.assert_close(g(torch.tensor([1.0])), torch.tensor([3.0]))


class EqualRouterOf2(nn.Module):
    def forward(self, x):
        return torch.full((*x.shape[:-1], 2), 0.5)


class Boom(nn.Module):
    """Passes its input through, or raises ``error`` when one is set."""

    def __init__(self) -> None:
        super().__init__()
        self.error: BaseException | None = None

    def forward(self, x):
        if self.error is not None:
            raise self.error
        return x


def failing_models() -> dict[str, tuple[fl.Graph, Boom]]:
    """A step that can fail between state nodes: at the root, inside a nested graph, and at the
    root after a nested graph (used twice, as a map body is: once per element) wrote its state."""

    def cell(boom: nn.Module | None = None, label: str = "cell") -> fl.Graph:
        b = fl.FlowBuilder().through(fl.nn.StateAdd()).using("a").tag("a")
        b = b.through(boom or nn.Identity()).through(fl.nn.StateAdd()).using("b").tag("b")
        return b.label(label).build()

    models = {}
    boom = Boom()
    models["root"] = (cell(boom), boom)
    boom = Boom()
    models["nested"] = (fl.FlowBuilder(nn.Linear(2, 2)).through(cell(boom)).build(), boom)
    boom = Boom()
    g = fl.FlowBuilder(nn.Linear(2, 2)).through(fl.nn.StateAdd()).using("m").tag("m")
    g = g.through(cell()).map(cell(label="each")).each().through(boom).build()
    models["after nested"] = (g, boom)
    return models


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()], ids=type)
@pytest.mark.parametrize("where", ["root", "nested", "after nested"])
def test_a_failed_pass_leaves_every_state_of_the_tree_as_it_was(where, error):
    torch.manual_seed(0)
    graph, boom = failing_models()[where]
    untouched = copy.deepcopy(graph)
    x = torch.randn(3, 2)
    for g in (graph, untouched):
        g(x)
        g(x)
    graphs = [g for g in graph.modules() if isinstance(g, fl.Graph) and g._state]
    before = [(g._state, dict(g._state)) for g in graphs]
    boom.error = error
    with pytest.raises(type(error)):
        graph(x)
    boom.error = None
    # each state as it was: the same dict, holding the same tensors
    for g, (state, values) in zip(graphs, before, strict=True):
        assert g._state is state and g._state.keys() == values.keys()
        assert all(g._state[k] is v for k, v in values.items())
    for _ in range(2):  # the sequence goes on as if the failed call never happened
        assert torch.equal(graph(x), untouched(x))


def test_has_state_sees_state_in_nested_graphs_not_in_loop_bodies():
    assert memory_graph().has_state()
    assert fl.FlowBuilder(nn.Linear(2, 2)).through(memory_graph()).build().has_state()
    held = fl.FlowBuilder().map(memory_graph()).each().build()  # a map body carries its state
    assert held.has_state()
    looped = fl.FlowBuilder().loop_body(memory_graph()).for_n(2).build()
    assert not looped.has_state()  # the loop resets its body every run: nothing carried
    assert not fl.FlowBuilder(nn.Linear(2, 2)).through(nn.ReLU()).build().has_state()
