"""A ResNet basic block with a strided downsample projection (plain PyTorch)."""

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.downsample = nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
        )

    def forward(self, x):
        return torch.relu(self.main(x) + self.downsample(x))


class ResNetTiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.block = BasicBlock(8, 16, stride=2)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        x = self.block(self.stem(x))
        return self.head(x.mean(dim=(2, 3)))


torch.manual_seed(0)
model = ResNetTiny()
x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 5, (8,))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(3):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
