"""How long the generated forward keeps values: intermediates die after their last reader (as
in a hand-written ``x = layer(x)``), tagged values live until the next pass starts."""

from __future__ import annotations

import copy
import weakref

import pytest
import torch
from torch import nn

import flodl as fl


class Remember(nn.Module):
    """Passes its input through as a new tensor and keeps a weak reference to the input."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[weakref.ref] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(weakref.ref(x))
        return x * 2


class AliveNow(nn.Module):
    """Records, when it runs, which of ``remember``'s inputs are still alive."""

    def __init__(self, remember: Remember) -> None:
        super().__init__()
        self.remember = [remember]  # a list: not a submodule
        self.alive: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.alive = [ref() is not None for ref in self.remember[0].seen]
        return x + 1


def test_an_intermediate_is_freed_after_its_last_reader():
    remember = Remember()
    check = AliveNow(remember)
    model = fl.FlowBuilder(nn.Linear(4, 4)).through(remember).through(check).build()
    with torch.no_grad():
        model(torch.randn(2, 4))
    # Linear's output was read only by Remember: gone before AliveNow runs.
    assert check.alive == [False]


def test_a_value_read_later_lives_until_that_reader():
    remember = Remember()
    check = AliveNow(remember)
    # The residual add reads the Linear's output after Remember ran: kept until the add, then
    # freed before AliveNow.
    model = fl.FlowBuilder(nn.Linear(4, 4)).also(remember).through(check).build()
    x = torch.randn(2, 4)
    with torch.no_grad():
        out = model(x)
        linear = model.get_submodule("linear_1")
        assert torch.equal(out, linear(x) + linear(x) * 2 + 1)
    assert check.alive == [False]


def test_tagged_values_are_released_when_the_next_pass_starts():
    remember = Remember()
    check = AliveNow(remember)
    model = fl.FlowBuilder(remember).tag("doubled").through(check).build()
    model(torch.randn(2, 4))
    tagged = weakref.ref(model.tagged("doubled"))
    remember.seen = [tagged]
    model(torch.randn(2, 4))
    assert check.alive[0] is False  # gone by the time the second pass reached its last step
    assert model.tagged("doubled").shape == (2, 4)


def test_nested_graphs_tagged_values_are_released_when_the_outer_pass_starts():
    # A tag inside a nested graph (a loop body, an attention block) was released only when that
    # graph's own pass began, deep inside the next outer pass: the previous pass's autograd
    # history (its grad accumulators too) lived on while the first steps ran again. Under
    # fl.cuda_graph_capture that made the captured backward reuse a warm-up's accumulators
    # (torch warned of a stream mismatch); without backward it kept the last pass's activations.
    remember = Remember()
    check = AliveNow(remember)
    inner = fl.FlowBuilder(nn.Linear(4, 4)).tag("inner").through(nn.Tanh()).build()
    body = fl.FlowBuilder(nn.Linear(4, 4)).tag("body").build()
    model = (
        fl.FlowBuilder(check)
        .through(inner)
        .loop_body(fl.FlowBuilder().also(body).build())
        .for_n(2)
        .build()
    )
    model(torch.randn(2, 4))
    seen = [inner.tagged("inner"), body.tagged("body")]
    assert all(t is not None and t.grad_fn is not None for t in seen)
    remember.seen = [weakref.ref(t) for t in seen]
    del seen
    model(torch.randn(2, 4))
    assert check.alive == [False, False]  # gone before the second pass ran its first step
    assert inner.tagged("inner").shape == body.tagged("body").shape == (2, 4)
    assert copy.deepcopy(model)(torch.randn(2, 4)).shape == (2, 4)  # a copy clears its own


def test_tagged_values_keep_their_history_for_a_loss_after_the_pass():
    model = fl.FlowBuilder(nn.Linear(4, 4)).tag("hidden").through(nn.Linear(4, 1)).build()
    out = model(torch.randn(3, 4))
    (out.sum() + model.tagged("hidden").pow(2).sum()).backward()
    assert all(p.grad is not None for p in model.parameters())


class Fails(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom")


def test_after_a_failed_pass_no_stale_tagged_value_is_returned():
    model = fl.FlowBuilder(nn.Linear(4, 4)).tag("hidden").through(nn.Linear(4, 4)).build()
    model(torch.randn(2, 4))
    assert model.tagged("hidden") is not None
    model.get_submodule("linear_2").register_forward_pre_hook(lambda m, a: Fails()(a[0]))
    with pytest.raises(RuntimeError, match="boom"):
        model(torch.randn(2, 4))
    assert model.tagged("hidden") is None
