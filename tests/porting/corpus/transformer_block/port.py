"""flodl port of original.py: the positional embedding is `fl.nn.Param(..., slice_dim=1)`,
self-attention takes its keys and values by ref (`using(key="h", value="h")`) and
`fl.nn.Select(0)` keeps the attention output; both residuals are `also`."""

import argparse
import time

import torch
from torch import nn

import flodl as fl


class MeanOverTime(nn.Module):
    def forward(self, x):
        return x.mean(dim=1)


def build_model(features=16, d=32, max_len=64, classes=3, heads=4) -> fl.Graph:
    # created in the original's order: embed, pos, ln1, attn, ln2, mlp, head
    embed = nn.Linear(features, d)
    pos = fl.nn.Param((1, max_len, d), init=torch.randn(1, max_len, d) * 0.02, slice_dim=1)
    ln1 = nn.LayerNorm(d)
    attn = nn.MultiheadAttention(d, heads, batch_first=True)
    ln2 = nn.LayerNorm(d)
    mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
    head = nn.Linear(d, classes)
    attention = (
        fl.FlowBuilder(ln1)
        .tag("h")
        .through(attn)
        .using(key="h", value="h")  # attn(h, key=h, value=h)
        .through(fl.nn.Select(0))  # (output, weights) -> output
        .label("attention")
        .build()
    )
    feed_forward = fl.FlowBuilder(ln2).through(mlp).label("feed_forward").build()
    return (
        fl.FlowBuilder(embed)
        .through(pos)
        .tag("pos")
        .also(attention)
        .also(feed_forward)
        .through(MeanOverTime())
        .through(head)
        .build()
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    fl.manual_seed(0)
    x, y = torch.randn(64, 20, 16), torch.randint(0, 3, (64,))
    model = build_model()
    optimizer = fl.optim.AdamW(model.parameters(), lr=1e-3)
    monitor = fl.Monitor(args.epochs, stream=None, gpu=False)
    for epoch in range(args.epochs):
        start = time.perf_counter()
        for i in range(0, 64, 16):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x[i : i + 16]), y[i : i + 16])
            loss.backward()
            optimizer.step()
        monitor.log(epoch, time.perf_counter() - start, {"loss": loss.item()})
    monitor.finish()


if __name__ == "__main__":
    main()
