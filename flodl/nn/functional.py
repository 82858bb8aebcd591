"""Functions torch does not ship: ``focal_loss`` (multi-class, from logits) and ``gaussian_blur_2d``.

Everything else lives in ``torch.nn.functional``; flodl does not re-wrap it.
"""

from __future__ import annotations

import math

import torch

from flodl.nn.errors import FunctionalError

__all__ = ["FunctionalError", "focal_loss", "gaussian_blur_2d", "gaussian_kernel_size"]


def focal_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    alpha: float = 0.25,
    gamma: float = 2.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Multi-class focal loss (Lin et al., 2017): ``mean_b[-alpha * (1 - p_t)^gamma * log p_t]``.

    ``logits`` is ``[B, C]`` (raw scores), ``target`` is ``[B]`` class indices; ``p_t`` is the
    softmax probability of the target class. ``log p_t`` comes from ``log_softmax``, so large logits
    do not overflow. ``reduction`` is ``"mean"`` (the default), ``"sum"`` or ``"none"`` (one
    value per sample), as in torch's losses. ``gamma = 0`` gives ``alpha`` times the
    cross-entropy. This is the multi-class softmax definition (the Rust flodl's) — torchvision's
    ``sigmoid_focal_loss`` is the binary (per-logit sigmoid) one.

    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0]]); target = torch.tensor([0])
    >>> round(float(focal_loss(logits, target, alpha=1.0, gamma=0.0)), 6)  # = cross-entropy
    0.126928
    """
    if logits.dim() != 2:
        raise FunctionalError(
            f"focal_loss expects logits of shape [batch, classes], got {list(logits.shape)}"
        )
    if target.dim() != 1 or target.shape[0] != logits.shape[0]:
        raise FunctionalError(
            f"focal_loss expects target class indices of shape [{logits.shape[0]}], "
            f"got {list(target.shape)} (one-hot targets: pass target.argmax(1))"
        )
    if target.dtype.is_floating_point or target.dtype == torch.bool:
        raise FunctionalError(
            f"focal_loss target must hold integer class indices, got dtype {target.dtype}"
        )
    if reduction not in ("mean", "sum", "none"):
        raise FunctionalError(
            f"focal_loss reduction must be 'mean', 'sum' or 'none', got {reduction!r}"
        )
    log_pt = torch.log_softmax(logits, dim=1).gather(1, target.long().unsqueeze(1)).squeeze(1)
    pt = log_pt.exp()
    per_sample = -alpha * (1.0 - pt).pow(gamma) * log_pt
    if reduction == "none":
        return per_sample
    return per_sample.sum() if reduction == "sum" else per_sample.mean()


def _check_sigma(sigma: float, where: str = "gaussian_blur_2d") -> float:
    """``sigma`` as a float if it is a finite number > 0, else a :class:`FunctionalError`."""
    try:
        value = float(sigma) if not isinstance(sigma, str) else math.nan
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0.0):  # inf would need an infinite kernel
        raise FunctionalError(f"{where} sigma must be a finite number > 0, got {sigma!r}")
    return value


def gaussian_kernel_size(sigma: float) -> int:
    """``2 * ceil(3 * sigma) + 1`` — OpenCV's kernel size for ``sigma``, also the Rust flodl's."""
    return 2 * math.ceil(3.0 * _check_sigma(sigma, "gaussian_kernel_size")) + 1


def gaussian_blur_2d(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """Blur ``[B, C, H, W]`` images with a Gaussian of standard deviation ``sigma`` (pixels).

    Kernel size :func:`gaussian_kernel_size`, weights ``exp(-d²/2σ²)`` computed in float64 and
    normalised to sum 1 — in float64 for a float64 input; for other dtypes rounded to float32 and
    divided by their float32-rounded sum, as the Rust flodl does — two separable depthwise
    convolutions, **zero** padding (edges darken, unlike torchvision's reflect padding), output
    shape = input shape. ``sigma`` must be a finite number > 0. The result is differentiable with
    respect to ``x``.

    >>> import torch
    >>> y = gaussian_blur_2d(torch.ones(1, 3, 16, 16), sigma=1.0)
    >>> y.shape, round(float(y[0, 0, 8, 8]), 6), float(y[0, 0, 0, 0]) < 0.6
    (torch.Size([1, 3, 16, 16]), 1.0, True)
    """
    if x.dim() != 4:
        raise FunctionalError(f"gaussian_blur_2d expects [B, C, H, W], got {list(x.shape)}")
    if not x.dtype.is_floating_point:
        raise FunctionalError(f"gaussian_blur_2d expects a floating-point tensor, got {x.dtype}")
    sigma = _check_sigma(sigma)
    radius = math.ceil(3.0 * sigma)
    size = 2 * radius + 1
    weights = [math.exp(-float(d * d) / (2.0 * sigma * sigma)) for d in range(-radius, radius + 1)]
    if x.dtype == torch.float64:
        kernel = torch.tensor(weights, dtype=torch.float64) / sum(weights)
    else:
        # float32 weights over a float32 sum: the Rust flodl's kernel, bit for bit, so a ported
        # float32 run blurs identically (narrower inputs get this kernel rounded to their dtype)
        kernel = torch.tensor(weights, dtype=torch.float32) / torch.tensor(
            sum(weights), dtype=torch.float32
        )
    kernel = kernel.to(device=x.device, dtype=x.dtype)
    channels = x.shape[1]
    kx = kernel.view(1, 1, 1, size).expand(channels, 1, 1, size)
    ky = kernel.view(1, 1, size, 1).expand(channels, 1, size, 1)
    y = torch.nn.functional.conv2d(x, kx, padding=(0, radius), groups=channels)
    return torch.nn.functional.conv2d(y, ky, padding=(radius, 0), groups=channels)
