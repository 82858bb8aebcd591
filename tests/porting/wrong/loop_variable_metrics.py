"""Unchecked value (fixed): epoch metrics from a flodl list are checked: line 25 (`loss` is
`avg_loss` on fl.train.EpochMetrics)."""

import torch
from torch import nn

import flodl as fl


def make_model(device):
    return fl.FlowBuilder(nn.Linear(4, 1)).build()


def train_step(model, batch):
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
optimizer = lambda params: torch.optim.SGD(params, lr=0.1)  # noqa: E731
handle = fl.Trainer.builder(make_model, optimizer, train_step).dataset(data).batch_size(8).run()
handle.join()
for metrics in handle.history:
    print(metrics.epoch)
    print(metrics.loss)
