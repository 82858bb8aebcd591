"""flodl port of original.py: the layers and their per-layer orthogonal initialisation happen
before the chain (same order, same weights); `torch.save(model)` still works (the graph pickles)
and the .fdl checkpoint is saved beside it."""

import argparse
import time

import torch
import torch.nn.init as init
from torch import nn

import flodl as fl


def build_model(upscale_factor) -> fl.Graph:
    conv1 = nn.Conv2d(1, 16, (5, 5), (1, 1), (2, 2))
    conv2 = nn.Conv2d(16, 16, (3, 3), (1, 1), (1, 1))
    conv3 = nn.Conv2d(16, upscale_factor**2, (3, 3), (1, 1), (1, 1))
    init.orthogonal_(conv1.weight, init.calculate_gain("relu"))
    init.orthogonal_(conv2.weight, init.calculate_gain("relu"))
    init.orthogonal_(conv3.weight)
    return (
        fl.FlowBuilder(conv1)
        .through(nn.ReLU())
        .through(conv2)
        .through(nn.ReLU())
        .through(conv3)
        .through(nn.PixelShuffle(upscale_factor))
        .build()
    )


def main():
    parser = argparse.ArgumentParser(description="super-resolution (flodl)")
    parser.add_argument("--upscale_factor", type=int, required=True)
    parser.add_argument("--nEpochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    fl.manual_seed(123)
    high = torch.rand(16, 1, 8 * args.upscale_factor, 8 * args.upscale_factor)
    low = nn.functional.avg_pool2d(high, args.upscale_factor)
    model = build_model(args.upscale_factor)
    optimizer = fl.optim.Adam(model.parameters(), lr=args.lr)
    monitor = fl.Monitor(args.nEpochs, stream=None, gpu=False)
    for epoch in range(args.nEpochs):
        start = time.perf_counter()
        for i in range(0, 16, 4):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(low[i : i + 4]), high[i : i + 4])
            loss.backward()
            optimizer.step()
        monitor.log(epoch, time.perf_counter() - start, {"loss": loss.item()})
    monitor.finish()
    torch.save(model, f"model_epoch_{args.nEpochs}.pth")
    model.save_checkpoint(f"model_epoch_{args.nEpochs}.fdl")


if __name__ == "__main__":
    main()
