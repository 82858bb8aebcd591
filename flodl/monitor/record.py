"""What the monitor keeps per epoch, and its JSON form (shared by the live stream and archives)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from flodl.monitor.resources import ResourceSample

__all__ = ["EpochRecord"]


@dataclass(frozen=True)
class EpochRecord:
    """One logged epoch. ``epoch`` is zero-based as passed to ``log``; ``elapsed`` is the wall-clock
    time since the monitor started; ``eta`` the estimated seconds left (None when done/unknown)."""

    epoch: int
    total: int
    duration: float
    elapsed: float
    metrics: dict[str, float]
    resources: ResourceSample = field(default_factory=ResourceSample)
    eta: float | None = None
    ranks: dict[int, ResourceSample] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: non-finite metric values become ``null`` (JSON has no NaN), and
        ``nonfinite`` (only when there are any) names them: ``{"loss": "NaN"}``, ``"inf"``,
        ``"-inf"``."""
        out: dict[str, Any] = {
            "epoch": self.epoch + 1,
            "total": self.total,
            "duration": round(self.duration, 6),
            "elapsed": round(self.elapsed, 3),
            "eta": None if self.eta is None else round(self.eta, 1),
            "metrics": {k: (v if math.isfinite(v) else None) for k, v in self.metrics.items()},
            "resources": self.resources.to_json(),
        }
        # which nulls were NaN or infinite (the page shows them so, never the last finite value)
        nonfinite = {k: _nonfinite(v) for k, v in self.metrics.items() if not math.isfinite(v)}
        if nonfinite:
            out["nonfinite"] = nonfinite
        if self.ranks:
            out["ranks"] = {str(r): s.to_json() for r, s in sorted(self.ranks.items())}
        return out


def _nonfinite(v: float) -> str:
    return "NaN" if math.isnan(v) else "inf" if v > 0 else "-inf"
