"""``Timeline``: a high-frequency record of CPU, RAM and GPU use, plus training events.

A background thread samples the machine every ``poll_interval_ms`` (100 ms by default): CPU
utilisation, RAM in use, and per GPU (through NVML, ``pip install flodl[gpu]``, when it loads)
utilisation, device memory in use and, once torch has initialised CUDA, this process's allocated
bytes. Training events are markers on the same clock: the Trainer emits them, in Builder and
Graph mode, into every started Timeline of the process; :meth:`Timeline.event` adds your own.

Event kinds flodl emits, and their keys (every event also has ``t`` in ms since the timeline was
created and ``rank``, None outside a multi-rank run):

===================  ============================================================================
kind                 keys
===================  ============================================================================
``sync_start``       ``mode`` (``"builder"`` or ``"graph"``): a parameter/gradient averaging begins
``sync_end``         ``mode``, ``duration_ms``: it ended (the wait for slower ranks included)
``anchor_changed``   ``from``, ``to``: El Che changed the slowest rank's batches per window
``checkpoint_saved`` ``path``; ``version`` (a Trainer checkpoint) or ``step`` (a Graph set up by
                     ``Trainer.setup``): a checkpoint file is completely written (a
                     background save: when its writer finished)
``epoch_end``        ``epoch`` (zero-based), ``loss``: an epoch was aggregated (Builder mode) or a
                     ``model.epoch(e)`` iteration finished (Graph mode)
===================  ============================================================================

In a Builder run with spawned ranks the ranks' events travel to the training process with each
epoch's metrics (so they appear at the end of each epoch, stamped with the time they happened);
what a rank emits after its last epoch report (the final epoch's checkpoint, written before the
rank reports that it is done) travels with the rank's exit and arrives before ``join()`` returns.
``checkpoint_saved`` comes from ``flodl.checkpoint.listeners``: while any timeline (or a rank's
forwarder) listens, every checkpoint file flodl writes to a path is one event.

Exports: :meth:`save_json` (samples and events), :meth:`save_csv` (one row per sample),
:meth:`save_html` (a self-contained page: opens offline, no server, no CDN). Event data are JSON
values, and numbers may be NaN or infinite (an ``epoch_end`` whose loss diverged, your own
events alike): the events keep them, and both JSON exports write them as ``null``, since JSON has
neither. Idle GPUs are found
by :meth:`idle_gaps`; :meth:`summary` gives the aggregate numbers.

The events and aggregates are those of the Rust flodl's ``Timeline``, so timelines of both compare;
an event is a kind string plus keyword data, and the sampler reuses the monitor's resource
readers.

>>> import flodl as fl
>>> tl = fl.monitor.Timeline(poll_interval_ms=10, gpu=False)
>>> _ = tl.start()
>>> _ = tl.event("sync_start", mode="builder")
>>> _ = tl.event("sync_end", mode="builder", duration_ms=4.0)
>>> tl.stop()
>>> s = tl.summary()
>>> s.sync_count, s.avg_sync_ms, s.sample_count > 0
(1, 4.0, True)
"""

from __future__ import annotations

import collections
import contextlib
import csv
import json
import math
import numbers
import operator
import os
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from flodl.checkpoint import listeners as checkpoint_listeners
from flodl.files import open_atomic, write_text
from flodl.log import current_rank
from flodl.monitor.errors import MonitorError
from flodl.monitor.page import finite

__all__ = [
    "GpuTimelineSample",
    "Timeline",
    "TimelineEvent",
    "TimelineSample",
    "TimelineSummary",
    "emit",
]

_KIND = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


@dataclass(frozen=True)
class GpuTimelineSample:
    """One GPU in one sample: utilisation (0-100), device memory used (all processes), this
    process's allocated bytes (torch), total memory. None: could not be read."""

    device: int
    util_pct: int | None = None
    vram_used: int | None = None
    vram_allocated: int | None = None
    vram_total: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "d": self.device,
            "u": self.util_pct,
            "vu": self.vram_used,
            "va": self.vram_allocated,
            "vt": self.vram_total,
        }


