"""A sequence classifier over an nn.LSTM (the shape of the MNIST-rows LSTM examples)."""

import argparse

import torch
from torch import nn


class LSTMClassifier(nn.Module):
    def __init__(self, input_size=8, hidden=32, classes=4):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.lstm(x)  # out: (batch, time, hidden)
        return self.head(out[:, -1, :])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    x, y = torch.randn(64, 12, 8), torch.randint(0, 4, (64,))
    model = LSTMClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        for i in range(0, 64, 16):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x[i : i + 16]), y[i : i + 16])
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
