"""Small modules shared by the graph tests (picklable: defined at module level), and the
checks the direct-dispatch tests share."""

from __future__ import annotations

import linecache
import sys

import torch
from torch import nn

import flodl as fl
from flodl.graph import dispatch


def direct_source(graph: fl.Graph) -> str:
    """The source of ``graph``'s generated direct forward."""
    fn = graph._direct_forward()
    return "".join(linecache.cache[fn.__code__.co_filename][2])


def whole_tree_direct(graph: fl.Graph) -> bool:
    """The merged plan holds: nested graphs' direct forwards are called without ``forward``."""
    return graph._direct_plan is not None and dispatch.direct_ok(graph._direct_plan.merged())


def same_gradients_then_step(module: nn.Module, reference: nn.Module, opts) -> None:
    """The parameters' gradients match; then both take an SGD step (parameters after optimizer
    steps stay identical only if every step's gradients did)."""
    for a, b in zip(module.parameters(), reference.parameters(), strict=True):
        assert (a.grad is None and b.grad is None) or torch.equal(a.grad, b.grad)
    for opt in opts:
        opt.step()
        opt.zero_grad()


def sgd(*modules: nn.Module) -> list[torch.optim.Optimizer]:
    return [torch.optim.SGD(m.parameters(), lr=0.1) for m in modules]


def frames_of(code: object, run) -> int:
    """How many times a Python frame of ``code`` starts while ``run()`` runs."""
    seen = []
    sys.setprofile(lambda frame, event, arg: seen.append(frame.f_code) if event == "call" else None)
    try:
        run()
    finally:
        sys.setprofile(None)
    return seen.count(code)


def identity_linear(n: int, bias: float = 0.0) -> nn.Linear:
    layer = nn.Linear(n, n)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(n))
        layer.bias.fill_(bias)
    return layer


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


class AddBias(nn.Module):
    """x + b with a learnable b (for BPTT gradient counting)."""

    def __init__(self, n: int = 2) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        return x + self.bias


class AddRef(nn.Module):
    """forward_named: x + Σ refs (records what it received)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict] = []

    def forward(self, x):
        return x

    def forward_named(self, x, refs):
        self.seen.append(dict(refs))
        for v in refs.values():
            x = x + v
        return x


class TakesCtx(nn.Module):
    """Positional / keyword refs: x + ctx (+ 10 * bonus)."""

    def forward(self, x, ctx, bonus=None):
        out = x + ctx
        if bonus is not None:
            out = out + 10 * bonus
        return out


class EqualRouter(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x):
        return torch.full((*x.shape[:-1], self.n), 1.0 / self.n)


def block(dim: int = 6) -> fl.Graph:
    return fl.FlowBuilder(nn.Linear(dim, dim)).through(nn.GELU()).through(nn.LayerNorm(dim)).build()


def halting_loop(dim: int = 6) -> fl.Graph:
    """A loop that halts on a verdict read on the host: no tracer (fx, torch.export) records it."""
    return (
        fl.FlowBuilder(nn.Linear(dim, dim))
        .loop_body(nn.Linear(dim, dim))
        .until_cond(fl.nn.ThresholdHalt(100.0), 3)
        .build()
    )


def traceable() -> dict[str, fl.Graph]:
    """One graph per node kind fx (and so torch.export) can trace: no host reads, which halting
    loops and switches make."""
    attn = fl.FlowBuilder().tag("q").through(nn.MultiheadAttention(6, 2, batch_first=True))
    return {
        "chain": block(),
        "residual and tag": fl.FlowBuilder(nn.Linear(6, 6)).also(block()).tag("a").build(),
        "split and merge": fl.FlowBuilder(nn.Linear(6, 6))
        .split(nn.Linear(6, 6), block())
        .merge(fl.MergeOp.MEAN)
        .build(),
        "for_n loop": fl.FlowBuilder(nn.Linear(6, 6)).loop_body(block()).for_n(3).build(),
        "gate": fl.FlowBuilder(nn.Linear(6, 6))
        .gate(fl.nn.SoftmaxRouter(6, 2), block(), block())
        .build(),
        "attention with refs": fl.FlowBuilder(nn.Linear(6, 6))
        .also(attn.using(key="q", value="q").through(fl.nn.Select(0)).build())
        .build(),
        "recurrent": fl.FlowBuilder(nn.Linear(6, 6))
        .through(nn.LSTM(6, 6, batch_first=True))
        .through(fl.nn.Select(0))
        .build(),
    }
