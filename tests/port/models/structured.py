"""Models as libraries write them: a backbone returning a dict or a dataclass, a layer called by
keyword or with its defaults spelled out, a helper torch.fx keeps as one call, a layer whose
state carries a version."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import fx, nn


@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor
    pooled: torch.Tensor


class Encoder(nn.Module):
    """Returns a dataclass (as transformers' ModelOutput); a data-dependent branch: opaque."""

    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, mask=None, scale=1.0, **kwargs):
        h = self.proj(x) * scale
        if h.mean() > 10:  # decided by the data: fx cannot trace it
            h = h / 2
        if mask is not None:
            h = h * mask
        return EncoderOutput(last_hidden_state=h, pooled=h.mean(dim=1))


class DictBackbone(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        h = torch.tanh(self.proj(x))
        if h.sum() > 1e6:
            h = h * 0
        return {"features": h, "pooled": h.mean(dim=1)}


class Classifier(nn.Module):
    """A head on a dataclass-returning encoder, called with its defaults spelled out."""

    def __init__(self, dim=8, classes=3):
        super().__init__()
        self.encoder = Encoder(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        out = self.encoder(x, mask=None, scale=1.0)
        return self.head(out.last_hidden_state[:, 0])


class DictHead(nn.Module):
    def __init__(self, dim=8, classes=3):
        super().__init__()
        self.backbone = DictBackbone(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        return self.head(self.backbone(x)["pooled"])


class Tokens(nn.Module):
    """An embedding called by keyword, as ``self.embed(input=ids)``."""

    def __init__(self, vocab=20, dim=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, ids):
        return self.out(self.embed(input=ids))


def pad_to_even(x):
    """A helper fx keeps as one call (``torch.fx.wrap``), as torchvision's Swin does."""
    return F.pad(x, (0, x.shape[-1] % 2))


fx.wrap("pad_to_even")


class Padded(nn.Module):
    def __init__(self, dim=7):
        super().__init__()
        self.fc = nn.Linear(dim + dim % 2, 4)

    def forward(self, x):
        return self.fc(pad_to_even(x))


class Versioned(nn.Module):
    """A layer whose loading reads the version saved with its state (to convert older ones)."""

    _version = 2

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.relu(self.fc(x))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):
        if local_metadata.get("version") not in (1, 2):
            raise ValueError(f"version should be 1 or 2, not {local_metadata.get('version')}")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)


class WithVersioned(nn.Module):
    def __init__(self, dim=4):
        super().__init__()
        self.block = Versioned(dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, x):
        return self.out(self.block(x))


class Sized(nn.Module):
    """An opaque layer told a size read off its input's shape: no builder call can pass it."""

    def __init__(self, dim=6):
        super().__init__()
        self.encoder = Encoder(dim)

    def forward(self, x):
        return self.encoder(x, scale=x.shape[-1]).pooled


class Scaled(nn.Module):
    """A forward that opens with an expression: its function is the graph's first step."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, 2)

    def forward(self, x):
        return self.fc(x * 2 - 1)


class Rescaled(nn.Module):
    """Arguments that differ from the defaults, one of them taken by ``**kwargs``."""

    def __init__(self, dim=8):
        super().__init__()
        self.encoder = Encoder(dim)

    def forward(self, x):
        return self.encoder(x, scale=0.5, flag=True).pooled
