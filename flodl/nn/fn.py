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

    ``pass_training=True`` calls ``fn(..., training=self.training)``: the function follows the
    mode of the graph holding it (``graph.train()`` / ``graph.eval()``), as a layer does. A
    function that behaves differently while training (stochastic depth, a functional dropout
    or batch norm) is a step this way:

    >>> def jitter(x, *, training):
    ...     return x + 1.0 if training else x
    >>> step = fl.nn.Fn(jitter, pass_training=True)
    >>> step(torch.zeros(2)), step.eval()(torch.zeros(2))
    (tensor([1., 1.]), tensor([0., 0.]))
    """

    def __init__(
        self, fn: Callable[..., Any], name: str | None = None, *, pass_training: bool = False
    ) -> None:
        super().__init__()
        if not callable(fn):
            raise TypeError(f"Fn needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.node_name = name or callable_name(fn)
        self.pass_training = pass_training

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.pass_training:
            return self.fn(*args, training=self.training, **kwargs)
        return self.fn(*args, **kwargs)

    def extra_repr(self) -> str:
        module = getattr(self.fn, "__module__", None) or ""
        qualname = getattr(self.fn, "__qualname__", None) or self.node_name
        text = f"{module}.{qualname}" if module else qualname
        return f"{text}, pass_training=True" if self.pass_training else text
