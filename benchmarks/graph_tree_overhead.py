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

Usage: ``python benchmarks/graph_tree_overhead.py [--quick | --smoke] [--rounds N] [--out DIR]``.
``--smoke`` runs every case once at 8 wide and writes its report to ``results/smoke/`` (or
``--out``): it checks that the script still works (the test suite runs it), nothing more.
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
SMOKE_WIDTH = 8


class Plain(nn.Module):
    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(width, width), nn.GELU(), nn.Linear(width, width), nn.LayerNorm(width)
        )
        self.head = nn.Linear(width, width)

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
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="3 rounds x 50 (a short real run)")
    mode.add_argument(
        "--smoke", action="store_true", help="tiny model, 1 round: checks the script works"
    )
    parser.add_argument("--out", type=Path, help="report directory (default: results/)")
    args = parser.parse_args(argv if argv is not None else [])
    if args.quick:
        args.rounds, args.inner = 3, 50
    width = WIDTH
    if args.smoke:
        args.rounds, args.inner, width = 1, 1, SMOKE_WIDTH
        args.out = args.out or Path(__file__).resolve().parent / "results" / "smoke"
    torch.set_num_threads(1)
    torch.manual_seed(0)
    plain = Plain(width)
    again = copy.deepcopy(plain)
    graph = as_graph(copy.deepcopy(plain))
    restored = as_graph(copy.deepcopy(plain))
    restored.enable_profiling()
    restored.disable_profiling()
    profiled = as_graph(copy.deepcopy(plain))
    profiled.enable_profiling()
    observed = as_graph(copy.deepcopy(plain))
    x = torch.randn(1, width)
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
        cases,
        rounds=args.rounds,
        inner=args.inner,
        warmup=1 if args.smoke else 2,
        clock=time.process_time,
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
        f"forward, batch 1, {width} wide, no_grad; median of per-round medians over "
        f"{args.rounds} interleaved rounds x {args.inner}; torch {torch.__version__}, CPU, "
        "1 thread, process CPU clock. graph_after_profiling = enable_profiling() then "
        "disable_profiling(): it runs the plain generated forward again."
    )
    if args.smoke:
        notes = f"SMOKE RUN ({width} wide, 1 round): not a measurement."
    title = "Graph tree: profiling and observation overhead"
    path = write_report(title, rows, "graph_tree", notes, args.out)
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
