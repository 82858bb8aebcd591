"""Seeding and seeded random number generation (``fl.manual_seed``, ``fl.Rng``).

``fl.manual_seed(seed)`` seeds everything a training script draws from implicitly: torch (CPU and
every CUDA device), Python's ``random`` and numpy's global generator. ``fl.Rng(seed)`` is an
explicit CPU generator for data order and augmentation decisions.

Determinism of ``Rng``: the stream depends on the seed only — not on the process, thread,
``PYTHONHASHSEED``, platform or the torch version. It is numpy's PCG64 bit stream (whose raw output
numpy guarantees stable across versions) turned into values by flodl's own code (53-bit floats,
Lemire's unbiased bounded integers, Fisher-Yates shuffling), so the same seed gives the same
values in every run and every process. It is not the Rust original's Xoshiro256++ stream: the
same seed gives a different (equally good) sequence than the Rust ``Rng``.
"""

from __future__ import annotations

import copy
import math
import operator
import random as _pyrandom
from collections.abc import MutableSequence, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

from flodl.errors import RngError

__all__ = ["Rng", "RngError", "manual_seed"]

T = TypeVar("T")

_MASK64 = (1 << 64) - 1
_BUFFER = 256  # raw draws fetched per call into numpy: amortises its per-call cost


def _seed(seed: int) -> int:
    try:
        value = operator.index(seed)
    except TypeError:
        raise RngError(f"a seed must be an integer, got {type(seed).__name__} {seed!r}") from None
    if not 0 <= value <= _MASK64:
        raise RngError(f"a seed must be in [0, 2**64), got {value}")
    return value


