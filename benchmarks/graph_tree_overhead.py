"""What observation and profiling cost: nothing unless you use them.

Models: a composed graph (a labelled 4-layer encoder child + head, 32 wide, batch 1, no_grad:
per-node overhead dominates) against the same model written as plain ``nn.Module``s. Cases,
interleaved in the same rounds:

* ``plain``: the hand-written model; ``plain_again``: a second copy (the A/A noise floor);
* ``graph``: the Graph, never profiled;
* ``graph_after_profiling``: a Graph that had profiling enabled then disabled (must equal
  ``graph``: the plain forward is restored, no timing code left);
* ``graph_profiling``: profiling on (what a profiled forward costs: two clock reads per node);
* ``graph_observed``: forward + ``record_scalar`` of a one-element tensor every batch (as a
  training loop would log its loss).

Usage: ``python benchmarks/graph_tree_overhead.py [--quick] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import interleaved, ratio, write_report

import flodl as fl

WIDTH = 32


class Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(WIDTH, WIDTH), nn.GELU(), nn.Linear(WIDTH, WIDTH), nn.LayerNorm(WIDTH)
        )
        self.head = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def as_graph(p: Plain) -> fl.Graph:
    e = p.encoder
    encoder = (
        fl.FlowBuilder(e[0]).tag("hidden").through(e[1]).through(e[2]).through(e[3])
        .label("encoder").build()
    )  # fmt: skip
    return fl.FlowBuilder(encoder).through(p.head).tag("head").build()


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--inner", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="3 rounds x 50 (a smoke run)")
    args = parser.parse_args(argv if argv is not None else [])
    if args.quick:
        args.rounds, args.inner = 3, 50
    torch.set_num_threads(1)
    torch.manual_seed(0)
    plain = Plain()
    again = copy.deepcopy(plain)
    graph = as_graph(copy.deepcopy(plain))
    restored = as_graph(copy.deepcopy(plain))
    restored.enable_profiling()
    restored.disable_profiling()
    profiled = as_graph(copy.deepcopy(plain))
    profiled.enable_profiling()
    observed = as_graph(copy.deepcopy(plain))
    x = torch.randn(1, WIDTH)
    with torch.no_grad():
        for m in (graph, restored, profiled, observed):
            torch.testing.assert_close(m(x), plain(x))

    def fwd(model: nn.Module):
        def run() -> None:
            with torch.no_grad():
                model(x)

        return run

    def observe() -> None:
        with torch.no_grad():
            observed.record_scalar("loss", observed(x).sum())

    cases = {
        "plain": fwd(plain),
        "plain_again": fwd(again),
        "graph": fwd(graph),
        "graph_after_profiling": fwd(restored),
        "graph_profiling": fwd(profiled),
        "graph_observed": observe,
    }
    results = interleaved(
        cases, rounds=args.rounds, inner=args.inner, warmup=2, clock=time.process_time
    )
    rows = []
    for case in cases:
        rows.append(
            {
                "case": case,
                "us_per_call": results[case].median_s * 1e6,
                "vs_plain": ratio(results, case, "plain"),
                "vs_graph": ratio(results, case, "graph"),
            }
        )
        print(
            f"{case:22s} {rows[-1]['us_per_call']:8.2f} us  vs plain {rows[-1]['vs_plain']:.3f}  "
            f"vs graph {rows[-1]['vs_graph']:.3f}",
            flush=True,
        )
    notes = (
        f"forward, batch 1, {WIDTH} wide, no_grad; median of per-round medians over "
        f"{args.rounds} interleaved rounds x {args.inner}; torch {torch.__version__}, CPU, "
        "1 thread, process CPU clock. graph_after_profiling = enable_profiling() then "
        "disable_profiling(): it runs the plain generated forward again."
    )
    path = write_report("Graph tree: profiling and observation overhead", rows, "graph_tree", notes)
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
