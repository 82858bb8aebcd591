"""flodl port of original.py: no process group, sampler, DDP wrapper or Trainer class. fl.Trainer
runs the same script on one CPU, every local GPU, or under torchrun; `checkpoint_every` writes
the snapshots (`snapshots/checkpoint-<epochs done>.fdl`) and a restart resumes from the latest.

`python port.py 10 2` (or under torchrun, unchanged).
"""

import argparse
import re
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import flodl as fl

SNAPSHOTS = Path("snapshots")


def build_model() -> fl.Graph:
    return fl.FlowBuilder(nn.Linear(20, 1)).build()


def latest_snapshot() -> tuple[Path | None, int]:
    """(the newest snapshot, the epochs it had run), or (None, 0)."""
    found = [
        (int(m.group(1)), p)
        for p in SNAPSHOTS.glob("checkpoint-*.fdl")
        if (m := re.fullmatch(r"checkpoint-(\d+)\.fdl", p.name))
    ]
    if not found:
        return None, 0
    epochs, path = max(found)
    return path, epochs


def make_model(device):
    model = build_model()
    path, epochs = latest_snapshot()
    if path is not None:
        model.load_checkpoint(path)
        print(f"Resuming training from snapshot at epoch {epochs}")
    return model


def train_step(model, batch):
    source, targets = batch
    return F.mse_loss(model(source), targets)


def main(save_every, total_epochs, batch_size):
    fl.manual_seed(0)
    dataset = torch.utils.data.TensorDataset(torch.rand(256, 20), torch.rand(256, 1))
    _, done = latest_snapshot()
    if done >= total_epochs:
        print(f"already trained {done} epochs")
        return
    handle = (
        fl.Trainer.builder(make_model, lambda params: torch.optim.SGD(params, lr=1e-3), train_step)
        .dataset(dataset)
        .batch_size(batch_size)
        .num_epochs(total_epochs - done)
        .checkpoint_every(save_every, directory=str(SNAPSHOTS))
        .run()
    )
    handle.join()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int, help="Total epochs to train the model")
    parser.add_argument("save_every", type=int, help="How often to save a snapshot")
    parser.add_argument(
        "--batch_size", default=32, type=int, help="Input batch size on each device"
    )
    args = parser.parse_args()
    main(args.save_every, args.total_epochs, args.batch_size)
