"""Calls fx cannot trace into: an autograd Function with its own backward, a TorchScript
function."""

import warnings

import torch
from torch import nn


class GradReverse(torch.autograd.Function):
    """The identity forward, the gradient negated and scaled backward (domain adaptation)."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.neg() * ctx.alpha, None


def _gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x / 1.41421))


with warnings.catch_warnings():  # (torch 2.13 deprecates TorchScript)
    warnings.simplefilter("ignore", DeprecationWarning)
    scripted_gelu = torch.jit.script(_gelu)  # bound to another name than its own


class Adversarial(nn.Module):
    """A label head and a domain head behind a gradient reversal, through a scripted gelu."""

    def __init__(self, dim=4):
        super().__init__()
        self.features = nn.Linear(dim, 8)
        self.label = nn.Linear(8, 3)
        self.domain = nn.Linear(8, 2)

    def forward(self, x):
        f = scripted_gelu(self.features(x))
        return self.label(f), self.domain(GradReverse.apply(f, 0.5))
