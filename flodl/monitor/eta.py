"""Adaptive time-to-finish estimate from the wall-clock spacing of epoch logs.

The Rust original divides the whole elapsed time by the epochs done, so a slow first epoch (data
loading, cudnn autotuning, compilation) inflates the estimate for the whole run. Here the first
interval, which carries that setup, is used alone only until a second interval exists; after that
the rate is an exponential moving average of the later intervals, so the estimate follows changes
in speed (a larger validation every few epochs, a throttled GPU) without jumping at every epoch.
"""

from __future__ import annotations

__all__ = ["EtaEstimator"]


class EtaEstimator:
    """Seconds left in a run of ``total`` epochs, updated at each logged epoch.

    ``start_epoch`` is the first epoch this run trains (non-zero when resuming), ``started_at`` the
    clock reading when the run began (the same clock as the ``now`` passed to :meth:`update`).

    >>> eta = EtaEstimator(total=10, started_at=0.0)
    >>> eta.update(0, now=5.0)  # first epoch took 5 s (setup included): 9 left at 5 s each
    45.0
    >>> eta.update(1, now=7.0)  # steady state is 2 s per epoch; the setup interval is dropped
    16.0
    >>> eta.update(9, now=23.0) is None  # done
    True
    """

    def __init__(
        self, total: int, *, started_at: float, start_epoch: int = 0, smoothing: float = 0.3
    ) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.total = total
        self.smoothing = smoothing
        self._last_time = started_at
        self._last_epoch = start_epoch - 1
        self._rate: float | None = None  # seconds per epoch
        self._intervals = 0

    @property
    def seconds_per_epoch(self) -> float | None:
        """The current estimate of one epoch's wall-clock time, or None before the first log."""
        return self._rate

    def update(self, epoch: int, now: float) -> float | None:
        """Record that zero-based ``epoch`` finished at ``now``; return the seconds left, or None
        when the run is done (or the epoch did not move forward, so nothing new is known)."""
        covered = epoch - self._last_epoch
        if covered > 0:
            rate = max(now - self._last_time, 0.0) / covered
            self._intervals += 1
            if self._intervals <= 2 or self._rate is None:
                # the first interval alone, then the second replaces it (it holds the setup time)
                self._rate = rate
            else:
                self._rate += self.smoothing * (rate - self._rate)
            self._last_time, self._last_epoch = now, epoch
        remaining = self.total - (epoch + 1)
        if remaining <= 0 or self._rate is None:
            return None
        return self._rate * remaining
