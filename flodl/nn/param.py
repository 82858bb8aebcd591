"""``Param``: a free learned tensor as a graph step (positional embeddings, learned scales)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

MODES = ("add", "mul", "value")


def _size(shape: object) -> tuple[int, ...]:
    """``shape`` as a tuple of sizes: integers of any kind (numpy's too), never a float."""
    try:
        dims: tuple[int, ...] = (operator.index(shape),)  # type: ignore[arg-type]
    except TypeError:
        if isinstance(shape, str) or not isinstance(shape, Iterable):
            raise TypeError(
                "Param: shape is an integer or a sequence of integers, "
                f"got {type(shape).__name__} {shape!r}"
            ) from None
        try:
            dims = tuple(operator.index(s) for s in shape)
        except TypeError:
            raise TypeError(f"Param: shape must hold integers, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"Param: shape must hold sizes >= 0, got {dims}")
    return dims


class Param(nn.Module):
    """A learned tensor ``value`` of ``shape``, applied to the stream.

    ``mode`` says how:

    * ``"add"`` (default): ``x + value`` — a learned positional embedding added to the stream;
    * ``"mul"``: ``x * value`` — a learned per-channel scale;
    * ``"value"``: ``value`` itself, the stream ignored — a learned constant (an initial state,
      a query), e.g. in a ``split`` branch or a ``fork``.

    Broadcasting follows torch: a ``(1, T, D)`` embedding adds to a ``(B, T, D)`` stream. With
    ``slice_dim=d`` the value is first cut to the stream's length along ``d``
    (``value.narrow(d, 0, x.size(d))``), the usual ``x + pos[:, : x.size(1)]`` for an embedding
    sized for the longest sequence.

    ``init`` fills the tensor once, at construction: ``None`` (zeros), an in-place initialiser
    such as ``nn.init.normal_`` or ``functools.partial(nn.init.normal_, std=0.02)``, or a tensor
    of ``shape`` to copy. The initialiser is not kept, so the module always pickles. The
    parameter is registered as ``value``: a step tagged ``"pos"`` has the state-dict key
    ``pos.value``.

    >>> import torch
    >>> import flodl as fl
    >>> from torch import nn
    >>> g = (fl.FlowBuilder(nn.Linear(4, 8))
    ...      .through(fl.nn.Param((1, 16, 8), init=nn.init.normal_, slice_dim=1)).tag("pos")
    ...      .build())
    >>> g(torch.randn(2, 10, 4)).shape, tuple(g.pos.value.shape)
    (torch.Size([2, 10, 8]), (1, 16, 8))
    """

    node_name = "param"

    def __init__(
        self,
        shape: Sequence[int] | int,
        init: Callable[[torch.Tensor], Any] | torch.Tensor | None = None,
        mode: str = "add",
        slice_dim: int | None = None,
        *,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"Param: mode must be one of {', '.join(MODES)} (got {mode!r})")
        size = _size(shape)
        self.value = nn.Parameter(torch.zeros(size, dtype=dtype))
        if isinstance(init, torch.Tensor):
            if tuple(init.shape) != size:
                raise ValueError(
                    f"Param: the init tensor has shape {tuple(init.shape)}, expected {size}"
                )
            with torch.no_grad():
                self.value.copy_(init)
        elif init is not None:
            if not callable(init):
                raise TypeError(
                    "Param: init is None, a tensor, or an in-place initialiser such as "
                    f"nn.init.normal_ (got {type(init).__name__})"
                )
            with torch.no_grad():
                init(self.value)
        self.mode = mode
        self.slice_dim = slice_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value: torch.Tensor = self.value
        if self.slice_dim is not None:
            value = value.narrow(self.slice_dim, 0, x.size(self.slice_dim))
        if self.mode == "add":
            return x + value
        if self.mode == "mul":
            return x * value
        return value

    def extra_repr(self) -> str:
        extra = f", slice_dim={self.slice_dim}" if self.slice_dim is not None else ""
        return f"shape={tuple(self.value.shape)}, mode={self.mode!r}{extra}"
