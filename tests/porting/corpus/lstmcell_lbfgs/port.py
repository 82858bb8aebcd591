"""flodl port of original.py: the per-time-step loop is `.scan(cell, dim=1)`, `future=0` is
`.input("future", default=0)`, and LBFGS (not wrapped by flodl) stays torch's, closure and all."""

import argparse
import time

import numpy as np
import torch
from torch import nn

import flodl as fl


class TwoCells(nn.Module):
    """One time step of the original: two stacked LSTMCells and the linear read-out.

    The state is (output, (h1, c1), (h2, c2)); scan stacks its first element, the output.
    """

    def __init__(self, hidden=24):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, x_t, state):
        first, second = (None, None) if state is None else state[1:]
        h1, c1 = self.lstm1(x_t, first)
        h2, c2 = self.lstm2(h1, second)
        return self.linear(h2), (h1, c1), (h2, c2)


class Future(nn.Module):
    """Feed the last output back `future` times (the original's second loop)."""

    def __init__(self, cell: TwoCells):
        super().__init__()
        self.cell = cell

    def forward(self, outputs, state, future):
        steps = [outputs]
        for _ in range(future):
            state = self.cell(state[0], state)
            steps.append(state[0].unsqueeze(1))
        return torch.cat(steps, dim=1)


def build_model(hidden=24) -> fl.Graph:
    cell = TwoCells(hidden)
    return (
        fl.FlowBuilder()
        .input("future", default=0)
        .through(nn.Unflatten(1, (-1, 1)))  # (batch, time) -> (batch, time, 1)
        .scan(cell, dim=1, final="state")  # the original's split(1, dim=1) loop
        .tag("cells")
        .through(Future(cell))
        .using("state", "future")
        .through(nn.Flatten(1))  # (batch, time + future)
        .build()
    )


def waves(n=20, length=60):
    x = np.empty((n, length), np.int64)
    x[:] = np.arange(length) + np.random.randint(-20, 20, n).reshape(n, 1)
    return torch.from_numpy(np.sin(x / 4.0)).double()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--future", type=int, default=50)
    args = parser.parse_args()
    np.random.seed(0)
    fl.manual_seed(0)
    data = waves()
    input, target = data[3:, :-1], data[3:, 1:]
    test_input, test_target = data[:3, :-1], data[:3, 1:]
    seq = build_model().double()
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8)
    monitor = fl.Monitor(args.steps, stream=None, gpu=False)
    for i in range(args.steps):
        start = time.perf_counter()

        def closure():
            optimizer.zero_grad()
            loss = criterion(seq(input), target)
            loss.backward()
            return loss

        optimizer.step(closure)
        with torch.no_grad():
            pred = seq(test_input, future=args.future)
            loss = criterion(pred[:, : -args.future], test_target)
        monitor.log(i, time.perf_counter() - start, {"test_loss": loss.item()})
    monitor.finish()


if __name__ == "__main__":
    main()
