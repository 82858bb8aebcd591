"""How long a checkpoint of a 100M-parameter model stops training: blocking vs background saves.

Cases, measured in the training thread (wall clock, one intra-op thread), interleaved:

* ``blocking save``: ``fl.save_checkpoint(path, ...)`` — training waits for the whole write
  (encode, checksums, fsync, rename).
* ``background save``: ``fl.save_checkpoint(path, ..., background=True)`` — training waits for
  the CPU snapshot only; the write runs on the checkpoint thread (flushed, untimed, before the
  next case).
* ``snapshot copy`` and ``snapshot copy (A/A)``: ``ModelSnapshot.from_tensors`` alone, twice, the
  floor a background save cannot go below and the noise between two identical cases.
* ``steps idle`` / ``steps while writing``: a fixed amount of training work (a small MLP, 20
  steps) with no save in flight, and right after a background save returned, while the file is
  being written: what the writer thread costs training meanwhile.

Usage: ``python benchmarks/checkpoint_background.py [--smoke] [--out DIR]``; ``--smoke`` (a 1M
parameter model, one round) only checks that the script still works (the test suite runs it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import write_report

import flodl as fl
from flodl.checkpoint import ModelSnapshot


def model_of(params: int) -> nn.Module:
    width = 1000
    layers = max(1, params // (width * width + width))
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])


def training_work() -> None:
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(64, 256)
    for _ in range(20):
        loss = net(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def main(
    params: int = 100_000_000, rounds: int = 5, out: Path | None = None
) -> list[dict[str, object]]:
    torch.set_num_threads(1)
    model = model_of(params)
    named = list(model.named_parameters())
    count = sum(p.numel() for p in model.parameters())
    times: dict[str, list[float]] = {
        name: []
        for name in (
            "blocking save",
            "background save",
            "snapshot copy",
            "snapshot copy (A/A)",
            "steps idle",
            "steps while writing",
        )
    }
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parent) as tmp:
        d = Path(tmp)

        def blocking() -> float:
            start = time.perf_counter()
            fl.save_checkpoint(d / "blocking.fdl", named)
            return time.perf_counter() - start

        def background() -> float:
            start = time.perf_counter()
            fl.save_checkpoint(d / "background.fdl", named, background=True)
            stall = time.perf_counter() - start
            fl.checkpoint.flush()
            return stall

        def snapshot() -> float:
            return ModelSnapshot.from_tensors(named).seconds

        def idle_steps() -> float:
            start = time.perf_counter()
            training_work()
            return time.perf_counter() - start

        def steps_while_writing() -> float:
            fl.save_checkpoint(d / "concurrent.fdl", named, background=True)
            start = time.perf_counter()
            training_work()
            elapsed = time.perf_counter() - start
            fl.checkpoint.flush()
            return elapsed

        cases = {
            "blocking save": blocking,
            "background save": background,
            "snapshot copy": snapshot,
            "snapshot copy (A/A)": snapshot,
            "steps idle": idle_steps,
            "steps while writing": steps_while_writing,
        }
        names = list(cases)
        for name in names:  # warm-up: page cache, allocator
            cases[name]()
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                times[name].append(cases[name]())

    med = {name: statistics.median(values) for name, values in times.items()}
    baselines = {
        "blocking save": "blocking save",
        "background save": "blocking save",
        "snapshot copy": "background save",
        "snapshot copy (A/A)": "snapshot copy",
        "steps idle": "steps idle",
        "steps while writing": "steps idle",
    }
    rows: list[dict[str, object]] = [
        {
            "case": name,
            "median_ms": med[name] * 1e3,
            "ratio": med[name] / med[base],
            "vs": base,
        }
        for name, base in baselines.items()
    ]
    mb = count * 4 / 1e6
    path = write_report(
        "background checkpoint: training stall",
        rows,
        "checkpoint_background",
        f"{count / 1e6:.1f}M float32 parameters ({mb:.0f} MB); wall-clock medians over {rounds} "
        "interleaved rounds in the training thread, one intra-op thread. `background save` is "
        "the time until the call returns (the snapshot copy plus queueing); `steps while "
        "writing` is 20 small training steps run while the checkpoint thread writes the file.",
        results_dir=out,
    )
    print(path.read_text())
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="1M parameters, 1 round: checks the script works"
    )
    parser.add_argument("--out", type=Path, help="report directory (default: results/)")
    args = parser.parse_args()
    if args.smoke:
        main(params=1_000_000, rounds=1, out=args.out)
    else:
        main(out=args.out)
