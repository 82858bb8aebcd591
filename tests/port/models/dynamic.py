"""Control flow fx cannot follow: on the data, on an argument, on self.training."""

import torch
import torch.nn.functional as F
from torch import nn


class Gate(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        if x.mean() > 0:  # decided by the data: fx cannot trace it
            return torch.relu(self.fc(x))
        return torch.tanh(self.fc(x))


class GatedNet(nn.Module):
    def __init__(self, dim=8, classes=3):
        super().__init__()
        self.inp = nn.Linear(dim, dim)
        self.gate = Gate(dim)
        self.out = nn.Linear(dim, classes)

    def forward(self, x):
        return self.out(self.gate(torch.relu(self.inp(x))))


class Halting(nn.Module):
    """The whole forward loops on the data."""

    def __init__(self, dim=8):
        super().__init__()
        self.step = nn.Linear(dim, dim)

    def forward(self, x):
        for _ in range(4):
            x = torch.tanh(self.step(x))
            if x.abs().max() < 0.1:
                break
        return x


class Rollout(nn.Module):
    """A forward whose loop count is an argument (a Python int): traced, it would be frozen."""

    def __init__(self, dim=6):
        super().__init__()
        self.cell = nn.Linear(dim, dim)

    def forward(self, x, steps=1):
        for _ in range(steps):
            x = torch.tanh(self.cell(x))
        return x


class Noisy(nn.Module):
    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        if self.training:
            x = x + 0.1 * torch.randn_like(x)
        return F.dropout(self.fc(x), 0.5, self.training)


class ModeNet(nn.Module):
    def __init__(self, dim=4):
        super().__init__()
        self.noisy = Noisy(dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, x):
        return self.out(F.dropout(F.relu(self.noisy(x)), 0.2, self.training))


class AttentionDropout(nn.Module):
    """transformers' attention: ``p`` is 0 in eval mode, and the dropout follows the module."""

    def __init__(self, dim=4, p=0.25):
        super().__init__()
        self.q, self.k = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.p = p

    def forward(self, x):
        weights = torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2), dim=-1)
        dropout = 0.0 if not self.training else self.p
        weights = F.dropout(weights, p=dropout, training=self.training)
        return weights @ x


class AttentionNet(nn.Module):
    def __init__(self, dim=4, evaluating=False):
        super().__init__()
        self.attn = AttentionDropout(dim)
        self.out = nn.Linear(dim, 2)
        if evaluating:  # built in eval mode: the port traces the eval-mode forward first
            self.eval()

    def forward(self, x):
        return self.out(self.attn(x))


class MonteCarloDropout(nn.Module):
    """Dropout on in both modes, at a rate that depends on the mode: not one nn.Dropout, a
    function choosing the rate by the graph's mode."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, x):
        return self.out(F.dropout(self.fc(x), 0.1 if self.training else 0.3, training=True))


def jitter(x, p, training=True):
    """Stochastic depth as torchvision writes it: a helper fx records as one call."""
    if not training or p == 0.0:
        return x
    keep = torch.empty(x.shape[0], 1).bernoulli_(1 - p)
    return x * keep / (1 - p)


torch.fx.wrap("jitter")


class StochasticNet(nn.Module):
    """A helper told the mode by argument, positionally and by keyword."""

    def __init__(self, dim=4, evaluating=False):
        super().__init__()
        self.a, self.b, self.out = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, 2)
        if evaluating:
            self.eval()

    def forward(self, x):
        x = x + jitter(self.a(x), 0.5, self.training)
        x = x + jitter(self.b(x), 0.25, training=self.training)
        return self.out(x)


class BatchNormAct(nn.BatchNorm2d):
    """timm's BatchNormAct2d: a batch norm that counts its batches itself, in training only."""

    def __init__(self, channels):
        super().__init__(channels)
        self.act = nn.ReLU()

    def forward(self, x):
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
        x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                         self.training, self.momentum, self.eps)  # fmt: skip
        return self.act(x)


def drop_path(x, drop_prob: float = 0.0, training: bool = False):
    """timm's drop path, traced through: the mask exists in training only."""
    if drop_prob == 0.0 or not training:
        return x
    keep = 1 - drop_prob
    mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
    return x * mask.div_(keep)


class ResidualBlock(nn.Module):
    def __init__(self, channels, drop):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = BatchNormAct(channels)
        self.drop = drop

    def forward(self, x):
        return x + drop_path(self.norm(self.conv(x)), self.drop, self.training)


class TrainingOnlyNet(nn.Module):
    """What timm's blocks do differently in training: count batches, drop paths."""

    def __init__(self, channels=3, evaluating=False):
        super().__init__()
        self.blocks = nn.Sequential(ResidualBlock(channels, 0.5), ResidualBlock(channels, 0.25))
        if evaluating:
            self.eval()

    def forward(self, x):
        return self.blocks(x).mean((2, 3))


class EvalOnly(nn.Module):
    """An operation in eval mode only: not written out (its module is kept whole)."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        x = self.fc(x)
        return x if self.training else x.clamp(-0.5, 0.5)


class EvalOnlyNet(nn.Module):
    def __init__(self, dim=4):
        super().__init__()
        self.inner = EvalOnly(dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, x):
        return self.out(self.inner(x))


class SortedInTraining(nn.Module):
    """In training only, a call that returns a tuple (a step of its own): not written out by
    mode, so the port falls back to keeping this module whole."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        x = self.fc(x)
        if self.training:
            x = x + torch.sort(x, dim=-1)[0]
        return x


class SortedNet(nn.Module):
    def __init__(self, dim=4):
        super().__init__()
        self.inner = SortedInTraining(dim)
        self.norm = BatchNormAct(1)
        self.out = nn.Linear(dim, 2)

    def forward(self, x):
        return self.out(self.norm(self.inner(x)[:, None, :, None])[:, 0, :, 0])


class Rescaled(nn.Module):
    """A constant chosen by the mode: the port chooses it by the graph's mode."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return self.fc(x) * (0.5 if self.training else 1.0)


class RescaledNet(nn.Module):
    def __init__(self, dim=4):
        super().__init__()
        self.first = nn.Linear(dim, dim)
        self.inner = Rescaled(dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, x):
        return self.out(torch.relu(self.inner(self.first(x))))


class ProbabilitiesInEval(nn.Module):
    """Logits in training, probabilities in eval mode: an operation in eval mode only."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, 3)

    def forward(self, x):
        logits = self.fc(x)
        return logits if self.training else logits.softmax(-1)


class LayerInEval(nn.Module):
    """A layer called in eval mode only: not written by mode (its module is kept whole)."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        x = self.fc(x)
        return x if self.training else self.norm(x)


class LayerInEvalNet(nn.Module):
    def __init__(self, dim=4):
        super().__init__()
        self.inner = LayerInEval(dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, x):
        return self.out(self.inner(x))
