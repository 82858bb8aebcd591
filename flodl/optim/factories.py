"""``Adam`` / ``AdamW`` / ``SGD`` factories that pick torch's fastest kernel for where the params live.

Wherever torch has fused kernels (CUDA and the CPU among them) every parameter update of a group
runs as one fused multi-tensor kernel (``fused=True``); elsewhere the ``foreach`` implementation
batches the per-tensor ops. On the CPU, fused is 2-6x faster than foreach for Adam/AdamW and
1.5-2.5x for SGD with momentum (``benchmarks/optim_overhead.py``). The factories return plain
``torch.optim`` optimizers, so everything torch offers (``state_dict``, param groups, schedulers)
works unchanged. Build the optimizer *after* moving the model to its device, as in torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.optim import Optimizer

from flodl._torch_release import TORCH_RELEASE
from flodl.optim.errors import OptimError

__all__ = ["SGD", "Adam", "AdamW", "kernel_choice"]

# dtypes torch's fused Adam/AdamW/SGD kernels accept.
_FUSED_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


def _fused_device_types() -> frozenset[str]:
    """Device types with fused optimizer kernels in this torch (CUDA and CPU since torch 2.4)."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    except ImportError:  # a torch that moved the helper: the two we know
        return frozenset({"cuda", "cpu"})
    return frozenset(_get_fused_kernels_supported_devices())


_FUSED_DEVICES = _fused_device_types()


# torch's optimizers take (name, tensor) pairs, and keep the names, from torch 2.6; before it
# the factories hand them the tensors alone
_NAMED_PARAMS = TORCH_RELEASE >= (2, 6)


def _tensor_of(param: Any) -> Any:
    """The tensor of a ``(name, tensor)`` pair, else ``param`` itself."""
    return param[1] if isinstance(param, tuple) and len(param) == 2 else param


def _flat_params(params: Iterable[Any]) -> tuple[list[Any], list[Any]]:
    """(what to hand to torch, every tensor in it) — params may be tensors, (name, tensor) or groups."""
    # A tensor or a dict is iterable too, but not as torch reads params: a tensor would be taken
    # row by row (non-leaf rows) and a dict key by key (strings). torch refuses both; so do we.
    if isinstance(params, torch.Tensor):
        raise OptimError(
            "params should be an iterable of tensors or of param-group dicts, got a single "
            f"Tensor of shape {list(params.shape)}: wrap it in a list, [tensor]"
        )
    if isinstance(params, dict):
        raise OptimError(
            "params should be an iterable of tensors or of param-group dicts, got a single dict "
            f"(keys {sorted(map(str, params))}): wrap the group in a list, [group]"
        )
    try:
        items = list(params)
    except TypeError:
        raise OptimError(
            "params should be an iterable of tensors or of param-group dicts, "
            f"got {type(params).__name__}"
        ) from None
    if not items:
        raise OptimError(
            "the optimizer got an empty parameter list — did the model build any layers?"
        )
    tensors: list[Any] = []
    for index, item in enumerate(items):
        if isinstance(item, dict):
            group = item.get("params")
            if group is None:
                raise OptimError(f"a param group needs a 'params' entry, got keys {sorted(item)}")
            iterable = isinstance(group, Iterable) and not isinstance(group, torch.Tensor)
            group = list(group) if iterable else [group]  # a lone tensor is a group of one
            if not _NAMED_PARAMS:
                group = [_tensor_of(p) for p in group]
            items[index] = {**item, "params": group}  # generators are read once: keep the list
            tensors.extend(_tensor_of(p) for p in group)
        else:
            tensors.append(_tensor_of(item))
            if not _NAMED_PARAMS:
                items[index] = tensors[-1]
    for tensor in tensors:
        # duck-typed (only .device and .dtype are read here); torch checks the rest
        if not (hasattr(tensor, "device") and hasattr(tensor, "dtype")):
            raise OptimError(
                "an optimizer can only optimize tensors (or (name, tensor) pairs), but one of the "
                f"params is {type(tensor).__name__} {tensor!r:.60}"
            )
    return items, tensors


def kernel_choice(tensors: Iterable[Any]) -> dict[str, bool]:
    """The implementation keyword torch should use for ``tensors``: ``fused`` or ``foreach``.

    ``{"fused": True}`` when every tensor is floating point and they all live on one device type
    with fused kernels (CUDA, CPU, ...), else ``{"foreach": True}``. Only ``.device`` and
    ``.dtype`` are read.

    >>> import torch
    >>> kernel_choice([torch.zeros(2)])
    {'fused': True}
    >>> kernel_choice([torch.zeros(2, dtype=torch.int64)])
    {'foreach': True}
    """
    tensors = list(tensors)
    device_types = {t.device.type for t in tensors}
    fused = (
        len(device_types) == 1
        and device_types <= _FUSED_DEVICES
        and all(t.dtype in _FUSED_DTYPES for t in tensors)
    )
    return {"fused": True} if fused else {"foreach": True}


def _build(cls: type[Optimizer], params: Iterable[Any], kwargs: dict[str, Any]) -> Optimizer:
    items, tensors = _flat_params(params)
    if (
        kwargs.get("fused") is None
        and kwargs.get("foreach") is None
        and not kwargs.get("differentiable")
    ):
        kwargs.pop("fused", None)
        kwargs.pop("foreach", None)
        kwargs.update(kernel_choice(tensors))
    return cls(items, **kwargs)


def Adam(  # named like the torch class it builds
    params: Iterable[Any],
    lr: float = 1e-3,
    *,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    **kwargs: Any,
) -> torch.optim.Adam:
    """``torch.optim.Adam`` with the fused kernel where torch has one (CUDA, CPU), else ``foreach``.

    Defaults are torch's, which the Rust flodl uses too: betas (0.9, 0.999), eps 1e-8. Any other
    ``torch.optim.Adam`` keyword passes through; an explicit ``fused=``/``foreach=`` wins.

    >>> import torch, flodl as fl
    >>> opt = fl.optim.Adam(torch.nn.Linear(2, 1).parameters(), lr=0.01)
    >>> opt.param_groups[0]["fused"], opt.param_groups[0]["foreach"]
    (True, None)
    """
    kwargs.update(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    return _build(torch.optim.Adam, params, kwargs)  # type: ignore[return-value]


def AdamW(
    params: Iterable[Any],
    lr: float = 1e-3,
    weight_decay: float = 0.01,
    *,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    **kwargs: Any,
) -> torch.optim.AdamW:
    """``torch.optim.AdamW`` (decoupled weight decay, default 0.01) with the fastest kernel.

    The positional order is ``(params, lr, weight_decay)``, the order of the Rust flodl's
    ``AdamW::new``, so a ported ``AdamW(params, 1e-3, 0.05)`` keeps its meaning.
    """
    kwargs.update(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    return _build(torch.optim.AdamW, params, kwargs)  # type: ignore[return-value]


def SGD(
    params: Iterable[Any],
    lr: float,
    momentum: float = 0.0,
    *,
    weight_decay: float = 0.0,
    nesterov: bool = False,
    **kwargs: Any,
) -> torch.optim.SGD:
    """``torch.optim.SGD`` with the fastest kernel; ``(params, lr, momentum)`` like ``SGD::new``."""
    kwargs.update(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov)
    return _build(torch.optim.SGD, params, kwargs)  # type: ignore[return-value]
