"""The porting vocabulary vs the hand-written PyTorch it replaces (same weights, same run).

Four models, each written twice: as the ``nn.Module`` a real script has, and as a FlowBuilder
graph using the step or builder call made for it:

* ``select_lstm``: ``nn.LSTM`` classifier, ``out, _ = lstm(x); head(out[:, -1])`` vs
  ``fl.nn.Select``;
* ``param_posembed``: a learned positional embedding, ``x + pos[:, : x.size(1)]`` vs
  ``fl.nn.Param(..., slice_dim=1)``;
* ``scan_lstmcell``: a 30-step ``nn.LSTMCell`` loop vs ``FlowBuilder.scan``;
* ``outputs_vae``: a VAE forward returning ``(recon, mu, logvar)`` vs ``.output(...)``.

Each is timed as a training step (forward, loss, backward, SGD step) with interleaved A/B
rounds, one thread, the process CPU clock; ``ratio`` = graph / hand-written (1.00 = identical)
and ``a_a_ratio`` = a second copy of the hand-written model against the first (the noise floor).

Usage: ``python benchmarks/porting_vocabulary.py [--quick | --smoke] [--rounds N] [--out DIR]``.
``--smoke`` runs each case once at tiny sizes (the test suite runs it): it measures nothing.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import interleaved, ratio, sgd_step, timing_options, write_report

import flodl as fl


class HandLSTM(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(d, d, batch_first=True)
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


class HandPos(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.embed = nn.Linear(d, d)
        self.pos = nn.Parameter(torch.randn(1, 64, d))

    def forward(self, x):
        h = self.embed(x)
        return h + self.pos[:, : h.size(1)]


class HandCell(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(d, d)
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        h = torch.zeros(x.size(0), self.cell.hidden_size)
        c = torch.zeros(x.size(0), self.cell.hidden_size)
        outs = []
        for t in range(x.size(1)):
            h, c = self.cell(x[:, t], (h, c))
            outs.append(h)
        return self.head(torch.stack(outs, 1))


class HandVAE(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.enc = nn.Linear(d, d)
        self.mu = nn.Linear(d, 8)
        self.logvar = nn.Linear(d, 8)
        self.dec = nn.Linear(8, d)

    def forward(self, x):
        h = torch.relu(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        return torch.sigmoid(self.dec(mu + 0.5 * logvar)), mu, logvar


class Combine(nn.Module):
    def forward(self, mu, logvar):
        return mu + 0.5 * logvar


def graphs(d: int) -> dict[str, tuple[nn.Module, nn.Module, Callable[[int], torch.Tensor]]]:
    """name -> (hand-written model, graph with the same weights, input maker)."""
    out = {}
    h = HandLSTM(d)
    t = copy.deepcopy(h)
    g = fl.FlowBuilder(t.lstm).through(fl.nn.Select(0)).through(fl.nn.Select((slice(None), -1)))
    out["select_lstm"] = (h, g.through(t.head).build(), lambda b: torch.randn(b, 30, d))
    h = HandPos(d)
    t = copy.deepcopy(h)
    pos = fl.nn.Param((1, 64, d), init=t.pos.detach(), slice_dim=1)
    g = fl.FlowBuilder(t.embed).through(pos).build()
    out["param_posembed"] = (h, g, lambda b: torch.randn(b, 30, d))
    h = HandCell(d)
    t = copy.deepcopy(h)
    g = fl.FlowBuilder().scan(t.cell, dim=1).through(t.head).build()
    out["scan_lstmcell"] = (h, g, lambda b: torch.randn(b, 30, d))
    h = HandVAE(d)
    t = copy.deepcopy(h)
    g = (
        fl.FlowBuilder(t.enc)
        .through(torch.relu)
        .fork(t.logvar)
        .tag("logvar")
        .through(t.mu)
        .tag("mu")
        .through(Combine())
        .using("logvar")
        .through(t.dec)
        .through(torch.sigmoid)
        .tag("recon")
        .output("recon", "mu", "logvar")
        .build()
    )
    out["outputs_vae"] = (h, g, lambda b: torch.randn(b, d))
    return out


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    args = timing_options(argv, description=__doc__.splitlines()[0])
    width, batch = (8, 2) if args.smoke else (64, 16)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows: list[dict[str, object]] = []
    for name, (hand, graph, make) in graphs(width).items():
        x = make(batch)
        # the same values first: a ratio between two different computations means nothing
        for a, b in zip(_flat(hand(x)), _flat(graph(x)), strict=True):
            assert torch.equal(a, b), name
        twin = copy.deepcopy(hand)
        cases = {
            "hand": sgd_step(hand, x),
            "graph": sgd_step(graph, x),
            "hand_again": sgd_step(twin, x),
        }
        results = interleaved(
            cases, rounds=args.rounds, inner=args.inner, warmup=1, clock=time.process_time
        )
        rows.append(
            {
                "model": name,
                "hand_ms": results["hand"].median_s * 1e3,
                "graph_ms": results["graph"].median_s * 1e3,
                "ratio": ratio(results, "graph", "hand"),
                "a_a_ratio": ratio(results, "hand_again", "hand"),
            }
        )
    notes = (
        f"graph / hand-written, same weights, training step, width {width}, batch {batch}; "
        f"median of per-round medians over {args.rounds} interleaved rounds x {args.inner}; "
        f"torch {torch.__version__}, CPU, 1 thread, process CPU clock. a_a_ratio = a second "
        "copy of the hand-written model against the first: the noise floor."
    )
    if args.smoke:
        notes = f"SMOKE RUN (width {width}, batch {batch}, 1 round): not a measurement."
    path = write_report("Porting vocabulary vs hand-written PyTorch", rows, "porting_vocabulary",
                        notes, args.out)  # fmt: skip
    print(path.read_text())
    return rows


def _flat(value) -> list[torch.Tensor]:
    return list(value) if isinstance(value, tuple) else [value]


if __name__ == "__main__":
    main(sys.argv[1:])
