"""El Che: how many batches each device runs between two synchronisations.

"The column marches at the slowest one's pace": the slowest device processes ``anchor`` batches
per synchronisation window and faster devices proportionally more, so that every device reaches
the sync point at about the same wall time. The anchor itself grows when synchronising costs too
much compared to computing (``overhead_target``) and decays slowly when it is cheap.

A pure calculator: no clocks, no I/O, no torch. The runtime feeds it measured times, without
each rank's first batch: that one is a warm-up (a device's lazy start, cuDNN's autotuning, a
compiled model's compilation), often worth hundreds of batches, and timed it made the first
calibration take a rank for that much slower (see :func:`steady_wall_ms`).

>>> el = ElChe(world=2, anchor=10, overhead_target=0.5)
>>> el.batch_counts
[10, 10]
>>> el.report_timing(wall_ms=[500.0, 1000.0], actual_batches=[10, 10], sync_ms=0.0)
>>> el.batch_counts  # rank 0 is twice as fast: it runs twice the batches
[20, 10]
"""

from __future__ import annotations

import math

from flodl.train.config import ANCHOR, MAX_ANCHOR, OVERHEAD_TARGET
from flodl.train.errors import TrainerConfigError

_DEAD_ZONE = 0.10  # a count changes only when the new target differs by more than 10 %


def steady_wall_ms(timed_ms: float, timed: int, batches: int) -> float:
    """A window's compute time at the pace of its timed batches: ``timed_ms`` over ``timed`` of
    its ``batches`` (the others warm-ups), scaled to all of them; 0 when none was timed, which
    :meth:`ElChe.report_timing` skips (the rank keeps its last measurement).

    >>> steady_wall_ms(90.0, 9, 10)  # 10 batches, the first a warm-up: 10 ms each
    100.0
    >>> steady_wall_ms(0.0, 0, 1)  # a window of only the warm-up
    0.0
    """
    return timed_ms * batches / timed if timed > 0 else 0.0


