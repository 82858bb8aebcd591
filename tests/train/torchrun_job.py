"""A training script as a user writes it, run by the multi-node and restart tests under ``torchrun``.

    torchrun ... tests/train/torchrun_job.py --mode builder|graph --out DIR [--kill-epoch E]
                                             [--kill-node]

Every rank writes ``DIR/rank<R>-attempt<A>.json``: what it trained (loss per epoch, final loss on the
whole dataset, the parameters) and which attempt it was. ``--kill-epoch E`` makes rank 1 of the first
attempt die hard (``os._exit``) in the middle of epoch E, once (a marker file in DIR records it), so
``torchrun --max-restarts 1`` restarts the job; the script has no resume code of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

import torch
from torch import nn

import flodl as fl

SAMPLES, FEATURES, BATCH = 512, 8, 16


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.linspace(-2, 2, FEATURES).unsqueeze(1)
    return x, torch.tanh(x @ w / 4) + 0.01 * torch.randn(SAMPLES, 1, generator=g)


def make_model(device) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)


def make_optimizer(params) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=5e-3)


ARGS: dict[str, str] = {}  # the kill settings, for the train step (set by main, read per rank)


def maybe_die(epoch: int) -> None:
    """Rank 1 of the first attempt exits hard halfway through ``--kill-epoch``, once. With
    ``--kill-node`` the rank on the node whose torchrun has ``DOOMED_NODE=1`` in its environment
    dies instead (whichever rank the rendezvous gave it), and takes its torchrun agent with it:
    an elastic job (``--nnodes 1:2``) goes on with the nodes left, at a smaller world."""
    kill = ARGS.get("kill_epoch")
    if kill is None or epoch != int(kill):
        return
    if ARGS.get("kill_node"):
        if os.environ.get("DOOMED_NODE") != "1":
            return
    elif os.environ.get("RANK") != "1":
        return
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    marker = Path(ARGS["out"]) / "killed"
    if marker.exists():
        return
    ARGS["batches_in_kill_epoch"] = str(int(ARGS.get("batches_in_kill_epoch", "0")) + 1)
    if int(ARGS["batches_in_kill_epoch"]) >= 4:  # mid-epoch: some batches of it are done
        marker.write_text(f"rank {os.environ.get('RANK')} died in epoch {epoch}\n")
        if ARGS.get("kill_node"):  # the agent first, so nothing on that node restarts it
            os.kill(os.getppid(), signal.SIGKILL)
        os._exit(17)


def train_step(model: nn.Module, batch: fl.data.Batch) -> torch.Tensor:
    maybe_die(fl.train.current().epoch)
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


def full_loss(model: nn.Module) -> float:
    x, y = make_data()
    model.eval()
    with torch.no_grad():
        return nn.functional.mse_loss(model(x.to(next(model.parameters()).device)), y).item()


def run_builder(args: argparse.Namespace) -> dict:
    builder = (
        fl.Trainer.builder(make_model, make_optimizer, train_step)
        .dataset(make_data)
        .batch_size(BATCH)
        .num_epochs(args.epochs)
        .policy(fl.ApplyPolicy.CADENCE)
        .threads_per_rank(1)
        .timeout(30)
    )
    if args.checkpoints:
        builder.checkpoint_every(1, directory=args.checkpoints)
    handle = builder.run()
    state = handle.join()
    model = state.load_into(make_model("cpu"))
    return {
        "epochs": [m.epoch for m in handle.history],
        "losses": [m.avg_loss for m in handle.history],
        "final_loss": full_loss(model),
        "params": [p.flatten().tolist() for p in state.params],
    }


def run_graph(args: argparse.Namespace) -> dict:
    torch.manual_seed(int(os.environ.get("RANK", "0")))  # differs per rank: setup must fix it
    model = (
        fl.FlowBuilder(nn.Linear(FEATURES, 16)).through(nn.Tanh()).through(nn.Linear(16, 1)).build()
    )
    fl.Trainer.setup(model, None, make_optimizer)
    x, y = make_data()
    ids = torch.arange(SAMPLES)  # which samples each rank trained on, epoch by epoch
    model.set_data_loader(fl.data.DataLoader.from_tensors(x, y, ids).batch_size(BATCH))
    checkpoints = {"checkpoint_every": 1, "directory": args.checkpoints} if args.checkpoints else {}
    trained, first_steps, seen = [], [], []
    for epoch in model.epochs(args.epochs, **checkpoints):  # after a restart: from the checkpoint
        first_steps.append(model.training_step)
        seen.append([])
        for inputs, targets, batch_ids in model.epoch(epoch):
            maybe_die(epoch)
            nn.functional.mse_loss(model(inputs), targets).backward()
            model.step()
            seen[-1].extend(batch_ids.tolist())
        trained.append(epoch)
    model.finish()
    return {
        "epochs": trained,
        "first_steps": first_steps,
        "seen": seen,
        "steps": model.training_step,
        "final_loss": full_loss(model),
        "params": [p.detach().flatten().tolist() for p in model.parameters()],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["builder", "graph"], required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--checkpoints", default=None)
    parser.add_argument("--kill-epoch", type=int, default=None)
    parser.add_argument("--kill-node", action="store_true")
    args = parser.parse_args()
    ARGS["out"] = args.out
    if args.kill_epoch is not None:
        ARGS["kill_epoch"] = str(args.kill_epoch)
    if args.kill_node:
        ARGS["kill_node"] = "1"
    torch.set_num_threads(1)
    result = run_builder(args) if args.mode == "builder" else run_graph(args)
    rank = os.environ.get("RANK", "0")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    result.update(
        rank=int(rank),
        attempt=int(attempt),
        world=int(os.environ.get("WORLD_SIZE", "1")),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
    )
    Path(args.out, f"rank{rank}-attempt{attempt}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
