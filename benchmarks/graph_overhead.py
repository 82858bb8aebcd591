"""FlowBuilder graphs vs the same models written as plain ``nn.Module``s (same weights, same run).

Models and sizes follow the Rust original's benchmark suite (so the two ports compare) with CPU-sized
batches (the originals use 128-256 on a GPU; here 16, or 8 for the 1024-wide models, so a round
takes seconds on one CPU thread). Two measurements per model, interleaved A/B rounds:

* ``train``: forward + MSE + zero_grad + backward + Adam step + ``loss.item()``;
* ``forward_b1``: forward only, batch size 1, under ``torch.no_grad()``;
* ``forward_b1_w32``: the same, with every layer 32 wide: the math is negligible, so this is
  where per-node overhead would show.

The ratio is flodl / plain (1.00 = identical; < 1 = flodl faster); ``a_a_ratio`` times a second
copy of the plain model against the first in the same rounds, so the noise floor is on every row. ``torch.set_num_threads(1)``
and timing with the process's CPU clock (``time.process_time``) keep numbers stable when other
processes share the machine's cores: time the scheduler gives them is not counted, though
cache and memory-bandwidth contention still add noise (interleaving spreads it over both sides).

Usage: ``python benchmarks/graph_overhead.py [--quick | --smoke] [--rounds N] [--models a,b]
[--out DIR]``. ``--quick`` is a short real run (3 rounds x 2); ``--smoke`` runs every model and
mode at 8 wide, batch 2, one round, and writes its report to ``results/smoke/`` (or ``--out``):
it checks that the script, the models and the report still work (the test suite runs it) and
measures nothing worth reading.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import interleaved, ratio, write_report

import flodl as fl

# ---------------------------------------------------------------- plain PyTorch models


def block(dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.LayerNorm(dim))


class Residual(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.net = block(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.net(x)


class PlainMLP(nn.Module):
    def __init__(self, dim: int = 1024) -> None:
        super().__init__()
        dims = [dim, 2 * dim, 2 * dim, 2 * dim, 2 * dim]
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(dims):
            layers += [nn.Linear(a, b), nn.GELU(), nn.LayerNorm(b)]
        layers.append(nn.Linear(2 * dim, dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class PlainResidualTower(nn.Module):
    def __init__(self, dim: int = 1024, depth: int = 12) -> None:
        super().__init__()
        self.entry = nn.Linear(dim, dim)
        self.blocks = nn.ModuleList(Residual(dim) for _ in range(depth))
        self.head = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.entry(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


class PlainGatedRouting(nn.Module):
    def __init__(self, dim: int = 512, n: int = 8) -> None:
        super().__init__()
        self.entry = nn.Linear(dim, dim)
        self.act = nn.GELU()
        self.router = fl.nn.SoftmaxRouter(dim, n)
        self.experts = nn.ModuleList(block(dim) for _ in range(n))
        self.head = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.entry(x))
        w = self.router(h)
        outs = torch.stack([e(h) for e in self.experts], dim=1)
        return self.head((outs * w.unsqueeze(-1)).sum(dim=1))


class PlainIterative(nn.Module):
    def __init__(self, dim: int, steps: int) -> None:
        super().__init__()
        self.encoder = block(dim)
        self.refine = Residual(dim)
        self.head = nn.Linear(dim, dim)
        self.steps = steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.encoder(x)
        for _ in range(self.steps):
            x = self.refine(x)
        return self.head(x)


# ---------------------------------------------------------------- the same models, described


def chain(seq: nn.Sequential) -> fl.FlowBuilder:
    b = fl.FlowBuilder(seq[0])
    for m in list(seq)[1:]:
        b = b.through(m)
    return b


def graph_mlp(p: PlainMLP) -> fl.Graph:
    return chain(p.net).build()


def graph_residual_tower(p: PlainResidualTower) -> fl.Graph:
    b = fl.FlowBuilder(p.entry)
    for r in p.blocks:
        b = b.also(chain(r.net).build())
    return b.through(p.head).build()


def graph_gated_routing(p: PlainGatedRouting) -> fl.Graph:
    experts = [chain(e).build() for e in p.experts]
    return fl.FlowBuilder(p.entry).through(p.act).gate(p.router, *experts).through(p.head).build()


def graph_iterative(p: PlainIterative) -> fl.Graph:
    refine = fl.FlowBuilder().also(chain(p.refine.net).build()).build()
    b = chain(p.encoder).loop_body(refine).for_n(p.steps)
    return b.through(p.head).build()


MODELS: dict[str, tuple[Callable[[int], nn.Module], Callable[[nn.Module], fl.Graph], int, int]] = {
    # name: (plain factory taking the width, graph from a copy of it, width, CPU batch)
    "mlp": (PlainMLP, graph_mlp, 1024, 8),
    "residual_tower": (PlainResidualTower, graph_residual_tower, 1024, 8),
    "gated_routing": (PlainGatedRouting, graph_gated_routing, 512, 16),
    "iterative_refine": (lambda d: PlainIterative(d, 8), graph_iterative, 1024, 8),
    "feedback_fixed": (lambda d: PlainIterative(d, 10), graph_iterative, 512, 16),
}
SMALL_WIDTH = 32  # forward_b1_w32: the same topology, tiny layers: nothing but dispatch overhead


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x, y) -> Callable[[], None]:
    def run() -> None:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()

    return run


def forward_only(model: nn.Module, x) -> Callable[[], None]:
    def run() -> None:
        with torch.no_grad():
            model(x)

    return run


SMOKE_WIDTH, SMOKE_BATCH = 8, 2


def measure(name: str, rounds: int, inner: int, smoke: bool = False) -> list[dict[str, object]]:
    make, describe, width, batch = MODELS[name]
    if smoke:
        width, batch = SMOKE_WIDTH, SMOKE_BATCH
    torch.manual_seed(0)
    rows = []
    for mode in ("train", "forward_b1", f"forward_b1_w{SMALL_WIDTH}"):
        small = SMOKE_WIDTH if smoke else SMALL_WIDTH
        dim = small if mode.endswith(f"w{SMALL_WIDTH}") else width
        # Three fresh copies of one initialisation: plain, plain again (the A/A control that shows
        # the noise floor) and the graph, so every side's tensors are allocated alike.
        original = make(dim)
        plain, again = copy.deepcopy(original), copy.deepcopy(original)
        graph = describe(copy.deepcopy(original))
        del original
        x1 = torch.randn(1, dim)
        with torch.no_grad():  # same weights, same function
            torch.testing.assert_close(graph(x1), plain(x1))
        if mode == "train":
            x, y = torch.randn(batch, dim), torch.randn(batch, dim)
            cases = {
                key: train_step(m, torch.optim.Adam(m.parameters(), lr=1e-3), x, y)
                for key, m in (("plain", plain), ("plain_again", again), ("flodl", graph))
            }
        else:
            cases = {
                key: forward_only(m, x1)
                for key, m in (("plain", plain), ("plain_again", again), ("flodl", graph))
            }
        results = interleaved(
            cases, rounds=rounds, inner=inner, warmup=1 if smoke else 2, clock=time.process_time
        )
        rows.append(
            {
                "model": name,
                "mode": mode,
                "batch": batch if mode == "train" else 1,
                "plain_ms": results["plain"].median_s * 1e3,
                "flodl_ms": results["flodl"].median_s * 1e3,
                "ratio": ratio(results, "flodl", "plain"),
                "a_a_ratio": ratio(results, "plain_again", "plain"),
            }
        )
        print(
            f"{name:17s} {mode:15s} plain {rows[-1]['plain_ms']:8.3f} ms  "
            f"flodl {rows[-1]['flodl_ms']:8.3f} ms  ratio {rows[-1]['ratio']:.3f}  "
            f"(A/A {rows[-1]['a_a_ratio']:.3f})",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--inner", type=int, default=5)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="3 rounds x 2 (a short real run)")
    mode.add_argument(
        "--smoke", action="store_true", help="tiny models, 1 round: checks the script works"
    )
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", type=Path, help="report directory (default: results/)")
    args = parser.parse_args(argv if argv is not None else [])
    if args.quick:
        args.rounds, args.inner = 3, 2
    if args.smoke:
        args.rounds, args.inner = 1, 1
        args.out = args.out or Path(__file__).resolve().parent / "results" / "smoke"
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    torch.set_num_threads(1)
    rows: list[dict[str, object]] = []
    for name in args.models.split(","):
        rows += measure(name, args.rounds, args.inner, smoke=args.smoke)
    notes = (
        f"flodl / plain nn.Module, same weights, median of per-round medians over {args.rounds} "
        f"interleaved rounds x {args.inner}; torch {torch.__version__}, CPU, 1 thread, "
        "timed with the process CPU clock (other processes may share the cores). Batches are CPU-sized (8-16, the original suite "
        "uses 128-256 on GPU); forward_b1 = forward only, batch 1, no_grad; "
        f"forward_b1_w{SMALL_WIDTH} = the same topology {SMALL_WIDTH} wide (pure per-node overhead). "
        "a_a_ratio = a second copy of the plain model against the first: the noise floor."
    )
    if args.smoke:
        notes = f"SMOKE RUN ({SMOKE_WIDTH} wide, batch {SMOKE_BATCH}, 1 round): not a measurement."
    path = write_report(
        "FlowBuilder graph overhead vs plain PyTorch", rows, "graph_overhead", notes, args.out
    )
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
