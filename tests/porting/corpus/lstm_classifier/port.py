"""flodl port of original.py: `out, _ = self.lstm(x)` is `fl.nn.Select(0)`, `out[:, -1, :]` is
`fl.nn.Select((slice(None), -1))`; the graph pickles (no lambda)."""

import argparse
import time

import torch
from torch import nn

import flodl as fl


def build_model(input_size=8, hidden=32, classes=4) -> fl.Graph:
    return (
        fl.FlowBuilder(nn.LSTM(input_size, hidden, num_layers=2, batch_first=True))
        .through(fl.nn.Select(0))  # (output, (h, c)) -> output
        .through(fl.nn.Select((slice(None), -1)))  # the last time step
        .through(nn.Linear(hidden, classes))
        .build()
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    fl.manual_seed(0)
    x, y = torch.randn(64, 12, 8), torch.randint(0, 4, (64,))
    model = build_model()
    optimizer = fl.optim.Adam(model.parameters(), lr=1e-3)
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
    torch.save(model, "lstm_classifier.pt")  # the whole graph pickles: Select, not a lambda


if __name__ == "__main__":
    main()