def _bounded(value: Any, limit: int) -> int:
    """An integer in [0, limit) from saved state (bools and floats are not integers here)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    if not 0 <= value < limit:
        raise ValueError(f"{value} is outside [0, {limit})")
    return value


def manual_seed(seed: int) -> None:
    """Seed torch (CPU and all CUDA devices), Python's ``random`` and numpy's global generator.

    Call it first, before building the model: weight initialisation draws from torch's generator.
    numpy's legacy seeding only takes 32 bits, so it receives ``seed % 2**32``.

    >>> import torch, flodl as fl
    >>> fl.manual_seed(42); a = torch.rand(3)
    >>> fl.manual_seed(42); torch.equal(a, torch.rand(3))
    True
    """
    seed = _seed(seed)
    _pyrandom.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)  # lazy without a GPU; explicit so the contract is visible


class Rng:
    """A seeded CPU random number generator with a stream fixed by its seed.

    >>> rng = Rng(42)
    >>> items = list(range(5)); rng.shuffle(items); sorted(items) == [0, 1, 2, 3, 4]
    True
    >>> Rng(7).usize(10) == Rng(7).usize(10)
    True

    Copies (``rng.clone()``, ``copy.copy``) continue the same stream independently;
    ``state_dict()`` / ``load_state_dict()`` save and restore the position (e.g. in a checkpoint).
    """

    __slots__ = ("_bits", "_buffer")

    def __init__(self, seed: int) -> None:
        self._bits = np.random.PCG64(_seed(seed))
        self._buffer: list[int] = []

    @classmethod
    def from_entropy(cls) -> Rng:
        """A generator seeded from the operating system (not reproducible)."""
        return cls(int(np.random.SeedSequence().generate_state(1, np.uint64)[0]))

    # -- raw stream --------------------------------------------------------------------------

    def u64(self) -> int:
        """The next raw 64-bit value of the stream."""
        if not self._buffer:
            self._buffer = self._bits.random_raw(_BUFFER).tolist()[::-1]  # pop() from the end
        return self._buffer.pop()

    # -- values ------------------------------------------------------------------------------

    def f64(self) -> float:
        """Uniform float in [0, 1) with 53 random bits."""
        return (self.u64() >> 11) * (1.0 / (1 << 53))

    def f32(self) -> float:
        """Uniform float in [0, 1) with 24 random bits (exactly representable as float32)."""
        return (self.u64() >> 40) * (1.0 / (1 << 24))

    def usize(self, n: int) -> int:
        """Uniform integer in [0, n), unbiased (Lemire's multiply-and-reject)."""
        n = operator.index(n)
        if n <= 0:
            raise RngError(f"Rng.usize({n}) is undefined: the upper bound must be >= 1")
        if n > _MASK64:
            raise RngError(f"Rng.usize bound must be <= 2**64, got {n}")
        m = self.u64() * n
        low = m & _MASK64
        if low < n:
            threshold = ((1 << 64) - n) % n
            while low < threshold:
                m = self.u64() * n
                low = m & _MASK64
        return m >> 64

    def range(self, low: int, high: int) -> int:
        """Uniform integer in [low, high) (high excluded, like ``torch.randint``)."""
        low, high = operator.index(low), operator.index(high)
        if low >= high:
            raise RngError(f"Rng.range requires low < high, got {low} >= {high}")
        return low + self.usize(high - low)

    randint = range

    def bernoulli(self, p: float) -> bool:
        """True with probability ``p`` (``f64() < p``: p <= 0 never, p >= 1 always)."""
        return self.f64() < p

    def normal(self, mean: float = 0.0, std: float = 1.0) -> float:
        """One Gaussian sample: Box-Muller from two draws, the second value discarded.

        Discarding it keeps ``normal`` free of a cached value: every
        call consumes exactly two draws, whatever came before."""
        u1 = 1.0 - self.f64()  # in (0, 1]: log is finite
        u2 = self.f64()
        return mean + std * (math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2))

    def shuffle(self, items: MutableSequence[Any] | torch.Tensor | np.ndarray) -> None:
        """Shuffle ``items`` in place (Fisher-Yates, from the end).

        A tensor or ndarray is shuffled along its first dimension (rows move whole), in the same
        order as a list of the same length from the same seed: ``items[:] = items[permutation]``.
        Immutable sequences (tuples, strings) are refused: there is nothing to shuffle in place.

        >>> t = torch.arange(6); Rng(1).shuffle(t); sorted(t.tolist()) == list(range(6))
        True
        """
        if isinstance(items, torch.Tensor | np.ndarray):
            # Swapping through ``items[i], items[j] = ...`` aliases views: the first assignment
            # overwrites the row the second reads. Gather by index instead.
            if items.ndim == 0:
                raise RngError("Rng.shuffle needs at least one dimension, got a 0-d array")
            order = self.permutation(len(items))
            if isinstance(items, torch.Tensor):
                index = torch.tensor(order, device=items.device)
                base = items._base if items._base is not None else items
                if items.requires_grad and not base.is_leaf:
                    # a computed tensor: its gradient must follow the rows to where they went
                    items.copy_(items[index])
                else:  # data, or a parameter (or its view), which autograd refuses in place
                    with torch.no_grad():
                        items.copy_(items[index])
            else:
                items[...] = items[order]
            return
        if not hasattr(type(items), "__setitem__"):
            raise RngError(
                "Rng.shuffle shuffles in place: it needs a list (or another mutable sequence), "
                f"a tensor or an ndarray, got {type(items).__name__} — shuffle list(items)"
            )
        for i in range(len(items) - 1, 0, -1):
            j = self.usize(i + 1)
            items[i], items[j] = items[j], items[i]

    def permutation(self, n: int) -> list[int]:
        """A shuffled ``list(range(n))``."""
        order = list(range(operator.index(n)))
        self.shuffle(order)
        return order

    def torch_generator(self, device: str | torch.device = "cpu") -> torch.Generator:
        """A ``torch.Generator`` seeded from this stream (one draw), for torch's sampling APIs.

        E.g. ``DataLoader(ds, shuffle=True, generator=rng.torch_generator())`` or
        ``torch.randperm(n, generator=...)``: reproducible without touching the global seed.
        """
        generator = torch.Generator(device=device)
        generator.manual_seed(self.u64())
        return generator

    def choice(self, items: Sequence[T]) -> T:
        """One element of a non-empty sequence, uniformly."""
        if not items:
            raise RngError("Rng.choice needs a non-empty sequence")
        return items[self.usize(len(items))]

    # -- state -------------------------------------------------------------------------------

    def clone(self) -> Rng:
        """An independent copy that continues from the same position."""
        return copy.deepcopy(self)

    def __copy__(self) -> Rng:
        return copy.deepcopy(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Rng:
        other = Rng.__new__(Rng)
        other._bits = np.random.PCG64()
        other._bits.state = self._bits.state
        other._buffer = list(self._buffer)
        return other

    def state_dict(self) -> dict[str, Any]:
        """The position in the stream, as plain Python data (JSON-serialisable)."""
        state = self._bits.state
        inner = state["state"]
        return {
            "bit_generator": state["bit_generator"],
            "state": int(inner["state"]),
            "inc": int(inner["inc"]),
            "has_uint32": int(state["has_uint32"]),
            "uinteger": int(state["uinteger"]),
            "buffer": list(self._buffer),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a position saved by :meth:`state_dict`; unchanged if ``state`` is invalid."""
        if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
            found = state.get("bit_generator") if isinstance(state, dict) else state
            raise RngError(f"not an Rng state: expected bit_generator 'PCG64', got {found!r}")
        try:
            bits: dict[str, Any] = {
                "bit_generator": "PCG64",
                "state": {
                    "state": _bounded(state["state"], 1 << 128),
                    "inc": _bounded(state["inc"], 1 << 128),
                },
                "has_uint32": _bounded(state["has_uint32"], 2),
                "uinteger": _bounded(state["uinteger"], 1 << 32),
            }
            buffer = [_bounded(x, 1 << 64) for x in state["buffer"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise RngError(f"malformed Rng state ({exc}) — save it with Rng.state_dict()") from None
        if len(buffer) > _BUFFER:
            raise RngError(
                f"malformed Rng state: {len(buffer)} buffered values, at most {_BUFFER} are possible"
            )
        # Validated in full above, so the two assignments cannot leave a half-loaded generator.
        self._bits.state = bits  # type: ignore[assignment]  # numpy types it as a private TypedDict
        self._buffer = buffer

    def __repr__(self) -> str:
        return f"Rng(<PCG64 stream, {len(self._buffer)} buffered>)"
