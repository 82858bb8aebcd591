"""Gradient clipping that returns the measured value as a float (torch returns a tensor).

Semantics are the Rust flodl's, so a ported run clips the same: :func:`clip_grad_norm` rescales
only when the global norm exceeds ``max_norm``; :func:`clip_grad_value` reports the largest
absolute gradient seen before clipping. One deliberate deviation: a non-finite norm leaves the
gradients untouched, so the caller can skip the step (the Rust flodl scales by
``max_norm / (inf + 1e-6) = 0``, turning every gradient to zero and inf entries to NaN). Both use
torch's multi-tensor (``_foreach``) kernels: a constant number of kernel launches whatever the
number of parameters.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

import torch

from flodl.optim.errors import OptimError

__all__ = ["clip_grad_norm", "clip_grad_value"]

Params = torch.Tensor | torch.nn.Module | Iterable[torch.Tensor]


def _grads(params: Params) -> list[torch.Tensor]:
    if isinstance(params, torch.nn.Module):
        params = params.parameters()
    elif isinstance(params, torch.Tensor):
        params = [params]
    return [p.grad for p in params if p.grad is not None]


def _check_limit(name: str, value: float) -> float:
    value = float(value)
    if not value >= 0.0:
        raise OptimError(f"{name} must be a number >= 0, got {value}")
    return value


def _narrow(grad: torch.Tensor) -> bool:
    """A floating dtype narrower than float32 (float16, bfloat16): its norm can overflow."""
    return grad.dtype.is_floating_point and grad.dtype.itemsize < 4


def _float32_norms(grads: list[torch.Tensor]) -> list[torch.Tensor]:
    try:
        return list(torch._foreach_norm(grads, 2.0, dtype=torch.float32))
    except TypeError:  # a torch without the dtype argument: measure float32 copies
        return list(torch._foreach_norm([g.float() for g in grads], 2.0))


def _norms(grads: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Each gradient's L2 norm, in order, on ``device`` and in one dtype (at least float32).

    100,000 float16 gradients of 300 have a norm of about 94,868, above float16's maximum
    (65,504), so narrow dtypes are measured in float32. The others keep torch's own call, so
    float32 norms stay bit-identical to ``clip_grad_norm_``'s.
    """
    narrow = [_narrow(g) for g in grads]
    if not any(narrow):
        norms = list(torch._foreach_norm(grads, 2.0))
    else:
        wide = [g for g, n in zip(grads, narrow, strict=True) if not n]
        low = iter(_float32_norms([g for g, n in zip(grads, narrow, strict=True) if n]))
        high = iter(torch._foreach_norm(wide, 2.0) if wide else ())
        norms = [next(low) if n else next(high) for n in narrow]
    dtype = functools.reduce(torch.promote_types, (n.dtype for n in norms))
    return [n.to(device=device, dtype=dtype) for n in norms]


def clip_grad_norm(params: Params, max_norm: float) -> float:
    """Scale all gradients so their global L2 norm is at most ``max_norm``; returns the norm before.

    Scaling happens only if the norm is above ``max_norm``, by ``max_norm / (norm + 1e-6)``. With no
    gradient at all it returns 0.0. A NaN or infinite norm is returned and **no gradient is
    touched**, so the caller can skip the step (``math.isfinite(norm)``) with the gradients intact.
    This deviates from the Rust flodl, which multiplies every gradient by 0 for an infinite norm
    (inf entries become NaN); torch's ``clip_grad_norm_`` does the same, and multiplies by NaN for
    a NaN norm. float16 and bfloat16 gradients are measured in float32, so a finite norm above
    float16's range (65,504) is returned as it is, not as ``inf`` (torch's ``clip_grad_norm_``
    measures them in their own dtype). ``params`` may be a module, a tensor or an iterable.

    >>> import torch
    >>> w = torch.zeros(2, requires_grad=True); w.grad = torch.tensor([3.0, 4.0])
    >>> clip_grad_norm([w], 1.0)
    5.0
    """
    max_norm = _check_limit("max_norm", max_norm)
    grads = _grads(params)
    if not grads:
        return 0.0
    device = grads[0].device
    total = float(torch.linalg.vector_norm(torch.stack(_norms(grads, device)), 2.0))
    if math.isfinite(total) and total > max_norm:  # non-finite: leave the gradients as they are
        torch._foreach_mul_(grads, max_norm / (total + 1e-6))
    return total


def clip_grad_value(params: Params, max_val: float) -> float:
    """Clamp every gradient element to ``[-max_val, max_val]``; returns the largest ``|g|`` before.

    A gradient whose maximum is NaN does not count towards the returned maximum. With no gradient
    at all it returns 0.0.

    >>> import torch
    >>> w = torch.zeros(2, requires_grad=True); w.grad = torch.tensor([10.0, -5.0])
    >>> clip_grad_value(w, 2.0), w.grad.tolist()
    (10.0, [2.0, -2.0])
    """
    max_val = _check_limit("max_val", max_val)
    grads = [g for g in _grads(params) if g.numel() > 0]  # an empty tensor has no maximum
    if not grads:
        return 0.0
    device = grads[0].device
    peaks = torch.stack([n.to(device) for n in torch._foreach_norm(grads, math.inf)]).tolist()
    torch._foreach_clamp_min_(grads, -max_val)
    torch._foreach_clamp_max_(grads, max_val)
    return max((p for p in peaks if not math.isnan(p)), default=0.0)
