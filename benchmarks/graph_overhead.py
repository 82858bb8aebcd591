"""FlowBuilder graphs vs the same models written by hand as ``nn.Module``s (same weights, same run).

The ten architectures of the Rust flodl's benchmark suite plus its adaptive feedback loop, so the
overhead is measured on the models that suite measures:
mlp, convnet, conv_autoencoder, gru_seq, lstm_seq, transformer, residual_tower, gated_routing,
iterative_refine, feedback_fixed and feedback_adaptive. Topologies are that suite's; sizes
are cut to CPU scale (it runs batch 128-256 on a GPU): a training step takes a few
to a few tens of milliseconds on one thread, the range where per-call Python overhead is
visible. Each model is written once as a plain module and once with FlowBuilder around the
same (deep-copied) layers, and the two are checked bit-exact (``torch.equal``) on the
benchmark's own inputs before anything is timed.

Per model, two timings (interleaved A/B rounds, one thread, process CPU time, medians):

* ``train``: forward + loss + zero_grad + backward + Adam step + ``loss.item()``;
* ``forward_b1``: forward only, batch 1, under ``torch.no_grad()``, in eval mode (inference).

Columns: ``ratio`` = flodl / plain (< 1: flodl faster); ``a_a_ratio`` = a second copy of the
plain model against the first, timed in the same rounds: the noise floor on every row;
``direct_gain`` = flodl / the same graph built with direct dispatch off
(``FLODL_DIRECT_DISPATCH=0``: every step through ``nn.Module.__call__``), the gain of direct
dispatch alone; ``plain_mad``/``flodl_mad`` = scaled median absolute deviation (x 1.4826) of
the per-round medians, as a fraction of the median; ``plain_peak_kib``/``flodl_peak_kib``/``mem_ratio`` =
peak memory of one step (see :func:`peak_bytes`).

With ``--repeat N`` the whole measurement (every model, both modes) runs N times in a row and
each row reports the median of each figure over the N runs, with the N ratios in ``ratio_runs``:
on a shared machine a single run's row can move by more than the effect measured, and a
median over whole runs is steadier than more rounds in one run (the noise comes in bursts
longer than a round).

``--small`` runs the same models with layers 8-16x narrower (64-128 wide instead of 512-1024,
smaller images, sequences and vocabulary): forwards of tens to hundreds of microseconds, where
the time goes to per-call overhead rather than to kernels, so the rows show what the framework
itself costs or saves. Its report is ``graph_overhead_small``.

Usage: ``python benchmarks/graph_overhead.py [--quick | --smoke] [--small] [--rounds N]
[--repeat N] [--models a,b] [--out DIR]``. ``--quick`` is a short real run (3 rounds x 2);
``--smoke`` runs every model and mode at toy sizes, one round, and writes its report to
``results/smoke/`` (or ``--out``): it checks that the script, the models and the report still
work (the test suite runs it) and measures nothing worth reading.
"""

from __future__ import annotations

