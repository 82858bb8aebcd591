"""flodl port of original.py: the conv stack and head as one FlowBuilder chain."""

import torch
from torch import nn

import flodl as fl

fl.manual_seed(0)
images, labels = torch.randn(64, 1, 16, 16), torch.randint(0, 10, (64,))
model = (
    fl.FlowBuilder(nn.Conv2d(1, 8, 3, padding=1))
    .through(nn.BatchNorm2d(8))
    .through(nn.ReLU())
    .through(nn.MaxPool2d(2))
    .through(nn.Conv2d(8, 16, 3, padding=1))
    .through(nn.BatchNorm2d(16))
    .through(nn.ReLU())
    .through(nn.AdaptiveAvgPool2d(1))
    .through(nn.Flatten(1))
    .through(nn.Linear(16, 10))
    .build()
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for _ in range(2):
    for i in range(0, 64, 16):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(images[i : i + 16]), labels[i : i + 16])
        loss.backward()
        optimizer.step()
model.eval()
with torch.no_grad():
    print((model(images).argmax(1) == labels).float().mean().item())