@dataclass(frozen=True)
class TimelineSample:
    """The machine at ``t_ms`` (ms since the timeline was created)."""

    t_ms: float
    cpu_pct: float
    ram_used: int
    ram_total: int
    gpus: tuple[GpuTimelineSample, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "t": round(self.t_ms, 1),
            "cpu": round(self.cpu_pct, 1),
            "ram": [self.ram_used, self.ram_total],
            "gpus": [g.to_json() for g in self.gpus],
        }


@dataclass(frozen=True)
class TimelineEvent:
    """A training event at ``t_ms``: its ``kind``, the ``rank`` that emitted it and ``data``."""

    t_ms: float
    kind: str
    rank: int | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"t": round(self.t_ms, 3), "kind": self.kind, "rank": self.rank, "data": self.data}


@dataclass(frozen=True)
class TimelineSummary:
    """Aggregates of a timeline (``str()`` gives a short report)."""

    total_ms: float
    sample_count: int
    event_count: int
    cpu_mean_pct: float
    ram_peak: int
    gpu_idle_pct: dict[int, float]  # per device: share of samples under 5% utilisation
    sync_count: int
    avg_sync_ms: float
    anchor_change_count: int
    checkpoint_count: int
    epoch_count: int
    kinds: dict[str, int]

    def __str__(self) -> str:
        lines = [
            f"timeline: {self.total_ms / 1e3:.1f} s, {self.sample_count} samples, "
            f"{self.event_count} events",
            f"  CPU mean {self.cpu_mean_pct:.0f}%, RAM peak {self.ram_peak / 1e9:.2f} GB",
        ]
        for device, pct in self.gpu_idle_pct.items():
            lines.append(f"  GPU{device} idle {pct:.0f}% of samples")
        if self.sync_count:
            lines.append(f"  {self.sync_count} syncs, {self.avg_sync_ms:.1f} ms on average")
        if self.anchor_change_count:
            lines.append(f"  {self.anchor_change_count} anchor changes")
        return "\n".join(lines)


