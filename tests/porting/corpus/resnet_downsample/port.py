"""flodl port of original.py: the block is `also_with(downsample, main)` in a labelled graph."""

import torch
from torch import nn

import flodl as fl


def basic_block(cin, cout, stride):
    main = nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
    )
    downsample = nn.Sequential(
        nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
    )
    return fl.FlowBuilder().also_with(downsample, main).through(torch.relu).label("block").build()


class GlobalMean(nn.Module):
    def forward(self, x):
        return x.mean(dim=(2, 3))


def build_model() -> fl.Graph:
    return (
        fl.FlowBuilder(nn.Conv2d(3, 8, 3, padding=1))
        .through(basic_block(8, 16, stride=2))
        .through(GlobalMean())
        .through(nn.Linear(16, 5))
        .build()
    )


fl.manual_seed(0)
model = build_model()
x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 5, (8,))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(3):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
