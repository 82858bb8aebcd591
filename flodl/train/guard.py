"""The convergence guard: watch replica divergence at each averaging and stop cadence growth
when it trends up.

Signal per averaging = the largest per-rank relative divergence ``‖θ_r − θ̄‖ / ‖θ̄‖``. Three strictly
rising values with the latest above the threshold mean the replicas drift apart faster with each
window: the guard answers :attr:`GuardAction.SUPPRESS_GROWTH` (the Async overshoot stops growing).
Single spikes and non-monotone sequences are noise: :attr:`GuardAction.STABLE`.

Parity decision (docs/ddp.md): the guard never shrinks the anchor ("NudgeDown" is not emitted):
shrinking it would fight El Che's own calibration, and the Rust flodl's code never does it either.

>>> g = ConvergenceGuard(threshold=0.05)
>>> [g.observe([d]).name for d in (0.06, 0.07, 0.08)]
['STABLE', 'STABLE', 'SUPPRESS_GROWTH']
"""

from __future__ import annotations

import enum
from collections import deque

HISTORY = 5


class GuardAction(enum.Enum):
    STABLE = "stable"
    SUPPRESS_GROWTH = "suppress_growth"


class ConvergenceGuard:
    """Trend detector over the last :data:`HISTORY` divergence signals."""

    def __init__(self, threshold: float = 0.05, *, enabled: bool = True) -> None:
        self.threshold = threshold
        self.enabled = enabled
        self.history: deque[float] = deque(maxlen=HISTORY)

    def observe(self, divergences: list[float], *, sync_policy: bool = False) -> GuardAction:
        """Record one averaging's per-rank divergences (missing ranks count as 0)."""
        if not self.enabled or sync_policy:
            return GuardAction.STABLE
        self.history.append(max(divergences, default=0.0))
        if len(self.history) < 3:
            return GuardAction.STABLE
        a, b, c = list(self.history)[-3:]
        if a < b < c and c > self.threshold:
            return GuardAction.SUPPRESS_GROWTH
        return GuardAction.STABLE
