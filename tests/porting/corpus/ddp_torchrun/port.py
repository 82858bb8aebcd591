"""flodl port of original.py: no process group, sampler or DDP wrapper — the Trainer runs the
same script on one CPU, every local GPU, or many machines under torchrun."""

import torch
from torch import nn

import flodl as fl


def make_model(device):
    return fl.FlowBuilder(nn.Linear(10, 32)).through(nn.ReLU()).through(nn.Linear(32, 1)).build()


def train_step(model, batch):
    features, target = batch
    return nn.functional.mse_loss(model(features), target)


fl.manual_seed(0)
dataset = torch.utils.data.TensorDataset(torch.randn(128, 10), torch.randn(128, 1))
handle = (
    fl.Trainer.builder(make_model, lambda params: torch.optim.SGD(params, lr=0.01), train_step)
    .dataset(dataset)
    .batch_size(16)
    .num_epochs(2)
    .run()
)
state = handle.join()