import copy
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import interleaved, ratio, timing_options, timing_parser, write_report

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
    def __init__(self, dim: int) -> None:
        super().__init__()
        dims = [dim, 2 * dim, 2 * dim, 2 * dim, 2 * dim]
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(dims):
            layers += [nn.Linear(a, b), nn.GELU(), nn.LayerNorm(b)]
        layers.append(nn.Linear(2 * dim, dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class PlainConvNet(nn.Module):
    """5 x (Conv3x3 -> BatchNorm -> ReLU), a 2x2 max-pool after the first four, then a head."""

    def __init__(self, width: int, classes: int) -> None:
        super().__init__()
        chans = [3, width, 2 * width, 4 * width, 8 * width, 8 * width]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(itertools.pairwise(chans)):
            layers += [nn.Conv2d(a, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU()]
            if i < 4:
                layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.flatten = nn.Flatten(1)
        self.head = nn.Linear(8 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.flatten(self.pool(self.features(x))))


class PlainConvAutoencoder(nn.Module):
    """4 strided convs down, 4 transposed convs up (BatchNorm + ReLU between, Tanh at the end)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        down = [3, width, 2 * width, 4 * width, 8 * width]
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(down):
            layers += [nn.Conv2d(a, b, 4, stride=2, padding=1), nn.BatchNorm2d(b), nn.ReLU()]
        up = down[::-1]
        for i, (a, b) in enumerate(itertools.pairwise(up)):
            layers.append(nn.ConvTranspose2d(a, b, 4, stride=2, padding=1))
            layers += [nn.BatchNorm2d(b), nn.ReLU()] if i < 3 else [nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class PlainGRUSeq(nn.Module):
    """A GRUCell unrolled step by step over the sequence (that suite's model), a head on the last state."""

    def __init__(self, features: int, hidden: int) -> None:
        super().__init__()
        self.cell = nn.GRUCell(features, hidden)
        self.head = nn.Linear(hidden, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = None
        for x_t in x.unbind(1):
            h = self.cell(x_t, h)
        return self.head(h)


class PlainLSTMSeq(nn.Module):
    """A 2-layer fused LSTM; a head on the last time step's output."""

    def __init__(self, features: int, hidden: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


class EncoderLayer(nn.Module):
    """Post-LN encoder layer: ``x = LN(x + MHA(x, x, x)); x = LN(x + FF(x))``."""

    def __init__(self, dim: int, heads: int, ff: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm1 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, ff), nn.GELU(), nn.Linear(ff, dim))
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(x, x, x)[0])
        return self.norm2(x + self.ff(x))


class PlainTransformer(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, ff: int, depth: int, seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = fl.nn.Param((1, seq, dim), init=nn.init.normal_)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, ff) for _ in range(depth))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos.value
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class PlainResidualTower(nn.Module):
    def __init__(self, dim: int, depth: int = 12) -> None:
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
    def __init__(self, dim: int, n: int = 8) -> None:
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


class MeanHalt(nn.Module):
    """The halting probe: ``Linear(dim -> 1)`` averaged over the batch (one verdict per batch)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, 1)
        with torch.no_grad():  # never halts: every step pays the full 10 iterations and 9 checks
            self.proj.bias.fill_(-1e4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).mean()


class PlainAdaptive(PlainIterative):
    """``for_n`` replaced by a do-while: stop after an iteration whose halt score is > 0."""

    def __init__(self, dim: int, steps: int) -> None:
        super().__init__(dim, steps)
        self.halt = MeanHalt(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.encoder(x)
        for i in range(self.steps):
            x = self.refine(x)
            if i < self.steps - 1 and self.halt(x).item() > 0:
                break
        return self.head(x)


# ---------------------------------------------------------------- the same models, described


def chain(seq: nn.Sequential | list[nn.Module], b: fl.FlowBuilder | None = None) -> fl.FlowBuilder:
    mods = list(seq)
    if b is None:
        b, mods = fl.FlowBuilder(mods[0]), mods[1:]
    for m in mods:
        b = b.through(m)
    return b


def graph_mlp(p: PlainMLP) -> fl.Graph:
    return chain(p.net).build()


def graph_convnet(p: PlainConvNet) -> fl.Graph:
    return chain([p.pool, p.flatten, p.head], chain(p.features)).build()


def graph_conv_autoencoder(p: PlainConvAutoencoder) -> fl.Graph:
    return chain(p.net).build()


def graph_gru_seq(p: PlainGRUSeq) -> fl.Graph:
    # The loop keeps only its last state, as the hand-written one does: nothing collected.
    return fl.FlowBuilder().scan(p.cell, dim=1, keep="last").through(p.head).build()


def graph_lstm_seq(p: PlainLSTMSeq) -> fl.Graph:
    b = fl.FlowBuilder(p.lstm).through(fl.nn.Select(0)).through(fl.nn.Select((slice(None), -1)))
    return b.through(p.head).build()


def graph_transformer(p: PlainTransformer) -> fl.Graph:
    b = fl.FlowBuilder(p.embed).through(p.pos)
    for layer in p.layers:
        attn = fl.FlowBuilder().tag("x").through(layer.attn).using(key="x", value="x")
        b = b.also(attn.through(fl.nn.Select(0)).build()).through(layer.norm1)
        b = b.also(chain(layer.ff).build()).through(layer.norm2)
    return b.through(p.head).build()


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


def graph_adaptive(p: PlainAdaptive) -> fl.Graph:
    refine = fl.FlowBuilder().also(chain(p.refine.net).build()).build()
    b = chain(p.encoder).loop_body(refine).until_cond(p.halt, p.steps)
    return b.through(p.head).build()


# ---------------------------------------------------------------- the suite


def dense(dim: int) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    return lambda batch: (torch.randn(batch, dim), torch.randn(batch, dim))


def images(size: int, classes: int | None) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    def make(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(batch, 3, size, size)
        return x, (x if classes is None else torch.randn(batch, classes))

    return make


def sequences(seq: int, features: int) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    return lambda batch: (torch.randn(batch, seq, features), torch.randn(batch, features))


def tokens(vocab: int, seq: int) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    return lambda batch: (torch.randint(vocab, (batch, seq)), torch.randint(vocab, (batch, seq)))


def token_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


@dataclass
class Model:
    """One benchmark: the plain model's factory, its graph description, data, loss, batch."""

    plain: Callable[[], nn.Module]
    graph: Callable[[Any], fl.Graph]
    data: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    batch: int
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.mse_loss
    lr: float = 1e-3


# Sizes per tier: dense widths (the 512- and 1024-wide models), convolutions (width, image
# side), recurrent models (features, hidden, sequence), transformer (vocab, dim, heads, ff,
# depth, tokens).
SIZES = {
    "cpu": ((512, 1024), (32, 32), (64, 256, 16), (1024, 128, 4, 512, 4, 32)),
    "small": ((64, 128), (8, 16), (16, 64, 16), (256, 32, 4, 64, 4, 16)),
    "smoke": ((8, 8), (2, 32), (4, 8, 3), (16, 8, 2, 16, 2, 4)),
}


def suite(smoke: bool = False, small: bool = False) -> dict[str, Model]:
    """The 11 benchmarks at CPU sizes (``small``: 8-16x narrower, dispatch-bound; ``smoke``:
    toy sizes that only prove the script runs)."""
    tier = "smoke" if smoke else "small" if small else "cpu"
    (d512, d1024), (conv, img), (feat, hid, seq), transformer = SIZES[tier]
    vocab, dim, heads, ff, depth, tok = transformer
    return {
        "mlp": Model(lambda: PlainMLP(d1024), graph_mlp, dense(d1024), 8),
        "convnet": Model(lambda: PlainConvNet(conv, 100), graph_convnet, images(img, 100), 2),
        "conv_autoencoder": Model(
            lambda: PlainConvAutoencoder(conv), graph_conv_autoencoder, images(img, None), 2
        ),
        "gru_seq": Model(lambda: PlainGRUSeq(feat, hid), graph_gru_seq, sequences(seq, feat), 8),
        "lstm_seq": Model(lambda: PlainLSTMSeq(feat, hid), graph_lstm_seq, sequences(seq, feat), 8),
        "transformer": Model(
            lambda: PlainTransformer(vocab, dim, heads, ff, depth, tok),
            graph_transformer,
            tokens(vocab, tok),
            4,
            loss=token_loss,
            lr=1e-4,
        ),
        "residual_tower": Model(
            lambda: PlainResidualTower(d1024), graph_residual_tower, dense(d1024), 8
        ),
        "gated_routing": Model(
            lambda: PlainGatedRouting(d512), graph_gated_routing, dense(d512), 16
        ),
        "iterative_refine": Model(
            lambda: PlainIterative(d1024, 8), graph_iterative, dense(d1024), 8
        ),
        "feedback_fixed": Model(lambda: PlainIterative(d512, 10), graph_iterative, dense(d512), 16),
        "feedback_adaptive": Model(
            lambda: PlainAdaptive(d512, 10), graph_adaptive, dense(d512), 16
        ),
    }


MODEL_NAMES = list(suite(smoke=True))


def train_step(model: nn.Module, spec: Model, x, y) -> Callable[[], None]:
    opt = torch.optim.Adam(model.parameters(), lr=spec.lr)

    def run() -> None:
        loss = spec.loss(model(x), y)
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


def peak_bytes(step: Callable[[], None]) -> int:
    """Peak bytes held by tensors during one call of ``step``, above what was live before it.

    Read from the CPU allocator's own allocation/free records (the torch profiler with
    ``profile_memory=True``): every tensor allocation and release, in order, summed, and the
    maximum taken. ``tracemalloc`` does not see tensor storage (allocated in C++), and RSS
    moves in pages the C allocator keeps or returns as it pleases, so neither measures this.
    Deterministic: one call is enough. Called after warm-up, so parameters, gradients and
    optimizer state already exist and are counted only as far as the step reallocates them.
    """
    from torch.profiler import ProfilerActivity, profile

    peak = 0
    # Twice, keeping the second: a tensor allocated before profiling starts (the previous step's
    # gradients) has an unknown size, so its release during the first profiled call is missed.
    for _ in range(2):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step()
        events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
        events.sort(key=lambda e: e.start_ns())
        live = peak = 0
        for e in events:
            live += e.nbytes()
            peak = max(peak, live)
    return peak


def mad(values: list[float]) -> float:
    """Scaled median absolute deviation (x 1.4826, comparable to a standard deviation)."""
    mid = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - mid) for v in values)


def without_direct_dispatch(describe: Callable[[Any], fl.Graph], plain: nn.Module) -> fl.Graph:
    """The graph built with direct dispatch off: every step through ``nn.Module.__call__``."""
    before = os.environ.get("FLODL_DIRECT_DISPATCH")
    os.environ["FLODL_DIRECT_DISPATCH"] = "0"
    try:
        return describe(plain)
    finally:
        if before is None:
            del os.environ["FLODL_DIRECT_DISPATCH"]
        else:
            os.environ["FLODL_DIRECT_DISPATCH"] = before


def check_exact(name: str, plain: nn.Module, graph: nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        want, got = plain(x), graph(x)
    if not torch.equal(want, got):
        raise AssertionError(f"{name}: the graph's output differs from the plain model's")


def measure(name: str, spec: Model, rounds: int, inner: int, warmup: int) -> list[dict[str, Any]]:
    rows = []
    for mode in ("train", "forward_b1"):
        torch.manual_seed(0)
        # Three fresh copies of one initialisation: plain, plain again (the A/A control that shows
        # the noise floor) and the graph, so every side's tensors are allocated alike.
        original = spec.plain()
        plain, again = copy.deepcopy(original), copy.deepcopy(original)
        graph = spec.graph(copy.deepcopy(original))
        ordinary = without_direct_dispatch(spec.graph, copy.deepcopy(original))
        del original
        x, y = spec.data(spec.batch if mode == "train" else 1)
        if mode == "forward_b1":  # inference: BatchNorm uses its running statistics
            for m in (plain, again, graph, ordinary):
                m.eval()
        check_exact(name, plain, graph, x)
        check_exact(name, plain, ordinary, x)
        sides = (("plain", plain), ("plain_again", again), ("flodl", graph), ("ordinary", ordinary))
        if mode == "train":
            cases = {key: train_step(m, spec, x, y) for key, m in sides}
        else:
            cases = {key: forward_only(m, x) for key, m in sides}
        results = interleaved(
            cases, rounds=rounds, inner=inner, warmup=warmup, clock=time.process_time
        )
        peaks = {key: peak_bytes(cases[key]) for key in ("plain", "flodl")}
        p, g = results["plain"], results["flodl"]
        row = {
            "model": name,
            "mode": mode,
            "batch": spec.batch if mode == "train" else 1,
            "plain_ms": p.median_s * 1e3,
            "flodl_ms": g.median_s * 1e3,
            "ratio": ratio(results, "flodl", "plain"),
            "a_a_ratio": ratio(results, "plain_again", "plain"),
            "direct_gain": ratio(results, "flodl", "ordinary"),
            "plain_mad": mad(p.rounds) / p.median_s,
            "flodl_mad": mad(g.rounds) / g.median_s,
            "plain_peak_kib": peaks["plain"] / 1024,
            "flodl_peak_kib": peaks["flodl"] / 1024,
            "mem_ratio": peaks["flodl"] / peaks["plain"] if peaks["plain"] else 1.0,
        }
        rows.append(row)
        print(
            f"{name:17s} {mode:10s} plain {row['plain_ms']:8.3f} ms  flodl {row['flodl_ms']:8.3f}"
            f" ms  ratio {row['ratio']:.3f}  (A/A {row['a_a_ratio']:.3f})  "
            f"mem {row['mem_ratio']:.3f}",
            flush=True,
        )
    return rows


def combine(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (model, mode): each figure's median over the runs; ``ratio_runs`` lists the
    runs' ratios in order."""
    rows = []
    for first, *others in zip(*runs, strict=True):
        same = [first, *others]
        row = {
            key: statistics.median(r[key] for r in same) if isinstance(value, float) else value
            for key, value in first.items()
        }
        row["ratio_runs"] = " / ".join(f"{r['ratio']:.3f}" for r in same)
        rows.append(row)
    return rows


def summary(rows: list[dict[str, Any]]) -> str:
    """Median and worst ratio per mode, the numbers the performance goals are stated in."""
    lines = []
    for mode in ("train", "forward_b1"):
        picked = [r for r in rows if r["mode"] == mode]
        if mode == "forward_b1":  # the goal counts the feedback loop in its fixed form
            picked = [r for r in picked if r["model"] != "feedback_adaptive"]
        if not picked:
            continue
        ratios = [r["ratio"] for r in picked]
        noise = [r["a_a_ratio"] for r in picked]
        gain = [r["direct_gain"] for r in picked]
        lines.append(
            f"{mode}: median ratio {statistics.median(ratios):.3f}, worst {max(ratios):.3f} "
            f"({len(picked)} models; A/A median {statistics.median(noise):.3f}, "
            f"worst {max(noise, key=lambda v: abs(v - 1)):.3f}; direct dispatch gain median "
            f"{statistics.median(gain):.3f})"
        )
    return "\n".join(lines)


def chosen_models(parser: Any, models: str) -> list[str]:
    """The comma-separated ``--models`` value as names of this suite; an unknown one is the
    parser's usage error."""
    names = models.split(",")
    unknown = [m for m in names if m not in MODEL_NAMES]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {MODEL_NAMES}")
    return names


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = timing_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--repeat", type=int, default=1, help="whole runs; rows report medians over them"
    )
    parser.add_argument(
        "--small", action="store_true", help="8-16x narrower layers: the dispatch-bound tier"
    )
    parser.add_argument("--models", default=",".join(MODEL_NAMES))
    args = timing_options(argv, parser)
    names = chosen_models(parser, args.models)
    torch.set_num_threads(1)
    models = suite(smoke=args.smoke, small=args.small)
    runs: list[list[dict[str, Any]]] = []
    for run in range(max(1, args.repeat)):
        if args.repeat > 1:
            print(f"-- run {run + 1} of {args.repeat}", flush=True)
        rows: list[dict[str, Any]] = []
        for name in names:
            rows += measure(name, models[name], args.rounds, args.inner, 1 if args.smoke else 2)
        runs.append(rows)
    rows = combine(runs) if len(runs) > 1 else runs[0]
    repeated = (
        f"Each figure is the median over {len(runs)} whole runs (ratio_runs: each run's ratio). "
        if len(runs) > 1
        else ""
    )
    notes = repeated + (
        f"flodl / plain nn.Module, same weights (outputs checked bit-exact first), median of "
        f"per-round medians over {args.rounds} interleaved rounds x {args.inner}; torch "
        f"{torch.__version__}, CPU, 1 thread, timed with the process CPU clock (other processes "
        "may share the cores). "
        + (
            "Small tier: layers 8-16x narrower than the CPU sizes (see the module docstring). "
            if args.small
            else "CPU-sized models (see the module docstring). "
        )
        + "train = forward + "
        "loss + zero_grad + backward + Adam + loss.item(); forward_b1 = forward only, batch 1, "
        "no_grad. a_a_ratio = a second copy of the plain model against the first: the noise "
        "floor. direct_gain = flodl / the same graph with direct dispatch off. *_mad = scaled "
        "MAD of the per-round medians / median. *_peak_kib = peak tensor "
        "bytes allocated during one step above those live before it (CPU allocator records).\n\n"
        + summary(rows)
    )
    if args.smoke:
        notes = "SMOKE RUN (toy sizes, 1 round): not a measurement."
    title = "FlowBuilder graph overhead vs plain PyTorch" + (" (small tier)" if args.small else "")
    stem = "graph_overhead_small" if args.small else "graph_overhead"
    path = write_report(title, rows, stem, notes, args.out)
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
