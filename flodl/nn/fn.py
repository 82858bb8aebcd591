"""``Fn``: a plain callable as a module (what ``.through(torch.relu)`` wraps it in)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from torch import nn


def callable_name(fn: Callable[..., Any]) -> str:
    """A snake_case identifier naming ``fn`` (``torch.relu`` -> ``relu``, a lambda -> ``fn``)."""
    raw = getattr(fn, "__name__", None) or type(fn).__name__
    name = re.sub(r"\W+", "_", raw).strip("_").lower()
    return "fn" if not name or name == "lambda" or not name[0].isalpha() else name


class Fn(nn.Module):
    """Wrap any callable as a parameter-free module.

    >>> import torch
    >>> import flodl as fl
    >>> fl.nn.Fn(torch.relu)(torch.tensor([-1.0, 2.0]))
    tensor([0., 2.])
    """

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        super().__init__()
        if not callable(fn):
            raise TypeError(f"Fn needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.node_name = name or callable_name(fn)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def extra_repr(self) -> str:
        module = getattr(self.fn, "__module__", None) or ""
        qualname = getattr(self.fn, "__qualname__", None) or self.node_name
        return f"{module}.{qualname}" if module else qualname
