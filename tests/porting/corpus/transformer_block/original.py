"""A pre-norm transformer encoder block with a learned positional embedding (the shape of
minGPT/ViT-style models), classifying token sequences."""

import argparse

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h)[0]
        return x + self.mlp(self.ln2(x))


class Classifier(nn.Module):
    def __init__(self, features=16, d=32, max_len=64, classes=3):
        super().__init__()
        self.embed = nn.Linear(features, d)
        self.pos = nn.Parameter(torch.randn(1, max_len, d) * 0.02)
        self.block = Block(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.embed(x)
        x = x + self.pos[:, : x.size(1)]
        x = self.block(x)
        return self.head(x.mean(dim=1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    x, y = torch.randn(64, 20, 16), torch.randint(0, 3, (64,))
    model = Classifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        for i in range(0, 64, 16):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x[i : i + 16]), y[i : i + 16])
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
