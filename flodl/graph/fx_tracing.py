"""Whether ``torch.fx`` is tracing right now: ``torch.fx.symbolic_trace``, and ``torch.export``,
which traces a module's Python with fx.

A graph's pass under fx computes proxies, not tensors, so what it would keep on its modules
(tagged values, state across calls, loop traces) must not outlive the pass. torch keeps the
flag as a module global up to 2.13 and per thread from 2.14; its public readers either leave
out ``torch.export`` (``is_fx_symbolic_tracing``) or log a warning (``is_fx_tracing``).

The non-strict ``torch.export`` of torch 2.4 and 2.5 sets no such flag: it runs the module's
Python on fake tensors (wrapped for functionalization). :func:`exporting_on_fakes` recognizes
such a pass by its inputs; on later torch it is never needed (:data:`FAKE_EXPORT` is False).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch.fx import _symbolic_trace as _fx

from flodl._torch_release import TORCH_RELEASE

fx_tracing: Callable[[], bool] = getattr(_fx, "_get_is_fx_tracing", None) or (
    lambda: bool(_fx._is_fx_tracing_flag)
)

FAKE_EXPORT = TORCH_RELEASE < (2, 6)
_FAKES: tuple[type, ...] = ()
if FAKE_EXPORT:
    from torch._subclasses.fake_tensor import FakeTensor
    from torch._subclasses.functional_tensor import FunctionalTensor

    _FAKES = (FakeTensor, FunctionalTensor)


def exporting_on_fakes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a pass's first tensor input is a fake one, as under torch 2.4/2.5's export."""
    if type(args) is not tuple or type(kwargs) is not dict:  # fx's proxies, as the traced root
        return False
    for value in itertools.chain(args, kwargs.values()):
        if isinstance(value, torch.Tensor):
            return isinstance(value, _FAKES)
    return False
