"""``Trend``: questions about one metric's per-epoch history (is it improving, stalled, converged?).

The math is the Rust flodl's, so a ported stopping rule fires at the same epoch: ``slope`` is the
ordinary-least-squares slope over x = 0..n-1, ``converged`` uses the population variance.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def _window(values: Sequence[float], window: int) -> Sequence[float]:
    if window < 0:
        raise ValueError(f"a trend window is a count of epochs >= 0 (0 = all), got {window}")
    return values if window == 0 else values[-window:]


@dataclass(frozen=True)
class Trend:
    """A metric's per-epoch values (oldest first) and the questions training loops ask of them.

    >>> import flodl as fl
    >>> t = fl.Trend("loss", (10.0, 8.0, 6.0, 4.0, 2.0))
    >>> t.slope(), t.improving(), t.stalled(tol=0.1), t.last(), t.last(2)
    (-2.0, True, False, 2.0, [4.0, 2.0])
    """

    name: str
    values: tuple[float, ...] = ()

    def __len__(self) -> int:
        return len(self.values)

    def is_empty(self) -> bool:
        return not self.values

    def last(self, n: int | None = None) -> float | list[float]:
        """The latest value (0.0 when empty), or with ``n`` the last ``n`` values as a list."""
        if n is None:
            return self.values[-1] if self.values else 0.0
        if n < 0:
            raise ValueError(f"last(n): n must be >= 0, got {n}")
        return list(self.values[-n:]) if n else []

    def mean(self) -> float:
        return sum(self.values) / len(self.values) if self.values else 0.0

    def min(self) -> float:
        return min(self.values, default=math.inf)

    def max(self) -> float:
        return max(self.values, default=-math.inf)

    def slope(self, window: int = 0) -> float:
        """OLS slope per epoch over the last ``window`` values (0 = all); 0.0 below 2 points."""
        data = _window(self.values, window)
        n = len(data)
        if n < 2:
            return 0.0
        sx = n * (n - 1) / 2
        sxx = (n - 1) * n * (2 * n - 1) / 6
        sy = sum(data)
        sxy = sum(i * y for i, y in enumerate(data))
        denom = n * sxx - sx * sx
        if abs(denom) < 1e-15:
            return 0.0
        return (n * sxy - sx * sy) / denom

    def stalled(self, window: int = 0, tol: float = 1e-3) -> bool:
        """``|slope(window)| < tol``. Fewer than 2 points count as stalled (slope 0), so a
        fresh run would stop at once: guard early stopping with ``len(trend) >= window``."""
        return abs(self.slope(window)) < tol

    def improving(self, window: int = 0) -> bool:
        """The slope is negative (for a loss: going down)."""
        return self.slope(window) < 0

    def converged(self, window: int = 0, tol: float = 1e-3) -> bool:
        """The population variance over the window is below ``tol`` (needs 2 points)."""
        data = _window(self.values, window)
        if len(data) < 2:
            return False
        mean = sum(data) / len(data)
        return sum((v - mean) ** 2 for v in data) / len(data) < tol


class TrendGroup(tuple[Trend, ...]):
    """Several trends queried together (``graph.trends("loss", "heads")`` expands tag groups).

    >>> import flodl as fl
    >>> g = fl.TrendGroup([fl.Trend("a", (3.0, 1.0)), fl.Trend("b", (0.0, 1.0))])
    >>> g.slopes(), g.mean_slope(), g.all_improving(), g.any_improving()
    ([-2.0, 1.0], -0.5, False, True)
    """

    def __new__(cls, trends: Iterable[Trend] = ()) -> TrendGroup:
        return super().__new__(cls, tuple(trends))

    @property
    def names(self) -> list[str]:
        return [t.name for t in self]

    def is_empty(self) -> bool:
        return not self

    def slopes(self, window: int = 0) -> list[float]:
        return [t.slope(window) for t in self]

    def mean_slope(self, window: int = 0) -> float:
        return sum(self.slopes(window)) / len(self) if self else 0.0

    def all_improving(self, window: int = 0) -> bool:
        return bool(self) and all(t.improving(window) for t in self)

    def any_improving(self, window: int = 0) -> bool:
        return any(t.improving(window) for t in self)

    def all_stalled(self, window: int = 0, tol: float = 1e-3) -> bool:
        return bool(self) and all(t.stalled(window, tol) for t in self)

    def any_stalled(self, window: int = 0, tol: float = 1e-3) -> bool:
        return any(t.stalled(window, tol) for t in self)

    def all_converged(self, window: int = 0, tol: float = 1e-3) -> bool:
        return bool(self) and all(t.converged(window, tol) for t in self)

    def any_converged(self, window: int = 0, tol: float = 1e-3) -> bool:
        return any(t.converged(window, tol) for t in self)
