"""Initialisers that *return* a new float32 tensor, bit-identical to the Rust flodl's for a seed.

torch's ``torch.nn.init`` functions fill an existing tensor in place and infer fans from its
shape; these take the shape and the fans explicitly and return a fresh tensor — convenient when
building parameters by hand (``nn.Parameter(init.kaiming_uniform((64, 32), fan_in=32))``). All draw
from torch's global generator, so :func:`flodl.manual_seed` makes them reproducible.

Two differ on purpose from torch's functions of the same name:

- :func:`trunc_normal` takes its bounds ``a``, ``b`` **in units of std** around the mean and
  **clamps** (torch's ``trunc_normal_`` takes absolute bounds and resamples), so mass piles up at
  the bounds.
- :func:`orthogonal` uses Gram-Schmidt on the rows of a square Gaussian matrix (no QR sign
  correction), float32 storage with float64 left-to-right sums so it rounds like the Rust flodl;
  it is O(n³) in Python-driven numpy.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from flodl.nn.errors import InitError

__all__ = [
    "InitError",
    "kaiming_normal",
    "kaiming_uniform",
    "normal",
    "orthogonal",
    "trunc_normal",
    "uniform",
    "uniform_bias",
    "xavier_normal",
    "xavier_uniform",
]

Shape = int | Sequence[int]
Device = torch.device | str | None


def _dim(value: object) -> int:
    # operator.index: numpy and tensor integers are sizes; 2.7 is not (int() would make it 2)
    try:
        dim = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise InitError(
            f"a shape holds integer sizes, got {type(value).__name__} {value!r}"
        ) from None
    if dim < 0:
        raise InitError(f"a shape holds sizes >= 0, got {dim}")
    return dim


def _shape(shape: Shape) -> tuple[int, ...]:
    try:
        return (_dim(operator.index(shape)),)  # type: ignore[arg-type]
    except TypeError:
        pass
    if isinstance(shape, str) or not isinstance(shape, Iterable):
        raise InitError(
            f"a shape is an integer or a sequence of integers, got {type(shape).__name__} {shape!r}"
        )
    return tuple(_dim(s) for s in shape)


def _fan(name: str, value: int, *, minimum: int = 1) -> int:
    try:
        fan = operator.index(value)
    except TypeError:
        raise InitError(
            f"{name} must be an integer, got {type(value).__name__} {value!r}"
        ) from None
    if fan < minimum:
        raise InitError(f"{name} must be >= {minimum}, got {fan}")
    return fan


def _spread(name: str, value: float) -> float:
    """A standard deviation: a number >= 0 (negative or NaN ones are refused, as torch does)."""
    try:
        ok = not isinstance(value, str) and float(value) >= 0.0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise InitError(f"{name} must be a number >= 0, got {value!r}")
    return value


def _rand(shape: Shape, device: Device) -> torch.Tensor:
    return torch.rand(_shape(shape), dtype=torch.float32, device=device)


def _randn(shape: Shape, device: Device) -> torch.Tensor:
    return torch.randn(_shape(shape), dtype=torch.float32, device=device)


def _symmetric(shape: Shape, bound: float, device: Device) -> torch.Tensor:
    # U(-b, b) as rand * 2b - b, in that order: the Rust flodl computes it this way, so the same
    # seed gives bit-identical weights in both.
    return _rand(shape, device).mul(2.0 * bound).add(-bound)


def _finite(name: str, value: float) -> float:
    """A finite number (NaN or infinite ones would fill the tensor with NaN or inf)."""
    try:
        ok = not isinstance(value, str) and math.isfinite(float(value))
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several values
        ok = False
    if not ok:
        raise InitError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _kaiming_std(fan_in: int, a: float) -> float:
    a = _finite("a (the negative slope)", a)
    gain = math.sqrt(2.0 / (1.0 + a * a))
    return gain / math.sqrt(float(_fan("fan_in", fan_in)))


def _xavier_fans(fan_in: int, fan_out: int) -> float:
    """``fan_in + fan_out``: each >= 0 (torch allows an empty side), their sum >= 1."""
    total = _fan("fan_in", fan_in, minimum=0) + _fan("fan_out", fan_out, minimum=0)
    if total < 1:
        raise InitError(f"xavier init needs fan_in + fan_out >= 1, got {fan_in} + {fan_out}")
    return float(total)


def kaiming_uniform(
    shape: Shape, fan_in: int, a: float = 0.0, device: Device = None
) -> torch.Tensor:
    """He uniform: ``U(-b, b)``, ``b = sqrt(3) * sqrt(2 / (1 + a²)) / sqrt(fan_in)``.

    ``a`` is the negative slope after the layer: 0 for ReLU (``b = sqrt(6 / fan_in)``), ``sqrt(5)``
    for torch's ``nn.Linear`` default (``b = 1 / sqrt(fan_in)``).

    >>> kaiming_uniform((3, 4), fan_in=4).shape
    torch.Size([3, 4])
    """
    return _symmetric(shape, math.sqrt(3.0) * _kaiming_std(fan_in, a), device)


def kaiming_normal(
    shape: Shape, fan_in: int, a: float = 0.0, device: Device = None
) -> torch.Tensor:
    """He normal: ``N(0, std²)``, ``std = sqrt(2 / (1 + a²)) / sqrt(fan_in)``."""
    return _randn(shape, device).mul(_kaiming_std(fan_in, a))


def xavier_uniform(shape: Shape, fan_in: int, fan_out: int, device: Device = None) -> torch.Tensor:
    """Glorot uniform: ``U(-b, b)``, ``b = sqrt(6 / (fan_in + fan_out))`` (no gain argument)."""
    return _symmetric(shape, math.sqrt(6.0 / _xavier_fans(fan_in, fan_out)), device)


def xavier_normal(shape: Shape, fan_in: int, fan_out: int, device: Device = None) -> torch.Tensor:
    """Glorot normal: ``N(0, std²)``, ``std = sqrt(2 / (fan_in + fan_out))``."""
    return _randn(shape, device).mul(math.sqrt(2.0 / _xavier_fans(fan_in, fan_out)))


def uniform_bias(fan_in: int, shape: Shape, device: Device = None) -> torch.Tensor:
    """Bias init ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``. Note the order: ``fan_in`` first."""
    return _symmetric(shape, 1.0 / math.sqrt(float(_fan("fan_in", fan_in))), device)


def uniform(shape: Shape, low: float, high: float, device: Device = None) -> torch.Tensor:
    """``U(low, high)`` as ``rand * (high - low) + low``; finite bounds with ``low <= high``
    (as ``torch.nn.init.uniform_`` asks).

    >>> t = uniform(1000, -0.5, 0.5)
    >>> bool(t.min() >= -0.5 and t.max() < 0.5)
    True
    """
    low, high = _finite("low", low), _finite("high", high)
    if low > high:
        raise InitError(f"uniform needs low <= high, got low={low!r}, high={high!r}")
    return _rand(shape, device).mul(high - low).add(low)


def normal(
    shape: Shape, mean: float = 0.0, std: float = 1.0, device: Device = None
) -> torch.Tensor:
    """``N(mean, std²)`` as ``randn * std + mean``; ``std`` must be >= 0."""
    return _randn(shape, device).mul(_spread("std", std)).add(mean)


def trunc_normal(
    shape: Shape,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    device: Device = None,
) -> torch.Tensor:
    """``N(mean, std²)`` clamped to ``[mean + a*std, mean + b*std]`` — a, b in units of std.

    This is not ``torch.nn.init.trunc_normal_`` (absolute bounds, resampling): values beyond the
    bounds are clamped onto them, so mass piles up at the bounds (the Rust flodl's definition).

    ``std`` must be >= 0 and ``a < b``: with a negative ``std`` the bounds would swap and every
    value land on one of them.

    >>> t = trunc_normal(1000, mean=3.0, std=0.5)
    >>> bool(t.min() >= 2.0 and t.max() <= 4.0)
    True
    """
    _spread("std", std)
    if not a < b:
        raise InitError(f"trunc_normal needs a < b (bounds in units of std), got a={a!r}, b={b!r}")
    low, high = mean + a * std, mean + b * std
    return _randn(shape, device).mul(std).add(mean).clamp(low, high)


def _sequential_sum(values: np.ndarray) -> float:
    # Left-to-right accumulation (numpy's sum is pairwise), like a `dot += x * y` loop: the Rust
    # flodl sums this way, so orthogonal() rounds exactly as it does.
    return float(np.cumsum(values)[-1]) if values.size else 0.0


def orthogonal(shape: Sequence[int], gain: float = 1.0, device: Device = None) -> torch.Tensor:
    """A (semi-)orthogonal ``[rows, cols]`` matrix scaled by ``gain``.

    Draws an ``n × n`` Gaussian matrix (``n = max(rows, cols)``), orthonormalises its rows by
    modified Gram-Schmidt — float32 storage, float64 dot products and norms, norm floored at
    1e-10 — and keeps the top-left ``rows × cols`` block: orthonormal rows when ``rows <= cols``,
    orthonormal columns otherwise. Multiplies by ``gain`` only when it differs from 1 by > 1e-10.

    >>> q = orthogonal((4, 6))
    >>> bool(torch.allclose(q @ q.T, torch.eye(4), atol=1e-5))
    True
    """
    dims = _shape(shape)
    if len(dims) != 2:
        raise InitError(
            f"orthogonal init requires a 2D shape, got {list(dims)}; "
            "reshape to [rows, prod(rest)] first"
        )
    rows, cols = dims
    n = max(rows, cols)
    data = _randn((n, n), device).cpu().numpy().astype(np.float32, copy=True)
    done = np.empty((n, n), dtype=np.float64)  # float64 copies of finished rows
    for i in range(n):
        row = data[i]
        for j in range(i):
            prev = done[j]
            dot = _sequential_sum(row.astype(np.float64) * prev)
            row -= (dot * prev).astype(np.float32)
        wide = row.astype(np.float64)
        norm = max(math.sqrt(_sequential_sum(wide * wide)), 1e-10)
        data[i] = (wide / norm).astype(np.float32)
        done[i] = data[i].astype(np.float64)
    result = torch.from_numpy(data)[:rows, :cols].contiguous().to(device or "cpu")
    return result.mul(gain) if abs(gain - 1.0) > 1e-10 else result