class ElChe:
    """Per-rank batch counts between synchronisations, calibrated from measured timings.

    Args:
        world: number of ranks (>= 2).
        anchor: batches the slowest rank runs per window; also the floor of the auto-decay.
        overhead_target: tolerated sync cost as a fraction of compute time, clamped to [0.01, 0.50].
        max_anchor: upper bound of the anchor (staleness cap), at least 1.
        max_batch_diff: after the first calibration, a count moves by at most this much per report.
    """

    def __init__(
        self,
        world: int,
        anchor: int = ANCHOR,
        *,
        overhead_target: float = OVERHEAD_TARGET,
        max_anchor: int = MAX_ANCHOR,
        max_batch_diff: int | None = None,
    ) -> None:
        if world < 2:
            raise TrainerConfigError(f"El Che requires at least 2 devices, got world={world}")
        if anchor < 1:
            raise TrainerConfigError(f"El Che anchor must be >= 1, got {anchor}")
        if max_batch_diff is not None and max_batch_diff < 0:
            raise TrainerConfigError(f"max_batch_diff must be >= 0, got {max_batch_diff}")
        self.world = world
        self._anchor = anchor
        self.min_anchor = anchor
        self.max_anchor = max_anchor
        self.overhead_target = overhead_target
        self.max_batch_diff = max_batch_diff
        self.batch_counts: list[int] = [anchor] * world
        self.ms_per_batch: list[float] = [0.0] * world
        self.calibrated = False
        self.set_overhead_target(overhead_target)
        self.set_max_anchor(max_anchor)

    # -- configuration -------------------------------------------------------------------------

    def set_overhead_target(self, target: float) -> None:
        self.overhead_target = min(max(float(target), 0.01), 0.50)

    def set_max_anchor(self, max_anchor: int) -> None:
        """Cap the anchor; a cap below the initial anchor pulls both down to it."""
        self.max_anchor = max(int(max_anchor), 1)
        if self.min_anchor > self.max_anchor:
            self.min_anchor = self.max_anchor
        if self._anchor > self.max_anchor:
            self._anchor = self.max_anchor
            self.batch_counts = [self._anchor] * self.world

    def with_speed_ratio(self, slow_rank: int, ratio: float) -> ElChe:
        """Seed the counts before any timing: ``slow_rank`` runs ``anchor``, the others ``ratio``x.

        >>> ElChe(2, 10).with_speed_ratio(1, 2.3).batch_counts
        [23, 10]
        """
        if not 0 <= slow_rank < self.world:
            raise TrainerConfigError(
                f"speed_hint: slow_rank {slow_rank} is not a rank of this run "
                f"(ranks 0..{self.world - 1}) — name the slow device's rank"
            )
        if not 0 < ratio < math.inf:
            raise TrainerConfigError(
                f"speed_hint: ratio must be a finite number > 0 (how many times faster the other "
                f"ranks are), got {ratio}"
            )
        ratio = max(float(ratio), 1.0)
        fast = max(_round_half_away(self._anchor * ratio), 1)
        self.batch_counts = [self._anchor if r == slow_rank else fast for r in range(self.world)]
        return self

    # -- queries -------------------------------------------------------------------------------

    @property
    def anchor(self) -> int:
        return self._anchor

    def batches(self, rank: int) -> int:
        return self.batch_counts[rank]

    @property
    def total_batches(self) -> int:
        return sum(self.batch_counts)

    @property
    def has_speed_hint(self) -> bool:
        return len(set(self.batch_counts)) > 1

    def anchor_wall_ms(self) -> float:
        """Wall time the slowest rank needs for one window (0 until calibrated)."""
        return self._anchor * max(self.ms_per_batch) if self.calibrated else 0.0

    # -- calibration ---------------------------------------------------------------------------

    def report_timing(
        self, wall_ms: list[float], actual_batches: list[int], sync_ms: float
    ) -> None:
        """Fold one synchronisation window's measurements into the counts.

        ``wall_ms[r]`` is rank r's compute time since the last sync and ``actual_batches[r]`` the
        batches it really ran (not the plan: a fast rank may run extra batches while waiting, and
        dividing by the plan would invert the ratio). ``sync_ms`` is what the sync itself cost.
        """
        if len(wall_ms) != self.world or len(actual_batches) != self.world:
            raise TrainerConfigError(
                f"report_timing needs one value per rank (world={self.world}), "
                f"got {len(wall_ms)} wall times and {len(actual_batches)} batch counts"
            )
        for r, (wall, n) in enumerate(zip(wall_ms, actual_batches, strict=True)):
            if n <= 0 or wall <= 0:
                continue
            new = wall / n
            old = self.ms_per_batch[r]
            if self.calibrated and old > 0:
                # Big shifts are adopted within one or two reports; jitter is mostly ignored.
                alpha = min(max(abs(new - old) / old, 0.1), 0.8)
                self.ms_per_batch[r] = alpha * new + (1 - alpha) * old
            else:
                self.ms_per_batch[r] = new
        slow_ms = max(self.ms_per_batch)
        if slow_ms <= 0:
            return
        compute_ms = max(wall_ms)
        if compute_ms > 0 and sync_ms > 0:
            overhead = sync_ms / compute_ms
            if overhead > self.overhead_target:
                grown = math.ceil(self._anchor * overhead / self.overhead_target)
                self._anchor = min(max(grown, self.min_anchor), self.max_anchor)
            elif overhead < self.overhead_target / 2 and self._anchor > self.min_anchor:
                self._anchor -= 1
        self._recompute_counts(slow_ms)
        self.calibrated = True

    def _recompute_counts(self, slow_ms: float) -> None:
        first = not self.calibrated
        counts = []
        for current, ms in zip(self.batch_counts, self.ms_per_batch, strict=True):
            if ms <= 0 or abs(ms - slow_ms) < 1e-6:
                target = self._anchor
            else:
                target = max(_round_half_away(self._anchor * slow_ms / ms), 1)
            if not first and abs(target - current) <= _DEAD_ZONE * current:
                counts.append(current)
                continue
            if not first and self.max_batch_diff is not None:
                d = self.max_batch_diff
                target = min(target, current + d) if target > current else max(target, current - d)
                target = max(target, 1)
            counts.append(target)
        self.batch_counts = counts

    def clamp_total(self, limit: int) -> list[int]:
        """Counts scaled down to sum to ``limit`` (near an epoch's end), proportions kept.

        Every rank keeps at least one batch, so ``limit`` must be at least ``world``.

        >>> ElChe(2, 10).with_speed_ratio(1, 2.0).clamp_total(15)
        [10, 5]
        """
        if limit < self.world:
            raise TrainerConfigError(
                f"clamp_total: {limit} batches cannot give each of {self.world} ranks one"
            )
        total = self.total_batches
        if total <= limit:
            return list(self.batch_counts)
        scale = limit / total
        counts = [max(math.floor(c * scale), 1) for c in self.batch_counts]
        while sum(counts) > limit:  # the floor of 1 overshot: trim the largest
            counts[counts.index(max(counts))] -= 1
        r = 0
        while sum(counts) < limit:
            counts[r % self.world] += 1
            r += 1
        return counts

    def window(self, remaining: int) -> list[int] | None:
        """Each rank's batches for the next window when ``remaining`` batches are left in the
        epoch: the counts, scaled down near the end; None when fewer batches than ranks remain
        (every rank needs one per window, so the epoch ends there).

        >>> el = ElChe(2, 10).with_speed_ratio(1, 2.0)
        >>> el.window(100), el.window(6), el.window(1)
        ([20, 10], [4, 2], None)
        """
        if remaining < self.world:
            return None
        return self.clamp_total(remaining)

    def nudge_anchor_down(self, factor: float) -> None:
        """Shrink the anchor by ``factor`` in [0.1, 1] (never grows it; may go below min_anchor)."""
        factor = min(max(factor, 0.1), 1.0)
        self._anchor = min(max(math.ceil(self._anchor * factor), 1), self._anchor)
        slow_ms = max(self.ms_per_batch)
        if slow_ms > 0:
            self.batch_counts = [
                self._anchor
                if ms <= 0 or abs(ms - slow_ms) < 1e-6
                else max(_round_half_away(self._anchor * slow_ms / ms), 1)
                for ms in self.ms_per_batch
            ]
        else:
            self.batch_counts = [self._anchor] * self.world


def _round_half_away(x: float) -> int:
    """Round half away from zero (Rust's ``f64::round``), so window counts match the Rust flodl's;
    Python's ``round()`` rounds half to even."""
    return math.floor(x + 0.5) if x >= 0 else math.ceil(x - 0.5)
