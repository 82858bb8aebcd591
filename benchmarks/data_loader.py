"""Epoch iteration throughput: flodl DataLoader vs torch.utils.data.DataLoader (same run, interleaved).

Same in-memory dataset (``x`` float32 [N, 32], ``y`` int64 [N]), same batch size, shuffled, CPU.
Every case iterates one full epoch and touches each batch. Baseline: torch's DataLoader with
``num_workers=0`` (the default most scripts use). Also shown: torch with 2 persistent workers and
torch with a batch sampler (one ``TensorDataset[list]`` gather per batch, the fastest plain-torch
idiom), so the comparison is not only against the slow default. Last, the same samples from a
map-style dataset written in Python, through torch (num_workers=0) and through flodl's default
for such datasets (streamed, fetched in the loop's thread).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from harness import interleaved, ratio, write_report
from torch.utils.data import BatchSampler, Dataset, RandomSampler, TensorDataset
from torch.utils.data import DataLoader as TorchLoader

import flodl as fl

BASELINE = "torch num_workers=0"


def drain(iterable) -> None:
    for batch in iterable:
        batch[0].shape  # noqa: B018  (touch the batch as a training loop would)


class PythonSamples(Dataset):
    """A map-style dataset whose samples come from Python code (as a torchvision pipeline's do):
    flodl streams it in auto mode, fetched in the loop's thread, as torch's num_workers=0 does."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def cases(n: int, batch_size: int) -> dict[str, object]:
    x, y = torch.randn(n, 32), torch.randint(0, 10, (n,))
    ds = TensorDataset(x, y)
    samples = PythonSamples(x, y)
    python = fl.data.DataLoader.from_dataset(samples).batch_size(batch_size).build()
    torch_python = TorchLoader(samples, batch_size=batch_size, shuffle=True, drop_last=True)
    resident = fl.data.DataLoader.from_tensors(x=x, y=y).batch_size(batch_size).build()
    streaming = fl.data.DataLoader.from_tensors(x=x, y=y).batch_size(batch_size).streaming().build()
    torch0 = TorchLoader(ds, batch_size=batch_size, shuffle=True, drop_last=True)
    torch2 = TorchLoader(
        ds,
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=2,
        persistent_workers=True,
    )
    batched = TorchLoader(
        ds, sampler=BatchSampler(RandomSampler(ds), batch_size, drop_last=True), batch_size=None
    )
    epochs = {"resident": 0, "streaming": 0, "python": 0}

    def flodl_epoch(loader, key):
        def run() -> None:
            drain(loader.epoch(epochs[key]))
            epochs[key] += 1

        return run

    return {
        BASELINE: lambda: drain(torch0),
        "torch num_workers=2": lambda: drain(torch2),
        "torch batch sampler": lambda: drain(batched),
        "flodl resident": flodl_epoch(resident, "resident"),
        "flodl streaming": flodl_epoch(streaming, "streaming"),
        "torch num_workers=0, Python dataset": lambda: drain(torch_python),
        "flodl, Python dataset (auto: in the loop's thread)": flodl_epoch(python, "python"),
    }


def main(n: int = 20_000, batch_size: int = 64, rounds: int = 7) -> list[dict[str, object]]:
    torch.set_num_threads(1)
    results = interleaved(cases(n, batch_size), rounds=rounds, inner=1, warmup=1)
    batches = n // batch_size
    rows = [
        {
            "loader": name,
            "epoch_ms": m.median_s * 1e3,
            "batches_per_s": batches / m.median_s,
            "speedup_vs_torch_nw0": 1 / ratio(results, name, BASELINE),
        }
        for name, m in results.items()
    ]
    path = write_report(
        "DataLoader epoch throughput (CPU, in-memory)",
        rows,
        "data_loader",
        f"{n} samples (x float32[32], y int64), batch {batch_size}, shuffled, drop_last; median of"
        f" per-round medians over {rounds} interleaved rounds; baseline `{BASELINE}`",
    )
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main()
