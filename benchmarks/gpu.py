"""FlowBuilder graphs vs the same models written by hand, on a CUDA GPU at the Rust flodl's sizes.

The models and their graph descriptions are ``graph_overhead.py``'s (same weights, outputs
compared first); the sizes are those of the Rust flodl's benchmark suite (batch 32-256, 64x64
images, sequences of 50, a 4-layer 512-wide transformer), where the GPU does most of the work
and a framework can only win on the time between kernels. One case is one epoch of
``--batches`` training steps (forward, loss, zero_grad, backward, Adam step), timed with the
wall clock after ``torch.cuda.synchronize()``, in interleaved rounds (medians), with a second
copy of the hand-written model as the A/A noise floor. ``peak_mib`` columns: the most memory
allocated during one epoch (``torch.cuda.max_memory_allocated``) above what was allocated
before it. ``rust_delta`` is the Rust flodl's published result against PyTorch (v0.3.0 table:
negative = faster), for comparison with ``ratio - 1``.

Usage: ``python benchmarks/gpu.py [--rounds N] [--batches N] [--models a,b] [--out DIR]``.
A fourth side, ``captured``, is the flodl graph's step captured once with
``fl.cuda_graph_capture`` and replayed (not the adaptive loop: its halt is read on the host).
Without a CUDA device it measures nothing and exits with status 2. ``--smoke`` runs every model
at toy sizes for one round on whatever device there is (the CPU here), to check that the script
still works; its report says it is not a measurement.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import graph_overhead as go
from harness import interleaved, write_report

import flodl as fl

# The Rust flodl's published delta against PyTorch per model (its v0.3.0 benchmark table).
RUST_DELTA = {
    "transformer": -0.31,
    "mlp": -0.29,
    "residual_tower": -0.24,
    "feedback_fixed": -0.16,
    "gated_routing": -0.12,
    "iterative_refine": -0.11,
    "gru_seq": -0.04,
    "conv_autoencoder": -0.01,
    "lstm_seq": 0.0,
    "convnet": 0.0,
}


def original_suite(smoke: bool = False) -> dict[str, go.Model]:
    """The 11 benchmarks at the Rust suite's sizes (``smoke``: graph_overhead's toy sizes)."""
    if smoke:
        return go.suite(smoke=True)
    d512, d1024 = 512, 1024
    return {
        "mlp": go.Model(lambda: go.PlainMLP(d1024), go.graph_mlp, go.dense(d1024), 256),
        "convnet": go.Model(
            lambda: go.PlainConvNet(64, 100), go.graph_convnet, go.images(64, 100), 128
        ),
        "conv_autoencoder": go.Model(
            lambda: go.PlainConvAutoencoder(64),
            go.graph_conv_autoencoder,
            go.images(64, None),
            64,
        ),
        "gru_seq": go.Model(
            lambda: go.PlainGRUSeq(256, 512), go.graph_gru_seq, go.sequences(50, 256), 128
        ),
        "lstm_seq": go.Model(
            lambda: go.PlainLSTMSeq(256, 512), go.graph_lstm_seq, go.sequences(50, 256), 128
        ),
        "transformer": go.Model(
            lambda: go.PlainTransformer(8192, 512, 8, 2048, 4, 128),
            go.graph_transformer,
            go.tokens(8192, 128),
            32,
            loss=go.token_loss,
            lr=1e-4,
        ),
        "residual_tower": go.Model(
            lambda: go.PlainResidualTower(d1024), go.graph_residual_tower, go.dense(d1024), 256
        ),
        "gated_routing": go.Model(
            lambda: go.PlainGatedRouting(d512), go.graph_gated_routing, go.dense(d512), 256
        ),
        "iterative_refine": go.Model(
            lambda: go.PlainIterative(d1024, 8), go.graph_iterative, go.dense(d1024), 256
        ),
        "feedback_fixed": go.Model(
            lambda: go.PlainIterative(d512, 10), go.graph_iterative, go.dense(d512), 128
        ),
        "feedback_adaptive": go.Model(
            lambda: go.PlainAdaptive(d512, 10), go.graph_adaptive, go.dense(d512), 128
        ),
    }


def synchronized_clock(device: torch.device) -> Callable[[], float]:
    """Wall time read after the device finished its queued work (CUDA runs asynchronously)."""
    if device.type != "cuda":
        return time.perf_counter

    def clock() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()

    return clock


def epoch(model: nn.Module, spec: go.Model, batches: list[tuple[Any, Any]]) -> Callable[[], None]:
    """One epoch of training steps over ``batches``; the loss is read once, at the end."""
    opt = torch.optim.Adam(model.parameters(), lr=spec.lr)

    def run() -> None:
        loss = None
        for x, y in batches:
            loss = spec.loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        assert loss is not None
        loss.item()

    return run


# A halting loop reads its verdict on the host: a CUDA graph cannot replay that decision.
NOT_CAPTURABLE = {"feedback_adaptive"}


def captured_epoch(
    model: nn.Module, spec: go.Model, batches: list[tuple[Any, Any]]
) -> Callable[[], None]:
    """The same epoch with the training step captured once by ``fl.cuda_graph_capture`` and
    replayed per batch (its Adam keeps its step count on the GPU: ``capturable=True``)."""
    opt = torch.optim.Adam(model.parameters(), lr=spec.lr, capturable=True)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = spec.loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    x0, y0 = batches[0]
    captured = fl.cuda_graph_capture(step, x0.clone(), y0.clone(), warmup=3, optimizers=[opt])

    def run() -> None:
        loss = None
        for x, y in batches:
            loss = captured(x, y)
        assert loss is not None
        loss.item()

    return run


def peak_mib(run: Callable[[], None], device: torch.device) -> float:
    """MiB allocated at the peak of one ``run()`` above what was allocated before it (CUDA)."""
    if device.type != "cuda":
        return float("nan")
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    run()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


def measure(
    name: str, spec: go.Model, device: torch.device, rounds: int, steps: int, capture: bool
) -> dict[str, Any]:
    torch.manual_seed(0)
    original = spec.plain()
    plain, again = copy.deepcopy(original).to(device), copy.deepcopy(original).to(device)
    graph = spec.graph(copy.deepcopy(original)).to(device)
    del original
    # A few distinct batches, cycled: the data is generated once, outside the timing.
    distinct = [spec.data(spec.batch) for _ in range(min(steps, 4))]
    batches = [(x.to(device), y.to(device)) for x, y in distinct]
    batches = [batches[i % len(batches)] for i in range(steps)]
    with torch.no_grad():
        x = batches[0][0]
        difference = (plain(x).float() - graph(x).float()).abs().max().item()
    sides = {"plain": plain, "plain_again": again, "flodl": graph}
    cases = {key: epoch(model, spec, batches) for key, model in sides.items()}
    if capture and name not in NOT_CAPTURABLE:
        twin = spec.graph(copy.deepcopy(plain)).to(device)
        cases["flodl_captured"] = captured_epoch(twin, spec, batches)
    for run in cases.values():  # warm-up: kernels chosen, allocator caches and Adam state made
        run()
    peaks = {key: peak_mib(run, device) for key, run in cases.items()}
    timed = interleaved(cases, rounds=rounds, inner=1, warmup=0, clock=synchronized_clock(device))
    base = timed["plain"].median_s
    captured = timed["flodl_captured"].median_s if "flodl_captured" in timed else float("nan")
    return {
        "model": name,
        "batch": spec.batch,
        "steps": steps,
        "plain_ms": base * 1e3,
        "flodl_ms": timed["flodl"].median_s * 1e3,
        "ratio": timed["flodl"].median_s / base,
        "a_a_ratio": timed["plain_again"].median_s / base,
        "captured_ms": captured * 1e3,
        "captured_ratio": captured / base,
        "plain_mad": go.mad(timed["plain"].rounds) / base,
        "flodl_mad": go.mad(timed["flodl"].rounds) / timed["flodl"].median_s,
        "rust_delta": RUST_DELTA.get(name, float("nan")),
        "plain_peak_mib": peaks["plain"],
        "flodl_peak_mib": peaks["flodl"],
        "max_abs_diff": difference,
    }


def summary(rows: list[dict[str, Any]]) -> str:
    ratios = [r["ratio"] for r in rows]
    if not ratios:
        return ""
    ahead = [
        r["model"] for r in rows if r["model"] in RUST_DELTA and r["ratio"] - 1 <= r["rust_delta"]
    ]
    captured = [r["captured_ratio"] for r in rows if r["captured_ratio"] == r["captured_ratio"]]
    captured_ahead = [
        r["model"]
        for r in rows
        if r["model"] in RUST_DELTA and r["captured_ratio"] - 1 <= r["rust_delta"]
    ]
    return (
        f"epoch ratio flodl / plain: median {statistics.median(ratios):.3f}, worst "
        f"{max(ratios):.3f} ({len(rows)} models; A/A median "
        f"{statistics.median(r['a_a_ratio'] for r in rows):.3f}). At or ahead of the Rust "
        f"flodl's published delta: {len(ahead)} of {sum(r['model'] in RUST_DELTA for r in rows)}"
        f"{' (' + ', '.join(ahead) + ')' if ahead else ''}."
        + (
            f" Captured with fl.cuda_graph_capture: median {statistics.median(captured):.3f}, "
            f"worst {max(captured):.3f} ({len(captured)} models; ahead of the Rust delta: "
            f"{len(captured_ahead)} of {sum(r['model'] in RUST_DELTA for r in rows)})."
            if captured
            else ""
        )
    )


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batches", type=int, default=50, help="training steps per epoch")
    parser.add_argument("--smoke", action="store_true", help="toy sizes, 1 round, any device")
    parser.add_argument("--models", default=",".join(go.MODEL_NAMES))
    parser.add_argument(
        "--no-capture", action="store_true", help="skip the fl.cuda_graph_capture side"
    )
    parser.add_argument("--out", type=Path, help="report directory (default: results/)")
    args = parser.parse_args(argv if argv is not None else [])
    names = args.models.split(",")
    unknown = [m for m in names if m not in go.MODEL_NAMES]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {go.MODEL_NAMES}")
    if args.smoke:
        args.rounds, args.batches = 1, 2
        args.out = args.out or Path(__file__).resolve().parent / "results" / "smoke"
    elif not torch.cuda.is_available():
        print("benchmarks/gpu.py: no CUDA device here, nothing measured", file=sys.stderr)
        raise SystemExit(2)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    models = original_suite(smoke=args.smoke)
    rows = []
    for n in names:  # a line per model as it ends: a run cut short still shows what it measured
        capture = device.type == "cuda" and not args.no_capture
        rows.append(measure(n, models[n], device, args.rounds, args.batches, capture))
        r = rows[-1]
        print(
            f"{n}: ratio {r['ratio']:.3f} (A/A {r['a_a_ratio']:.3f}), plain {r['plain_ms']:.1f} ms,"
            f" flodl {r['flodl_ms']:.1f} ms, captured {r['captured_ratio']:.3f},"
            f" max_abs_diff {r['max_abs_diff']:.3g}",
            file=sys.stderr,
            flush=True,
        )
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    notes = (
        f"{gpu}, torch {torch.__version__}: one epoch of {args.batches} training steps per case, "
        f"median over {args.rounds} interleaved rounds, synchronized wall clock. ratio = flodl / "
        "hand-written (< 1: flodl faster); a_a_ratio = a second copy of the hand-written model: "
        "the noise floor; captured_* = the flodl graph's training step captured once with "
        "fl.cuda_graph_capture and replayed (Adam with capturable=True; the hand-written "
        "model captured the same way would gain the same: it is what one call gives); *_mad = scaled MAD of the rounds / median; rust_delta = the Rust flodl's published delta vs PyTorch; peak_mib = "
        "most memory allocated during one epoch above the memory before it; max_abs_diff = "
        "largest difference of the two models' outputs on the first batch.\n\n" + summary(rows)
    )
    if args.smoke:
        notes = "SMOKE RUN (toy sizes, 1 round): not a measurement."
    path = write_report(
        "flodl vs PyTorch on a GPU (Rust flodl sizes)", rows, "gpu", notes, args.out
    )
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
