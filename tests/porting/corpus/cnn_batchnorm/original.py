"""A small CNN with BatchNorm on synthetic 16x16 images (plain PyTorch)."""

import torch
from torch import nn


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


torch.manual_seed(0)
images, labels = torch.randn(64, 1, 16, 16), torch.randint(0, 10, (64,))
model = ConvNet()
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