def _check_event(kind: Any, data: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(kind, str) or not _KIND.match(kind):
        raise MonitorError(
            f"Timeline.event: kind must be lower_snake_case (a letter, then letters, digits, _), "
            f"got {kind!r}"
        )
    try:
        # NaN and infinities pass, as in flodl's own events (a diverged loss); exports null them
        return json.loads(json.dumps(data))
    except (TypeError, ValueError) as err:
        raise MonitorError(
            f"Timeline.event({kind!r}): data must be JSON values (numbers, strings, lists, "
            f"dicts): {err}"
        ) from None


def _ms(value: Any) -> float | None:
    """A finite number of milliseconds, or None (missing, text, bool, beyond a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        ms = float(value)
    except OverflowError:
        return None
    return ms if math.isfinite(ms) else None


class _Reader:
    """Reads one sample: CPU from /proc deltas (psutil), RAM, GPUs through NVML and torch."""

    def __init__(self, gpu: bool) -> None:
        self._prev = psutil.cpu_times()
        self._nvml: Any = None
        if gpu:
            with contextlib.suppress(Exception):  # no nvidia-ml-py, no driver, no device
                from flodl.monitor.resources import _Nvml

                self._nvml = _Nvml(None)

    def cpu(self) -> float:
        now = psutil.cpu_times()
        prev, self._prev = self._prev, now
        total = sum(now) - sum(prev)
        idle = (now.idle - prev.idle) + (getattr(now, "iowait", 0.0) - getattr(prev, "iowait", 0.0))
        return max(0.0, min(100.0, 100.0 * (total - idle) / total)) if total > 0 else 0.0

    def gpus(self) -> tuple[GpuTimelineSample, ...]:
        if self._nvml is None:
            return ()
        import sys

        torch = sys.modules.get("torch")
        cuda = torch.cuda if torch is not None and torch.cuda.is_initialized() else None
        out = []
        for i in range(len(self._nvml.handles)):
            util, used, total = self._nvml.instant(i)
            allocated = None
            if cuda is not None and i < cuda.device_count():
                with contextlib.suppress(Exception):
                    allocated = int(cuda.memory_allocated(i))
            out.append(GpuTimelineSample(i, util, used, allocated, total))
        return tuple(out)

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None


class Timeline:
    """High-frequency samples of CPU/RAM/GPU plus training events, for diagnosing a run.

    ``poll_interval_ms``: time between samples (a finite number >= 1). ``gpu=False`` skips
    NVML. ``max_samples`` / ``max_events`` (ints >= 0) bound memory (the oldest are dropped
    beyond them). A bad value is a :class:`MonitorError` here, not a failure of the sampler.
    :meth:`start` begins sampling on a daemon thread and subscribes the timeline to the events
    flodl emits in this process; :meth:`stop` ends both. Usable as a context manager.
    """

    def __init__(
        self,
        poll_interval_ms: float = 100,
        *,
        gpu: bool = True,
        max_samples: int = 1_000_000,
        max_events: int = 1_000_000,
    ) -> None:
        given: object = poll_interval_ms  # NumPy numbers too
        if isinstance(given, bool) or not isinstance(given, numbers.Real):
            raise MonitorError(f"Timeline(poll_interval_ms={poll_interval_ms!r}): need a number")
        # NaN would slip past a comparison and busy-loop the sampler; inf (or beyond what a
        # thread can wait) would kill it while `running` stays True.
        if not (poll_interval_ms >= 1 and poll_interval_ms / 1e3 <= threading.TIMEOUT_MAX):
            raise MonitorError(
                f"Timeline(poll_interval_ms={poll_interval_ms}): need a finite number, at least "
                "1 ms"
            )
        bounds = []
        for name, bound in (("max_samples", max_samples), ("max_events", max_events)):
            try:  # NumPy integers too
                value = -1 if isinstance(bound, bool) else operator.index(bound)
            except TypeError:
                value = -1
            if value < 0:
                raise MonitorError(f"Timeline({name}={bound!r}): need an int >= 0")
            bounds.append(value)
        max_samples, max_events = bounds
        self.poll_interval_ms = float(poll_interval_ms)
        self._gpu = gpu
        self._mono0 = time.monotonic()
        self._wall0 = time.time()
        self._samples: collections.deque[TimelineSample] = collections.deque(maxlen=max_samples)
        # (wall time, kind, rank, data): appended without a lock (deque.append is atomic) and
        # turned into TimelineEvents when read, so an event costs the training thread ~1 us.
        self._events: collections.deque[tuple[float, str, int | None, dict[str, Any]]] = (
            collections.deque(maxlen=max_events)
        )
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> Timeline:
        """Start sampling (idempotent) and receive flodl's events; returns the timeline."""
        if self._thread is not None:
            return self
        self._stop.clear()
        reader = _Reader(self._gpu)
        self._thread = threading.Thread(
            target=self._poll, args=(reader,), name="flodl-timeline", daemon=True
        )
        self._thread.start()
        _subscribe(self)
        return self

    def stop(self) -> None:
        """Stop sampling and stop receiving events (idempotent); the data stays."""
        _unsubscribe(self)
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=5 + self.poll_interval_ms / 1e3)

    def __enter__(self) -> Timeline:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def elapsed_ms(self) -> float:
        """Milliseconds since the timeline was created (the clock of every sample and event)."""
        return (time.monotonic() - self._mono0) * 1e3

    def _poll(self, reader: _Reader) -> None:
        try:
            while True:
                sample = self._read(reader)
                with self._lock:
                    self._samples.append(sample)
                if self._stop.wait(self.poll_interval_ms / 1e3):
                    return
        finally:
            reader.close()

    def _read(self, reader: _Reader) -> TimelineSample:
        t = self.elapsed_ms()
        cpu = reader.cpu()
        vm = psutil.virtual_memory()
        return TimelineSample(t, cpu, int(vm.total - vm.available), int(vm.total), reader.gpus())

    # -- events --------------------------------------------------------------------------------

    def event(self, kind: str, **data: Any) -> TimelineEvent:
        """Record an event now (``kind`` in lower_snake_case, ``data`` JSON values; NaN and
        infinities are kept, and exported as ``null``)."""
        checked = _check_event(kind, data)
        wall = self._wall0 + (time.monotonic() - self._mono0)
        rank = current_rank()
        self._events.append((wall, kind, rank, checked))
        return TimelineEvent((wall - self._wall0) * 1e3, kind, rank, checked)

    def _receive(self, wall: float, kind: str, rank: int | None, data: dict[str, Any]) -> None:
        self._events.append((wall, kind, rank, data))

    def add_events(self, events: Iterable[dict[str, Any]]) -> None:
        """Add events emitted elsewhere (``{"wall", "kind", "rank", "data"}``, as ranks send them),
        placed on this timeline's clock by their wall-clock time."""
        for e in events:
            self._receive(float(e["wall"]), str(e["kind"]), e.get("rank"), dict(e.get("data", {})))

    # -- reading -------------------------------------------------------------------------------

    @property
    def samples(self) -> list[TimelineSample]:
        with self._lock:
            return list(self._samples)

    @property
    def events(self) -> list[TimelineEvent]:
        """Every event, in time order."""
        raw = sorted(self._events, key=lambda e: e[0])  # copied in C: atomic
        return [TimelineEvent((w - self._wall0) * 1e3, k, r, d) for w, k, r, d in raw]

    def events_of(self, kind: str) -> list[TimelineEvent]:
        return [e for e in self.events if e.kind == kind]

    def idle_gaps(
        self, device: int = 0, threshold_pct: float = 5, min_ms: float = 500
    ) -> list[tuple[float, float]]:
        """``(start_ms, end_ms)`` of each run of samples where GPU ``device``'s utilisation was
        below ``threshold_pct`` for at least ``min_ms``; a gap ends at the first busy sample (or
        the last sample). Samples without a reading for the device never count as idle."""
        gaps: list[tuple[float, float]] = []
        start: float | None = None
        samples = self.samples
        for s in samples:
            util = next((g.util_pct for g in s.gpus if g.device == device), None)
            if util is not None and util < threshold_pct:
                if start is None:
                    start = s.t_ms
            elif start is not None:
                if s.t_ms - start >= min_ms:
                    gaps.append((start, s.t_ms))
                start = None
        if start is not None and samples and samples[-1].t_ms - start >= min_ms:
            gaps.append((start, samples[-1].t_ms))
        return gaps

    def summary(self) -> TimelineSummary:
        samples, events = self.samples, self.events
        kinds = collections.Counter(e.kind for e in events)
        # A sync_end without a usable duration_ms (a user's own marker) still counts as an
        # event, but not in the mean: a summary never fails on what event() accepted.
        durations = (_ms(e.data.get("duration_ms")) for e in events if e.kind == "sync_end")
        sync_ms = [d for d in durations if d is not None]
        idle: dict[int, float] = {}
        devices = sorted({g.device for s in samples for g in s.gpus})
        for d in devices:
            readings = [g.util_pct for s in samples for g in s.gpus if g.device == d]
            known = [u for u in readings if u is not None]
            idle[d] = 100.0 * sum(u < 5 for u in known) / len(known) if known else 0.0
        ends = [s.t_ms for s in samples] + [e.t_ms for e in events]
        return TimelineSummary(
            total_ms=max(ends, default=0.0),
            sample_count=len(samples),
            event_count=len(events),
            cpu_mean_pct=sum(s.cpu_pct for s in samples) / len(samples) if samples else 0.0,
            ram_peak=max((s.ram_used for s in samples), default=0),
            gpu_idle_pct=idle,
            sync_count=kinds["sync_start"],
            avg_sync_ms=sum(sync_ms) / len(sync_ms) if sync_ms else 0.0,
            anchor_change_count=kinds["anchor_changed"],
            checkpoint_count=kinds["checkpoint_saved"],
            epoch_count=kinds["epoch_end"],
            kinds=dict(kinds),
        )

    # -- export --------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "poll_interval_ms": self.poll_interval_ms,
            "started": self._wall0,
            "samples": [s.to_json() for s in self.samples],
            "events": [e.to_json() for e in self.events],
        }

    def save_json(self, path: str | os.PathLike[str]) -> Path:
        """Samples and events as JSON (``t`` in ms; see :meth:`TimelineSample.to_json`). A NaN
        or infinite number (an event's data) is written as ``null``, as :meth:`save_html` does:
        standard JSON has neither."""
        return write_text(path, json.dumps(finite(self.to_json()), allow_nan=False))

    def save_csv(self, path: str | os.PathLike[str]) -> Path:
        """One row per sample: ``elapsed_ms,cpu_pct,ram_used,ram_total`` then
        ``gpu<i>_util,gpu<i>_vram_alloc,gpu<i>_vram_used,gpu<i>_vram_total`` per GPU (empty where
        unknown). Events are in :meth:`save_json` / :meth:`save_html`."""
        samples = self.samples
        devices = sorted({g.device for s in samples for g in s.gpus})
        header = ["elapsed_ms", "cpu_pct", "ram_used", "ram_total"]
        for d in devices:
            header += [
                f"gpu{d}_util",
                f"gpu{d}_vram_alloc",
                f"gpu{d}_vram_used",
                f"gpu{d}_vram_total",
            ]
        with open_atomic(path, newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            for s in samples:
                row: list[Any] = [f"{s.t_ms:.1f}", f"{s.cpu_pct:.1f}", s.ram_used, s.ram_total]
                by_dev = {g.device: g for g in s.gpus}
                for d in devices:
                    g = by_dev.get(d)
                    values = (
                        (g.util_pct, g.vram_allocated, g.vram_used, g.vram_total)
                        if g is not None
                        else (None,) * 4
                    )
                    row += ["" if v is None else v for v in values]
                writer.writerow(row)
        return Path(path)

    def save_html(self, path: str | os.PathLike[str]) -> Path:
        """A self-contained page: CPU, RAM and per-GPU lanes with event markers and sync spans."""
        from flodl.monitor.timeline_page import render_timeline

        page, _ = render_timeline(self)
        return write_text(path, page)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return (
            f"Timeline(poll_interval_ms={self.poll_interval_ms:g}, samples={len(self._samples)}, "
            f"events={len(self._events)}, {state})"
        )


# -- the process's event subscribers ----------------------------------------------------------------

_subscribers: list[
    Any
] = []  # started Timelines and rank forwarders (``_receive(wall, kind, ...)``)
_sub_lock = threading.Lock()


def _subscribe(sink: Any) -> None:
    with _sub_lock:
        if sink not in _subscribers:
            _subscribers.append(sink)
        # While anything listens, every checkpoint file flodl writes becomes an event.
        checkpoint_listeners.add_save_listener(_checkpoint_written)


def _unsubscribe(sink: Any) -> None:
    with _sub_lock:
        if sink in _subscribers:
            _subscribers.remove(sink)
        if not _subscribers:
            checkpoint_listeners.remove_save_listener(_checkpoint_written)


def _checkpoint_written(saved: checkpoint_listeners.SavedCheckpoint) -> None:
    """A checkpoint file is on disk (a blocking save, or a background write that just ended)."""
    emit("checkpoint_saved", path=saved.path, **saved.tags)


def active() -> bool:
    """Whether a started Timeline (or a rank forwarder) in this process receives events."""
    return bool(_subscribers)


def timelines_running() -> bool:
    """Whether a started :class:`Timeline` (not only a forwarder) is in this process."""
    return any(isinstance(s, Timeline) for s in _subscribers)


def emit(kind: str, **data: Any) -> None:
    """Send a training event to every started Timeline of this process (nothing when none).

    Library code calls this; its cost without a timeline is one list check."""
    if not _subscribers:
        return
    wall, rank = time.time(), current_rank()
    for sink in list(_subscribers):
        sink._receive(wall, kind, rank, data)


def deliver(events: Iterable[dict[str, Any]]) -> None:
    """Hand events forwarded from other processes to every started Timeline of this process."""
    events = list(events)
    if not events:
        return
    for sink in list(_subscribers):
        if isinstance(sink, Timeline):
            sink.add_events(events)


class EventForwarder:
    """Collects a rank process's events for the training process (Builder mode, spawned ranks)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []

    def _receive(self, wall: float, kind: str, rank: int | None, data: dict[str, Any]) -> None:
        with self._lock:
            self._events.append({"wall": wall, "kind": kind, "rank": rank, "data": dict(data)})

    def drain(self) -> list[dict[str, Any]]:
        with self._lock:
            out, self._events = self._events, []
        return out

    def install(self) -> EventForwarder:
        _subscribe(self)
        return self

    def remove(self) -> None:
        _unsubscribe(self)


def forwarder() -> EventForwarder | None:
    """This process's installed forwarder, if any."""
    return next((s for s in list(_subscribers) if isinstance(s, EventForwarder)), None)
