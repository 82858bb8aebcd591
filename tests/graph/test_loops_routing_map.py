"""Loops (BPTT, halting rules), gates, switches and maps."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import flodl as fl

from .helpers import AddBias, AddRef, EqualRouter, Scale


def test_for_n_doubles_three_times():
    g = fl.FlowBuilder().loop_body(Scale(2.0)).for_n(3).build()
    torch.testing.assert_close(g(torch.tensor([[1.0, 2.0]])), torch.tensor([[8.0, 16.0]]))


def test_bptt_accumulates_one_gradient_per_iteration():
    body = AddBias(2)
    g = fl.FlowBuilder().loop_body(body).for_n(3).build()
    g(torch.zeros(1, 2)).sum().backward()
    torch.testing.assert_close(body.bias.grad, torch.full((2,), 3.0))
    assert "loop_2.body.bias" in dict(g.named_parameters())


def test_loop_matches_hand_written_shared_block():
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    g = fl.FlowBuilder(nn.Linear(4, 4)).loop_body(block).for_n(5).through(nn.Linear(4, 2)).build()
    x = torch.randn(3, 4)
    h = g.linear_1(x)
    for _ in range(5):
        h = block(h)
    torch.testing.assert_close(g(x), g.linear_3(h))


def test_while_cond_checks_before_each_iteration():
    g = fl.FlowBuilder().loop_body(Scale(2.0)).while_cond(fl.nn.ThresholdHalt(10), 20).build()
    torch.testing.assert_close(g(torch.tensor([[1.0, 2.0]])), torch.tensor([[8.0, 16.0]]))
    g2 = fl.FlowBuilder().loop_body(Scale(2.0)).while_cond(fl.nn.ThresholdHalt(0.5), 20).build()
    torch.testing.assert_close(g2(torch.tensor([[1.0, 2.0]])), torch.tensor([[1.0, 2.0]]))


def test_until_cond_runs_at_least_once():
    g = fl.FlowBuilder().loop_body(Scale(2.0)).until_cond(fl.nn.ThresholdHalt(10), 20).build()
    torch.testing.assert_close(g(torch.tensor([[1.0, 2.0]])), torch.tensor([[8.0, 16.0]]))
    g2 = fl.FlowBuilder().loop_body(Scale(2.0)).until_cond(fl.nn.ThresholdHalt(0.5), 20).build()
    torch.testing.assert_close(g2(torch.tensor([[1.0, 2.0]])), torch.tensor([[2.0, 4.0]]))


def test_halting_is_per_sample_and_independent_of_the_batch():
    g = fl.FlowBuilder().loop_body(Scale(2.0)).while_cond(fl.nn.ThresholdHalt(10), 20).build()
    a, b = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 0.5]])
    together = g(torch.cat([a, b]))
    torch.testing.assert_close(together, torch.cat([g(a), g(b)]))
    torch.testing.assert_close(together, torch.tensor([[8.0, 16.0], [12.0, 2.0]]))


def test_until_halting_per_sample_and_max_iter_bound():
    g = fl.FlowBuilder().loop_body(Scale(2.0)).until_cond(fl.nn.ThresholdHalt(10), 3).build()
    out = g(torch.tensor([[1.0, 2.0], [0.01, 0.01]]))
    torch.testing.assert_close(out, torch.tensor([[8.0, 16.0], [0.08, 0.08]]))


class NormBody(nn.Module):
    """A body that mixes samples: batch norm in training."""

    def __init__(self) -> None:
        super().__init__()
        self.lin, self.bn = nn.Linear(3, 3), nn.BatchNorm1d(3)

    def forward(self, x):
        return x + torch.tanh(self.bn(self.lin(x)))


def test_per_sample_halting_computes_what_the_hand_written_where_loop_does():
    # A body mixing samples sees the halted samples' own values, as in the hand-written loop: a
    # version that fed them another sample's input changed BN's statistics and the gradients.
    torch.manual_seed(0)
    body, halt = NormBody(), fl.nn.ThresholdHalt(0.5)
    twin = copy.deepcopy(body)
    g = fl.FlowBuilder().loop_body(body).while_cond(halt, 4).build().train()
    x = torch.tensor([[2.0, 2.0, 2.0], [0.1, 0.2, 0.0], [-3.0, -3.0, -3.0], [-2.0, -1.0, -3.0]])
    out = g(x)
    out.pow(2).sum().backward()
    s, done = x, None
    for _ in range(4):  # the hand-written loop
        verdict = halt(s).reshape(-1) > 0
        done = verdict if done is None else done | verdict
        if bool(done.all()):
            break
        s = torch.where(done.reshape(-1, 1), s, twin(s))
    s.pow(2).sum().backward()
    assert done is not None and bool(done[0]) and not bool(done.all())  # some halted early
    assert torch.equal(out, s)
    assert torch.equal(body.bn.running_mean, twin.bn.running_mean)
    assert torch.equal(body.lin.weight.grad, twin.lin.weight.grad)


def test_learned_halt_per_sample():
    halt = fl.nn.LearnedHalt(1)
    with torch.no_grad():
        halt.proj.weight.fill_(1.0)
        halt.proj.bias.fill_(-10.0)  # halts once the value exceeds 10
    g = fl.FlowBuilder().loop_body(Scale(2.0)).while_cond(halt, 20).build()
    out = g(torch.tensor([[1.0], [6.0]]))
    torch.testing.assert_close(out, torch.tensor([[16.0], [12.0]]))
    assert len(list(g.parameters())) == 2


def test_loop_parameters_include_body_and_condition():
    g = (
        fl.FlowBuilder(nn.Linear(2, 2))
        .loop_body(nn.Linear(2, 2))
        .while_cond(nn.Linear(2, 1), 3)
        .build()
    )
    assert len(list(g.parameters())) == 6


def test_loop_refs_reach_every_iteration():
    g = fl.FlowBuilder().tag("ctx").loop_body(AddRef()).for_n(3).using("ctx").build()
    torch.testing.assert_close(g(torch.tensor([[2.0, 3.0]])), torch.tensor([[8.0, 12.0]]))
    x = torch.tensor([[2.0, 3.0]], requires_grad=True)
    g(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((1, 2), 4.0))


def test_while_loop_with_refs():
    g = (
        fl.FlowBuilder()
        .tag("ctx")
        .loop_body(AddRef())
        .until_cond(fl.nn.ThresholdHalt(100), 3)
        .using("ctx")
        .build()
    )
    torch.testing.assert_close(g(torch.tensor([[1.0]])), torch.tensor([[4.0]]))


def test_gate_with_equal_weights_is_the_mean_of_experts():
    g = fl.FlowBuilder().gate(EqualRouter(2), Scale(2.0), Scale(3.0)).build()
    torch.testing.assert_close(g(torch.tensor([[2.0, 4.0]])), torch.tensor([[5.0, 10.0]]))


def test_gate_matches_hand_written_moe_and_trains_the_router():
    torch.manual_seed(0)
    router = fl.nn.SoftmaxRouter(4, 3)
    experts = [nn.Linear(4, 4) for _ in range(3)]
    g = fl.FlowBuilder().gate(router, *experts).build()
    x = torch.randn(5, 4, requires_grad=True)
    w = router(x)
    expected = sum(w[:, i : i + 1] * e(x) for i, e in enumerate(experts))
    out = g(x)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    assert router.proj.weight.grad is not None and x.grad is not None
    assert all(p.grad is not None for p in g.parameters())
    assert len(list(g.parameters())) == 8


class PooledRouter(nn.Module):
    """One weight vector per sequence: [B, n] (``keepdim``: [B, 1, n])."""

    def __init__(self, keepdim: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 2)
        self.keepdim = keepdim

    def forward(self, x):
        return torch.softmax(self.proj(x.mean(1, keepdim=self.keepdim)), -1)


def test_gate_weights_of_lower_rank_than_the_outputs_are_refused():
    torch.manual_seed(0)
    experts = [nn.Linear(4, 4), nn.Linear(4, 4)]
    x = torch.randn(3, 3, 4)  # batch == time: [B, n] weights would broadcast along time
    wrong = fl.FlowBuilder().gate(PooledRouter(keepdim=False), *experts).build()
    with pytest.raises(ValueError, match=r"shape \[3, 2\].*must have shape.*\[3, 3, 2\]"):
        wrong(x)
    with pytest.raises(ValueError, match="must have shape"):  # the composite on its own too
        wrong.gate_2(x)
    router = PooledRouter(keepdim=True)
    right = fl.FlowBuilder().gate(router, *experts).build()
    w = router(x)  # [B, 1, n]: a size-1 dimension broadcasts
    assert torch.equal(right(x), (torch.stack([e(x) for e in experts], -2) * w[..., None]).sum(-2))
    global_router = GlobalRouter()
    shared = fl.FlowBuilder().gate(global_router, *experts).build()  # [n]: one for all
    w = torch.softmax(global_router.logits, -1)
    want = (torch.stack([e(x) for e in experts], -2) * w[:, None]).sum(-2)
    torch.testing.assert_close(shared(x), want)


class GlobalRouter(nn.Module):
    """One learned weight per expert, the same for every input: shape [n]."""

    def __init__(self) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.tensor([0.3, -0.2]))

    def forward(self, x):
        return torch.softmax(self.logits, -1)


def test_gate_router_receives_refs():
    g = (
        fl.FlowBuilder()
        .tag("ctx")
        .gate(fl.nn.SoftmaxRouter(2, 2), Scale(1.0), Scale(1.0))
        .using("ctx")
        .build()
    )
    assert g(torch.ones(3, 2)).shape == (3, 2)


def test_softmax_router_gate_has_exactly_the_routers_two_parameters():
    g = fl.FlowBuilder().gate(fl.nn.SoftmaxRouter(2, 2), Scale(2.0), Scale(3.0)).build()
    x = torch.randn(1, 2, requires_grad=True)
    out = g(x)
    assert out.shape == (1, 2)
    assert [tuple(p.shape) for p in g.parameters()] == [(2, 2), (2,)]
    out.sum().backward()
    assert x.grad is not None and all(p.grad is not None for p in g.parameters())


def test_sigmoid_router_gates_each_expert_independently():
    router = fl.nn.SigmoidRouter(3, 2)
    g = fl.FlowBuilder().gate(router, Scale(2.0), Scale(3.0)).build()
    x = torch.randn(4, 3)
    w = torch.sigmoid(router.proj(x))
    assert not torch.allclose(w.sum(-1), torch.ones(4))  # not a softmax
    torch.testing.assert_close(g(x), w[:, :1] * 2 * x + w[:, 1:] * 3 * x)


def test_argmax_selector_switch_at_batch_one():
    g = fl.FlowBuilder().switch(fl.nn.ArgmaxSelector(2, 2), Scale(2.0), Scale(3.0)).build()
    x = torch.tensor([[1.0, -1.0]])
    out = g(x)
    assert out.shape == (1, 2) and len(list(g.parameters())) == 2
    pick = int(g.switch_2.selector(x)[0])
    torch.testing.assert_close(out, x * (2.0, 3.0)[pick])


def test_switch_selector_receives_refs():
    sel = fl.nn.ArgmaxSelector(2, 2)
    with torch.no_grad():
        sel.proj.weight.copy_(torch.eye(2))
        sel.proj.bias.zero_()
    plain = fl.FlowBuilder().switch(sel, Scale(2.0), Scale(3.0)).build()
    x = torch.tensor([[1.0, 0.0]])
    torch.testing.assert_close(plain(x), x * 2.0)  # argmax 0 without the ref
    aux = fl.FlowBuilder().input("hint").switch(sel, Scale(2.0), Scale(3.0)).using("hint").build()
    # x + hint = [1, 5]: the ref moves the choice to branch 1 (the branch still sees x)
    torch.testing.assert_close(aux(x, hint=torch.tensor([[0.0, 5.0]])), x * 3.0)
    torch.testing.assert_close(aux(x, hint=torch.zeros(1, 2)), x * 2.0)


def test_switch_fixed_selector_runs_only_the_chosen_branch():
    g1 = fl.FlowBuilder().switch(fl.nn.FixedSelector(1), Scale(2.0), Scale(3.0)).build()
    torch.testing.assert_close(g1(torch.tensor([[1.0, 2.0]])), torch.tensor([[3.0, 6.0]]))
    g0 = fl.FlowBuilder().switch(fl.nn.FixedSelector(0), Scale(2.0), Scale(3.0)).build()
    torch.testing.assert_close(g0(torch.tensor([[1.0, 2.0]])), torch.tensor([[2.0, 4.0]]))


def test_switch_routes_per_sample_with_argmax_selector():
    sel = fl.nn.ArgmaxSelector(2, 2)
    with torch.no_grad():
        sel.proj.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
        sel.proj.bias.zero_()
    a, b = nn.Linear(2, 3), nn.Linear(2, 3)
    g = fl.FlowBuilder().switch(sel, a, b).build()
    x = torch.tensor([[5.0, 0.0], [0.0, 5.0], [1.0, 0.0], [0.0, 2.0]], requires_grad=True)
    out = g(x)
    expected = torch.stack([a(x[0]), b(x[1]), a(x[2]), b(x[3])])
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    assert x.grad is not None and a.weight.grad is not None and b.weight.grad is not None
    assert sel.proj.weight.grad is None  # the choice is not differentiable


def test_switch_gradient_reaches_only_the_selected_branch():
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    g = fl.FlowBuilder().switch(fl.nn.FixedSelector(0), a, b).build()
    x = torch.randn(3, 2, requires_grad=True)
    g(x).sum().backward()
    assert x.grad is not None and a.weight.grad is not None and b.weight.grad is None


def test_switch_out_of_range_index_is_an_error_naming_the_switch():
    g = fl.FlowBuilder().switch(fl.nn.FixedSelector(5), Scale(2.0), Scale(3.0)).build()
    with pytest.raises(IndexError, match="branch 5, but there are only 2") as info:
        g(torch.ones(1, 2))
    assert "switch_2" in "\n".join(info.value.__notes__)


def test_switch_parameters_include_unselected_branches():
    g = (
        fl.FlowBuilder()
        .switch(fl.nn.ArgmaxSelector(2, 2), nn.Linear(2, 2), nn.Linear(2, 2))
        .build()
    )
    assert len(list(g.parameters())) == 6


def test_map_each_applies_the_body_per_row():
    body = AddBias(2)
    with torch.no_grad():
        body.bias.fill_(1.0)
    g = fl.FlowBuilder().map(body).each().build()
    x = torch.randn(3, 2, requires_grad=True)
    out = g(x)
    torch.testing.assert_close(out, x + 1)
    out.sum().backward()
    torch.testing.assert_close(body.bias.grad, torch.full((2,), 3.0))
    torch.testing.assert_close(x.grad, torch.ones(3, 2))  # every row's gradient comes back


def test_map_batched_passes_the_whole_tensor():
    g = fl.FlowBuilder().map(Scale(2.0)).batched().each().build()
    torch.testing.assert_close(g(torch.tensor([1.0, 2.0, 3.0, 4.0])), torch.tensor([2.0, 4, 6, 8]))


def test_map_each_on_an_empty_batch_still_runs_the_body():
    g = fl.FlowBuilder().map(nn.Linear(2, 3)).each().build()
    assert g(torch.zeros(0, 2)).shape == (0, 3)


def test_map_over_a_tag_and_a_tagged_list():
    g = fl.FlowBuilder().tag("items").through(Scale(0.0)).map(Scale(3.0)).over("items").build()
    torch.testing.assert_close(g(torch.ones(2, 2)), torch.full((2, 2), 3.0))
    split = fl.FlowBuilder().through(lambda t: list(t.unbind(0))).tag("parts")
    lst = split.map(Scale(2.0)).over("parts").build()
    out = lst(torch.tensor([[1.0], [2.0]]))
    assert isinstance(out, list) and [t.item() for t in out] == [2.0, 4.0]


def test_map_slices_applies_the_body_to_each_slice():
    body = nn.Linear(2, 3)
    g = fl.FlowBuilder().map(body).slices(2).build()
    x = torch.randn(2, 4, requires_grad=True)
    out = g(x)
    assert out.shape == (2, 6)
    torch.testing.assert_close(out[:, 3:], body(x[:, 2:]))
    out.sum().backward()
    assert x.grad is not None and body.weight.grad is not None
    g3 = fl.FlowBuilder().map(nn.Linear(2, 3)).slices(2).build()
    assert g3(torch.randn(2, 5, 4)).shape == (2, 5, 6)


def test_batched_slices_match_element_wise_slices():
    body = nn.Linear(2, 3)
    x = torch.randn(4, 6)
    each = fl.FlowBuilder().map(body).slices(3).build()
    batched = fl.FlowBuilder().map(body).batched().slices(3).build()
    torch.testing.assert_close(batched(x), each(x))
    doubled = fl.FlowBuilder().map(Scale(2.0)).batched().slices(2).build()
    torch.testing.assert_close(doubled(torch.ones(2, 4)), torch.full((2, 4), 2.0))


def test_map_slices_rejects_indivisible_width():
    g = fl.FlowBuilder().map(nn.Linear(2, 3)).slices(3).build()
    with pytest.raises(ValueError, match="last dim 4 is not divisible by 3"):
        g(torch.randn(2, 4))
