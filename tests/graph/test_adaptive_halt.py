"""A whole-batch halting verdict is read once on the host, as hand-written `.item() > 0` does, and
the loop runs exactly the iterations the hand-written loop runs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import flodl as fl


class Countdown(nn.Module):
    """Halts once the state's mean passes ``limit``; returns a 0-d tensor (or a Python value)."""

    def __init__(self, limit: float, kind: str = "tensor") -> None:
        super().__init__()
        self.limit = limit
        self.kind = kind

    def forward(self, x: torch.Tensor):
        score = x.mean() - self.limit
        if self.kind == "bool":
            return score > 0
        if self.kind == "python":
            return float(score)
        return score


def hand_written(x: torch.Tensor, body: nn.Module, cond: nn.Module, max_iter: int, until: bool):
    steps = 0
    for i in range(max_iter):
        if not until and torch.as_tensor(cond(x)).item() > 0:
            break
        x = body(x)
        steps += 1
        if until and i < max_iter - 1 and torch.as_tensor(cond(x)).item() > 0:
            break
    return x, steps


class Step(nn.Module):
    calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        Step.calls += 1
        return x + 1


@pytest.mark.parametrize("until", [True, False])
@pytest.mark.parametrize("kind", ["tensor", "bool", "python"])
@pytest.mark.parametrize("limit", [-100.0, 2.5, 100.0])
def test_whole_batch_halting_matches_the_hand_written_loop(until, kind, limit):
    cond = Countdown(limit, kind)
    b = fl.FlowBuilder().loop_body(Step())
    b = b.until_cond(cond, 6) if until else b.while_cond(cond, 6)
    graph = b.build()
    x = torch.zeros(3, 2)
    want, steps = hand_written(x, Step(), cond, 6, until)
    Step.calls = 0
    got = graph(x)
    assert torch.equal(got, want) and Step.calls == steps


def test_a_nan_verdict_does_not_halt():
    nan = fl.nn.Fn(lambda x: x.sum() * torch.nan)
    graph = fl.FlowBuilder().loop_body(Step()).until_cond(nan, 4).build()
    Step.calls = 0
    assert torch.equal(graph(torch.zeros(1)), torch.full((1,), 4.0)) and Step.calls == 4
