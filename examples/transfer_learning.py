"""Transfer learning: pre-train an encoder, load it into a different model, freeze it while the
new head learns, then fine-tune everything with a smaller learning rate for the encoder.

    python examples/transfer_learning.py [--out DIR]   # FLODL_SMOKE=1 for a quick check

- a labelled sub-graph (``.label("encoder")``) composed into two different models;
- ``subgraph("encoder").save_checkpoint`` / ``load_subgraph_checkpoint("encoder", ...)``, and
  the ``LoadReport`` saying what was loaded;
- a whole-model checkpoint loaded across architectures (``strict_hash=False``,
  ``strict_shapes=False``): the matching encoder loads, the new head is reported as a mismatch;
- ``freeze("encoder")`` / ``thaw("encoder")`` by label path;
- ``fl.optim.param_groups``: one learning rate per label path (progressive unfreezing).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

import flodl as fl

SMOKE = fl.smoke.smoke_enabled()
PRETRAIN, HEAD_ONLY, FINE_TUNE = (2, 2, 2) if SMOKE else (60, 30, 30)


def build_encoder() -> fl.Graph:
    return (
        fl.FlowBuilder(nn.Linear(8, 32))
        .through(nn.GELU())
        .also(nn.Linear(32, 32))
        .through(nn.LayerNorm(32))
        .label("encoder")
        .build()
    )


def with_head(outputs: int) -> fl.Graph:
    return fl.FlowBuilder(build_encoder()).through(nn.Linear(32, outputs)).build()


def fit(model: fl.Graph, optimizer, x, y, epochs: int, title: str) -> float:
    print(f"\n{title}")
    monitor = fl.Monitor(epochs)
    monitor.ends_smoke_runs = False  # this script has three phases: it limits its own epochs
    for epoch in range(epochs):
        began = time.perf_counter()
        for batch in torch.randperm(len(x)).split(64):
            loss = nn.functional.mse_loss(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            model.record_scalar("loss", loss)
        model.end_epoch()
        monitor.log(epoch, time.perf_counter() - began, model)
    monitor.finish()
    monitor.close()
    return model.trend("loss").last()


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("example-output/transfer_learning"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    fl.manual_seed(0)

    # 1. Pre-train on a task with plenty of data: 4 targets that share structure.
    mixing = torch.randn(8, 8)  # the structure both tasks share

    def features(inputs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(inputs @ mixing)

    x = torch.randn(1024, 8)
    source = features(x) @ torch.randn(8, 4)
    pretrained = with_head(4)
    fit(pretrained, torch.optim.Adam(pretrained.parameters(), lr=3e-3), x, source, PRETRAIN,
        "1. pre-training encoder + 4-output head")  # fmt: skip
    encoder_file = args.out / "encoder.fdl"
    pretrained.subgraph("encoder").save_checkpoint(encoder_file)
    whole_file = args.out / "pretrained.fdl"
    pretrained.save_checkpoint(whole_file)

    # 2. A new task, little data, a different head: load the encoder, train the head alone.
    x_small = torch.randn(128, 8)
    target = features(x_small) @ torch.randn(8, 1)
    model = with_head(1)
    report = model.load_subgraph_checkpoint("encoder", encoder_file)
    print(f"\nloaded {len(report.loaded)} encoder tensors: {', '.join(report.loaded[:2])}, ...")
    across = with_head(1).load_checkpoint(whole_file, strict_hash=False, strict_shapes=False)
    print(f"the whole pre-trained model into the new one: {len(across.loaded)} loaded, "
          f"head mismatches: {[m.name for m in across.mismatches]}")  # fmt: skip
    frozen = model.freeze("encoder")
    print(f"froze {frozen} encoder parameters")
    trainable = [p for p in model.parameters() if p.requires_grad]
    fit(model, torch.optim.Adam(trainable, lr=1e-2), x_small, target, HEAD_ONLY,
        "2. the new head alone (encoder frozen)")  # fmt: skip

    # 3. Fine-tune everything: the encoder 10x slower than the head.
    model.thaw("encoder")
    groups = fl.optim.param_groups(model, {"encoder": 1e-4})  # the rest: the default lr
    final = fit(model, torch.optim.Adam(groups, lr=1e-3), x_small, target, FINE_TUNE,
                "3. fine-tuning everything (encoder lr 1e-4, head 1e-3)")  # fmt: skip
    print(f"\nfinal loss on the new task: {final:.4f}")
    return final


if __name__ == "__main__":
    main()
