"""Timing trends and trend files: per-node forward times per epoch, CSV exports, a text log.

With profiling on (``enable_profiling()``), ``end_step()`` collects the last forward's time of
every tagged node (``collect_timings``) and ``end_epoch()`` turns each buffer into its mean, one
value per epoch (``flush_timings``): ``timing_trend("encoder")`` is then a :class:`Trend` of
seconds per forward, epoch by epoch, with the same questions as a metric's trend (is a node
getting slower?). Names of nested graphs' nodes are dotted paths (``"encoder.attn"``).

Files: ``export_trends`` / ``export_timing_trends`` write CSV (``epoch`` then one column per
name; a value stays on the epoch it was flushed in, empty cells where a name has none),
``plot_timings_html`` a self-contained page of the timing curves (ms), ``write_log`` a plain-text
log of the epoch history with per-epoch durations and the ETA.

>>> import torch, flodl as fl
>>> from torch import nn
>>> g = fl.FlowBuilder(nn.Linear(4, 4)).tag("enc").through(nn.ReLU()).tag("act").build()
>>> g.enable_profiling()
>>> for epoch in range(2):
...     for step in range(3):
...         _ = g(torch.ones(2, 4)); g.end_step()
...     g.end_epoch()
>>> len(g.timing_trend("enc")), g.timing_trend("enc").last() > 0
(2, True)
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flodl.errors import FlodlError
from flodl.files import open_atomic, write_text
from flodl.graph.observe import Metrics
from flodl.graph.trend import Trend, TrendGroup

if TYPE_CHECKING:
    from flodl.graph.graph import Graph
    from flodl.graph.profile import Profile


def _profile_names(profile: Profile, prefix: str = "") -> list[tuple[str, float]]:
    """(name, seconds) of every tagged node (first tag), nested graphs as dotted paths."""
    out = [(prefix + n.tag, n.seconds) for n in profile.nodes if n.tag]
    for label, child in profile.children.items():
        out += _profile_names(child, f"{prefix}{label}.")
    return out


class TimingMethods:
    """``collect_timings``, ``flush_timings``, ``timing_trend(s)`` and the trend files."""

    def _timing(self) -> Metrics:
        return self.__dict__.setdefault("_timing_metrics", Metrics())

    def collect_timings(self, *tags: str) -> dict[str, float]:
        """Buffer the last profiled forward's time (seconds) of ``tags`` — every tagged node of
        the tree when none are given (``end_step`` does this while profiling). Returns what was
        buffered; nothing without a profile. A name the profile does not know raises."""
        graph: Graph = self  # type: ignore[assignment]
        profile = graph.profile()
        if profile is None:
            return {}
        if tags:
            found = [(t, profile.timing(t)) for t in graph._expand(tags)]
        else:
            found = _profile_names(profile)
        kept = {name: seconds for name, seconds in found if seconds > 0}
        for name, seconds in kept.items():
            self._timing().add(name, [seconds])
        return kept

    def flush_timings(self, *tags: str) -> None:
        """Close the timing buffers (``tags``, or all): each becomes its mean, one per epoch.
        Epochs are counted as for metrics (see ``flush``): a tag that already has a value in
        the latest epoch starts a new one, tags flushed by name add to the latest epoch, and
        ``flush_timings()`` with no tags (``end_epoch()``) ends it."""
        metrics = self._timing()
        metrics.flush(list(tags) if tags else list(metrics.buffers), close=not tags)

    def timing_trend(self, tag: str) -> Trend:
        """Seconds per forward of node ``tag``, one value per epoch (empty before a flush).

        A name that is neither a tag of the tree nor already timed raises."""
        metrics = self._timing()
        if tag not in metrics.history and tag not in metrics.buffers:
            graph: Graph = self  # type: ignore[assignment]
            graph.validate_path(tag)  # raises PathError for a name that names nothing
        return Trend(tag, tuple(metrics.history.get(tag, ())))

    def timing_trends(self, *tags: str) -> TrendGroup:
        """A :class:`TrendGroup` of :meth:`timing_trend` (tag groups expand)."""
        graph: Graph = self  # type: ignore[assignment]
        return TrendGroup(self.timing_trend(t) for t in graph._expand(tags))

    def reset_timing_trend(self, *tags: str) -> None:
        """Forget timing history: of ``tags``, or all of it."""
        metrics = self._timing()
        for tag in tags or list(metrics.history):
            metrics.forget(tag)

    # ------------------------------------------------------------------ files
    def _series(self, tags: Any, timing: bool) -> dict[str, dict[int, float]]:
        """Name -> {zero-based epoch: value}: each value on the epoch it was flushed in."""
        graph: Graph = self  # type: ignore[assignment]
        if timing:
            metrics = self._timing()
            names = sorted(metrics.history) if not tags else graph._expand(tuple(tags))
            if tags:
                for name in names:
                    self.timing_trend(name)  # a typo raises rather than exporting nothing
            return {n: metrics.by_epoch(n) for n in names if metrics.history.get(n)}
        if not tags:
            return {k: v for k, v in sorted(graph._epoch_histories().items()) if v}
        out = {}
        for name in graph._expand(tuple(tags)):
            graph.trend(name)  # a typo raises rather than exporting nothing
            owner, local = graph._split(name)
            out[name] = owner._metrics.by_epoch(local)
        return out

    def export_trends(
        self, path: str | os.PathLike[str], tags: list[str] | tuple[str, ...] | None = None
    ) -> Path:
        """Epoch history as CSV: ``epoch`` (1-based), then one column per metric (``tags``:
        names, groups or paths; default every flushed metric of the tree). One row per epoch in
        which one of them was flushed; a cell is empty where its metric has no value for that
        epoch (a validation metric flushed every other epoch). Raises when there is nothing to
        export."""
        return _write_csv(path, self._series(tags, timing=False), "export_trends", "flush()")

    def export_timing_trends(
        self, path: str | os.PathLike[str], tags: list[str] | tuple[str, ...] | None = None
    ) -> Path:
        """Timing history (seconds per forward, per epoch) as CSV, like :meth:`export_trends`."""
        return _write_csv(
            path, self._series(tags, timing=True), "export_timing_trends", "flush_timings()"
        )

    def plot_timings_html(
        self, path: str | os.PathLike[str], tags: list[str] | tuple[str, ...] | None = None
    ) -> Path:
        """A self-contained page of timing curves (milliseconds per forward, per epoch)."""
        from flodl.graph.plot import curves_page

        series = self._series(tags, timing=True)
        if not series:
            raise FlodlError(
                "plot_timings_html: no timing data — enable_profiling(), end_step() after each "
                "forward and end_epoch() (or flush_timings()) first"
            )
        graph: Graph = self  # type: ignore[assignment]
        ms = {name: [v * 1e3 for v in values.values()] for name, values in series.items()}
        return write_text(path, curves_page(f"{graph.label or 'graph'} — timing trends (ms)", ms))

    def write_log(
        self,
        path: str | os.PathLike[str],
        total_epochs: int = 0,
        tags: list[str] | tuple[str, ...] | None = None,
    ) -> Path:
        """A plain-text training log: ``epoch N  name=value ...  [duration  ETA ...]`` per epoch
        of the epoch history (``tags``, default every metric of the tree; a metric appears on
        the epochs it was flushed in), durations from this graph's epoch times (``flush_times``);
        ``total_epochs`` > 0 adds the ETA. Raises when nothing was flushed."""
        from flodl.graph.profile import format_duration

        series = self._series(tags, timing=False)
        if not series:
            raise FlodlError("write_log: no epoch data to log — record metrics and flush() first")
        graph: Graph = self  # type: ignore[assignment]
        times = graph.flush_times
        lines = ["# flodl training log"]
        for i in _epochs(series):
            parts = [f"epoch {i + 1:3d}"]
            parts += [f"{name}={_metric(v[i])}" for name, v in series.items() if i in v]
            line = "  ".join(parts)
            if i < len(times):
                duration = times[i] - (times[i - 1] if i else 0.0)
                line += f"  [{format_duration(duration)}"
                if total_epochs > 0 and i + 1 < total_epochs:
                    left = times[i] / (i + 1) * (total_epochs - i - 1)
                    line += f"  ETA {format_duration(left)}"
                line += "]"
            lines.append(line)
        return write_text(path, "\n".join(lines) + "\n")


def _epochs(series: dict[str, dict[int, float]]) -> list[int]:
    """The epochs in which any of ``series`` has a value, in order."""
    return sorted(set().union(*series.values()))


def _write_csv(
    path: str | os.PathLike[str], series: dict[str, dict[int, float]], what: str, hint: str
) -> Path:
    if not series:
        raise FlodlError(f"{what}: no epoch data to export — call {hint} first")
    target = Path(path)
    with open_atomic(target, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["epoch", *series])
        for i in _epochs(series):
            cells = [_cell(v[i]) if i in v else "" for v in series.values()]
            writer.writerow([i + 1, *cells])
    return target


def _metric(value: float) -> str:
    """``0.4321``, ``12.5000``, ``1.234e-05``: four decimals, scientific when tiny or huge."""
    if math.isfinite(value) and value != 0 and not 1e-3 <= abs(value) < 1e5:
        return f"{value:.3e}"
    return f"{value:.4f}"


def _cell(value: float) -> str:
    return repr(value) if math.isfinite(value) else str(value)
