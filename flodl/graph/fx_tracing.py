"""Whether ``torch.fx`` is tracing right now: ``torch.fx.symbolic_trace``, and ``torch.export``,
which traces a module's Python with fx.

A graph's pass under fx computes proxies, not tensors, so what it would keep on its modules
(tagged values, state across calls, loop traces) must not outlive the pass. torch keeps the
flag as a module global up to 2.13 and per thread from 2.14; its public readers either leave
out ``torch.export`` (``is_fx_symbolic_tracing``) or log a warning (``is_fx_tracing``).

A pass on tensors that hold no data is the same kind of pass: fake tensors (``FakeTensorMode``,
which the non-strict ``torch.export`` of torch 2.4 and 2.5 uses without setting that flag) or
tensors on the meta device. :func:`holds_no_data` recognizes it by its first tensor input, and
:func:`exporting_on_fakes` that export, inside what torch calls compiling.

Two more passes must leave nothing either: a pass while autograd runs a backward on this thread
(:func:`backward_task` is not -1), which is activation checkpointing (``torch.utils.checkpoint``)
recomputing a forward, and a pass under a ``torch.func`` transform (:func:`transforming`:
``vmap``, ``grad``, ``jacrev``...), whose values are the transform's wrappers. Both are read
from private torch functions that torch's own ``checkpoint`` and ``autograd.Function`` call
(both there in every torch flodl supports); a torch without one detects nothing there, and the
tests say so.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.fx import _symbolic_trace as _fx

from flodl._torch_release import TORCH_RELEASE

fx_tracing: Callable[[], bool] = getattr(_fx, "_get_is_fx_tracing", None) or (
    lambda: bool(_fx._is_fx_tracing_flag)
)
backward_task: Callable[[], int] = getattr(torch._C, "_current_graph_task_id", None) or (lambda: -1)
transforming: Callable[[], bool] = getattr(torch._C, "_are_functorch_transforms_active", None) or (
    lambda: False
)

_FAKES = (FakeTensor, FunctionalTensor)
FAKE_EXPORT = TORCH_RELEASE < (2, 6)
"""Whether this torch's non-strict ``torch.export`` runs a module's Python on fake tensors
without setting fx's tracing flag (2.4 and 2.5; ``torch.compiler.is_compiling()`` says True)."""


def _first_tensor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    if type(args) is not tuple:  # fx's proxies, as the traced root
        return None
    for value in itertools.chain(args, kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
    return None


def holds_no_data(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a pass's first tensor input holds no data: a fake tensor (``FakeTensorMode``) or
    a tensor on the meta device. Such a pass computes shapes, not values: the graph must not
    keep what it leaves, nor compute with state that holds data.

    >>> import torch
    >>> holds_no_data((torch.ones(1),), {}), holds_no_data((torch.ones(1, device="meta"),), {})
    (False, True)
    """
    first = _first_tensor(args, kwargs)
    return first is not None and (first.is_meta or isinstance(first, _FAKES))


def exporting_on_fakes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a pass that ``torch.compiler.is_compiling()`` calls compiled is torch 2.4/2.5's
    non-strict export: its first tensor input is a fake one. A type check only, which dynamo
    folds to a constant (reading ``is_meta`` would put an op in its graph)."""
    return isinstance(_first_tensor(args, kwargs), _FAKES)
