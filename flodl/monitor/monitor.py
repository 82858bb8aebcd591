"""``Monitor``: one line per epoch, resources, a live dashboard, and archives of the run."""

from __future__ import annotations

import csv
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

from flodl.checkpoint.background import flush as checkpoint_flush
from flodl.files import open_atomic, write_text
from flodl.log import get_logger
from flodl.monitor.errors import MonitorError
from flodl.monitor.eta import EtaEstimator
from flodl.monitor.format import digit_count, epoch_line, finish_line, format_eta, format_metric
from flodl.monitor.graph_view import render_graph_view
from flodl.monitor.messages import MessageLog
from flodl.monitor.page import render_page, svg_data_uri
from flodl.monitor.record import EpochRecord
from flodl.monitor.resources import ResourceSample, ResourceSampler, hardware_summary
from flodl.monitor.server import DashboardServer, check_port
from flodl.monitor.tensorboard import write_scalars
from flodl.monitor.timeline import Timeline
from flodl.monitor.timeline_page import render_timeline
from flodl.smoke import SMOKE_EPOCHS, SmokeBudgetReached, loops_capped, smoke_enabled

__all__ = ["MetricSource", "Monitor"]

log = get_logger("flodl.monitor")

# CSV column -> key of ResourceSample.to_json()
_CSV_RESOURCES = {
    "cpu_pct": "cpu",
    "ram_used": "ram_used",
    "ram_total": "ram_total",
    "rss": "rss",
    "gpu_pct": "gpu",
    "vram_alloc": "vram_alloc",
    "vram_total": "vram_total",
}


@runtime_checkable
class MetricSource(Protocol):
    """Anything that can report the metrics flushed in its latest epoch (a flodl Graph): dotted
    path -> value."""

    def latest_metrics(self) -> Mapping[str, float]: ...


class Monitor:
    """Watch a training run: a terminal line per epoch, a live dashboard, and archives.

    ``num_epochs`` is the run's length; ``start_epoch`` the first epoch trained when resuming (the
    ETA counts from there). Lines go to ``stream``: True (the default) is whatever ``sys.stdout``
    is at each call, None or False is silent, or pass any text file; ``color`` None decides from
    the stream (a TTY), ``NO_COLOR`` and ``FORCE_COLOR``. ``gpu=False`` skips NVML. On a multi-process run only rank 0 prints and serves: ``rank``
    defaults to the ``RANK`` environment variable that torchrun sets (0 when absent); the other
    ranks record quietly and send :meth:`sample_resources` to rank 0, which attaches them with
    :meth:`add_rank_resources`.

    Under ``FLODL_SMOKE=1`` set by hand, once the second epoch of a loop that planned more is
    logged, :meth:`log` finishes the monitor and raises :class:`~flodl.monitor.SmokeBudgetReached`
    (a ``SystemExit`` with code 0): the script ends there, successfully. ``fdl check`` shortens
    the script's loops itself, so that the code after them runs too, and the monitor then never
    stops the run. Something that runs the loop itself and must finish its own
    epochs (``fl.Trainer`` does) sets :attr:`ends_smoke_runs` to False.

    >>> import flodl as fl
    >>> mon = fl.Monitor(3, stream=None)
    >>> for epoch in range(3):
    ...     _ = mon.log(epoch, 0.01, {"loss": 1.0 / (epoch + 1)})
    >>> [round(r.metrics["loss"], 3) for r in mon.history]
    [1.0, 0.5, 0.333]
    >>> mon.close()
    """

    def __init__(
        self,
        num_epochs: int,
        *,
        start_epoch: int = 0,
        stream: IO[str] | bool | None = True,
        color: bool | None = None,
        rank: int | None = None,
        gpu: bool = True,
    ) -> None:
        if not isinstance(num_epochs, int) or num_epochs < 1:
            raise MonitorError(f"Monitor(num_epochs={num_epochs!r}): need a positive integer")
        if isinstance(start_epoch, bool) or not isinstance(start_epoch, int):
            raise MonitorError(f"Monitor(start_epoch={start_epoch!r}): need an int")
        if not 0 <= start_epoch <= num_epochs:
            raise MonitorError(
                f"Monitor(num_epochs={num_epochs}, start_epoch={start_epoch}): start_epoch must "
                "lie in [0, num_epochs]"
            )
        self.num_epochs = num_epochs
        #: The first epoch this run trains (0, or where a resumed run picks up).
        self.start_epoch = start_epoch
        self.rank = _rank_from_env() if rank is None else rank
        #: Under ``FLODL_SMOKE``, end a hand-written loop once its budget is logged (see above).
        self.ends_smoke_runs = True
        self._stream_arg = stream
        self._color_arg = color
        self._started = time.monotonic()
        self._last_log = self._started  # log(epoch, metrics) times an epoch from here
        self._started_wall = time.time()
        self._eta = EtaEstimator(num_epochs, started_at=self._started, start_epoch=start_epoch)
        self._records: list[EpochRecord] = []
        self._time_given = False  # the latest epoch's duration was passed to log(), not timed
        self._pending_ranks: dict[int, ResourceSample] = {}
        self._sampler = ResourceSampler(gpu=gpu)
        self._gpu = gpu
        self._hardware: str | None = None
        self.label: str | None = None
        self.hash: str | None = None
        self._user_meta: dict[str, Any] = {}
        self._param_info: dict[str, int] | None = None
        self._svg: str | None = None
        self._graph_html: str | None = None  # the HTML tree view, shown only without an SVG
        self._svg_version = 0
        self._archive_path: Path | None = None
        self._finished_at: float | None = None
        self._outcome = _Outcome()  # how the run ended, decided by the first finish()
        self._server: DashboardServer | None = None
        self._closed = False
        self._messages = MessageLog(self._started)
        #: The :class:`~flodl.monitor.Timeline` shown at ``/timeline.html`` (see
        #: :meth:`attach_timeline`), or None.
        self.timeline: Timeline | None = None
        self._owned: dict[str, Any] = {
            "sampler": self._sampler,
            "server": None,
            "messages": self._messages,
        }
        self._messages.attach()
        self._finalizer = weakref.finalize(self, _release, self._owned)

    # -- output -------------------------------------------------------------------------------

    @property
    def _stream(self) -> IO[str] | None:
        if self.rank != 0 or self._stream_arg is None or self._stream_arg is False:
            return None
        return sys.stdout if self._stream_arg is True else self._stream_arg

    def _color(self, stream: IO[str]) -> bool:
        if self._color_arg is not None:
            return self._color_arg
        if os.environ.get("NO_COLOR"):
            return False
        if os.environ.get("FORCE_COLOR"):
            return True
        isatty = getattr(stream, "isatty", None)
        return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"

    def _say(self, text: str, *, err: bool = False) -> None:
        stream = sys.stderr if err and self._stream is not None else self._stream
        if stream is not None:
            _write_line(stream, text)

    # -- dashboard ----------------------------------------------------------------------------

    def serve(self, port: int = 3000, host: str = "127.0.0.1", *, max_clients: int = 16) -> str:
        """Start the live dashboard on a background thread and return its URL.

        ``port`` is an int in [0, 65535] (anything else is a :class:`MonitorServerError`).
        ``max_clients`` is how many live streams (browser tabs) are served at once; the page,
        ``/api/history`` and the graph are always answered, however many tabs are open, and a
        client that stalls is dropped without slowing the others or the training loop.
        Binds loopback by default; pass ``host="0.0.0.0"`` only on a trusted network (there is no
        authentication), or better, forward the port over SSH. ``port=0`` picks a free port.
        Raises :class:`MonitorServerError` when the port is taken. Only rank 0 serves (others
        get ""); a second call returns the running server's URL (whatever port it asks for).
        After :meth:`close` it is a :class:`MonitorError`: a closed monitor stays closed.
        """
        check_port(port)  # on every rank: a script's mistake fails the same way everywhere
        if self._closed:
            # close() has released everything: a server started now would outlive the monitor.
            raise MonitorError("Monitor.serve: the monitor is closed; create a new fl.Monitor")
        if self.rank != 0:
            return ""
        if self._server is not None:
            return self._server.url
        _ = self.hardware  # probed once here, not inside the first page request
        server = DashboardServer(self._live_page, host=host, port=port, max_clients=max_clients)
        server.meta = self._live_meta
        self._server = self._owned["server"] = server
        self._serve_timeline()
        for record in self._records:  # a dashboard started mid-run still shows the whole run
            server.log.publish("epoch", record.to_json(), key=record.epoch)
        server.svg, server.graph_html = self._svg, self._graph_html
        if self._finished_at is not None:
            server.log.publish("complete", self._complete_json())
        self._say(f"  dashboard: {server.url}")
        if not server.loopback:
            # Through the logger, so that a monitor with stream=None still warns.
            where = "all interfaces" if host in ("", "0.0.0.0", "::") else host
            log.warning(
                "the dashboard listens on %s (port %d) with no authentication; anyone who can "
                "reach this port sees the run — prefer the default host and an SSH tunnel",
                where,
                server.port,
            )
        return server.url

    def attach_timeline(
        self, timeline: Timeline | None = None, *, poll_interval_ms: float = 100
    ) -> Timeline:
        """Show a :class:`~flodl.monitor.Timeline` on the dashboard (``/timeline.html``, linked
        from the page) and next to the HTML archive (``<archive>.timeline.html``, written by
        :meth:`finish`). Without ``timeline`` the monitor creates one sampling every
        ``poll_interval_ms`` and stops it at :meth:`close`; a given one is started if it is not
        running and left to its owner. Returns the timeline.

        Called again without ``timeline``, it returns the timeline already attached (one
        sampling thread per monitor); given another one, that one replaces it, and a timeline
        the monitor created is stopped. After :meth:`close` it is a :class:`MonitorError`,
        also when a timeline was attached before."""
        if self._closed:  # nothing would stop a timeline started now
            raise MonitorError(
                "Monitor.attach_timeline: the monitor is closed; create a new fl.Monitor"
            )
        if timeline is None and self.timeline is not None:
            return self.timeline
        created = self._owned.get("timeline")
        if created is not None and created is not timeline:
            created.stop()  # replaced: nothing would stop its sampling thread later
            self._owned["timeline"] = None
        if timeline is None:
            timeline = Timeline(poll_interval_ms, gpu=self._gpu)
            self._owned["timeline"] = timeline
        self.timeline = timeline.start()
        self._serve_timeline()
        self._publish_meta()
        return timeline

    def _serve_timeline(self) -> None:
        if self._server is not None and self.timeline is not None:
            timeline = self.timeline
            # the title read at each request: a label set after attach_timeline() shows
            self._server.timeline_page = lambda: render_timeline(
                timeline, title=self._title("Timeline")
            )

    @property
    def url(self) -> str | None:
        """The dashboard URL while it is served, else None."""
        return self._server.url if self._server is not None else None

    @property
    def hardware(self) -> str:
        if self._hardware is None:
            self._hardware = hardware_summary()
        return self._hardware

    def _boot(self, mode: str) -> dict[str, Any]:
        return {
            "timeline": self.timeline is not None,
            "mode": mode,
            "label": self.label,
            "hash": self.hash,
            "hardware": self.hardware,
            "meta": self.metadata or None,
            "total": self.num_epochs,
        }

    def _live_page(self) -> tuple[str, str]:
        return render_page(self._live_meta(), title=self._title("Training Dashboard"))

    def _live_meta(self) -> dict[str, Any]:
        """The live page's boot data, also served at ``/api/meta``: ``run`` is the event log's
        run token, which tells a page left open that a new run took over the port."""
        boot = self._boot("live")
        boot["graph"] = self._graph_ref()
        if self._server is not None:
            boot["run"] = self._server.log.run_token
        return boot

    def _title(self, kind: str) -> str:
        name = f" {self.label}" if self.label else ""
        return f"flodl{name} — {kind}"

    def _publish_meta(self) -> None:
        if self._server is not None:
            self._server.svg, self._server.graph_html = self._svg, self._graph_html
            meta = self._boot("live")
            meta["graph"] = self._graph_ref()
            self._server.log.publish("meta", meta)

    def _graph_ref(self) -> dict[str, Any] | None:
        """Which graph view the page should load (``/graph.svg`` or ``/graph.html``), and a
        version that changes with it so the browser never shows a cached one."""
        kind = "svg" if self._svg else "html" if self._graph_html else None
        return {"kind": kind, "version": self._svg_version} if kind else None

    # -- identity and graph -------------------------------------------------------------------

    def watch(self, graph: Any) -> None:
        """Show ``graph`` on the dashboard: its ``svg()`` when it has one (else its
        ``html_view()``, e.g. without Graphviz), its ``label`` and ``structural_hash`` when
        present, and parameter counts when it has ``parameters()``."""
        label = getattr(graph, "label", None)
        if isinstance(label, str) and label:
            self.label = label
        digest = getattr(graph, "structural_hash", None)
        digest = digest() if callable(digest) else digest
        if isinstance(digest, str) and digest:
            self.hash = digest
        params = getattr(graph, "parameters", None)
        if callable(params):
            try:
                plist = list(params())
                total = sum(int(p.numel()) for p in plist)
                trainable = sum(int(p.numel()) for p in plist if getattr(p, "requires_grad", True))
                info = {"total": total, "trainable": trainable, "frozen": total - trainable}
                self._param_info = info
            except Exception:  # parameter counting is a courtesy, never a training failure
                pass
        self._take_svg(graph, warn=False)
        self._publish_meta()

    def watch_profiled(self, graph: Any) -> None:
        """Like :meth:`watch`, but the graph is drawn as a heat map of its last profiled forward
        (``graph.svg_with_profile()``: nodes green to red by time, each with its duration).
        Call ``graph.enable_profiling()`` and run a forward first; without a profile (or without
        Graphviz) the dashboard shows what :meth:`watch` shows."""
        self.watch(graph)
        render = getattr(graph, "svg_with_profile", None)
        if not callable(render):
            return
        try:
            svg = render()
        except Exception:  # no profile yet, no Graphviz: the plain view stays
            return
        if isinstance(svg, str) and svg.strip():
            self.set_svg(svg)

    def _take_svg(self, graph: Any, *, warn: bool) -> None:
        view, error = render_graph_view(graph)
        fallback = view is not None and view.kind == "html" and self._svg is None
        if error is not None and warn:
            instead = "; the dashboard shows its HTML view instead" if fallback else ""
            self._say(f"  warning: could not render the graph SVG: {error}{instead}", err=True)
        if view is not None and view.kind == "svg":
            self.set_svg(view.text, publish=False)
        elif view is not None and fallback:  # an SVG taken earlier is the better picture
            self._graph_html = view.text
            self._svg_version += 1

    def set_svg(self, svg: str, *, publish: bool = True) -> None:
        """Show this SVG as the model graph (dashboard ``/graph.svg`` and archives)."""
        self._svg, self._graph_html = svg, None
        self._svg_version += 1
        if publish:
            self._publish_meta()

    def set_identity(self, label: str | None = None, hash: str | None = None) -> None:
        """Name the run without a graph (label shown in the title, hash as 8 hex digits)."""
        self.label, self.hash = label, hash
        self._publish_meta()

    @property
    def metadata(self) -> dict[str, Any]:
        """The configuration card: parameter counts from :meth:`watch`, then your keys (which
        win on a clash)."""
        params = {"parameters": self._param_info} if self._param_info is not None else {}
        return {**params, **self._user_meta}

    def set_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Merge ``metadata`` (hyper-parameters, paths, notes; JSON-serialisable) into the run's
        configuration card; your keys win over the ones ``watch`` adds."""
        self._user_meta.update(_jsonable(dict(metadata)))
        self._publish_meta()

    # -- logging ------------------------------------------------------------------------------

    def log(
        self,
        epoch: int,
        elapsed: float | Mapping[str, Any] | MetricSource | None = None,
        metrics: Mapping[str, Any] | MetricSource | None = None,
    ) -> EpochRecord:
        """Record zero-based ``epoch``, print its line, push it to the dashboard.

        ``mon.log(epoch, metrics)`` times the epoch itself: the seconds since the previous
        ``log`` returned (or since the Monitor was created). ``mon.log(epoch, elapsed, metrics)`` gives
        the time explicitly. ``metrics`` is a mapping of name -> number (a float, int or
        one-element tensor) or a Graph-like object whose ``latest_metrics()`` gives what was
        flushed in its latest epoch. ``epoch`` must lie in ``[start_epoch, num_epochs)``; outside it
        :class:`MonitorError` names it and nothing is recorded.

        Logging the latest epoch again (training metrics, then validation metrics) merges the
        new metrics into its row — a name logged twice keeps the later value — and prints the
        merged line; without ``elapsed`` the epoch's time runs to this call, with it ``elapsed``
        is the whole epoch's. An epoch before the latest one is a :class:`MonitorError`.

        >>> import flodl as fl
        >>> mon = fl.Monitor(2, stream=None)
        >>> mon.log(0, {"loss": 0.5}).duration >= 0.0  # timed since the Monitor was created
        True
        >>> mon.log(1, 0.25, {"loss": 0.4}).duration  # or given
        0.25
        >>> mon.log(1, {"val_loss": 0.45}).metrics  # validation: merged into epoch 1's row
        {'loss': 0.4, 'val_loss': 0.45}
        >>> mon.log(2, {"loss": 0.3})
        Traceback (most recent call last):
          ...
        flodl.monitor.errors.MonitorError: Monitor.log: epoch 2 is outside [0, 2) ...
        >>> mon.close()
        """
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise MonitorError(f"Monitor.log: epoch must be a zero-based int, got {epoch!r}")
        if not self.start_epoch <= epoch < self.num_epochs:
            hint = (
                "epochs are zero-based: log epoch - 1, or loop over range(num_epochs)"
                if epoch == self.num_epochs
                else "pass num_epochs (and start_epoch when resuming) to fl.Monitor to match "
                "the loop"
            )
            raise MonitorError(
                f"Monitor.log: epoch {epoch} is outside [{self.start_epoch}, {self.num_epochs}) "
                f"(Monitor(num_epochs={self.num_epochs}, start_epoch={self.start_epoch})) — "
                f"{hint}; nothing was recorded"
            )
        latest = self._records[-1] if self._records else None
        if latest is not None and epoch < latest.epoch:
            raise MonitorError(
                f"Monitor.log: epoch {epoch} comes after epoch {latest.epoch} was logged — log "
                f"epochs in order (metrics logged again for the latest epoch, {latest.epoch}, "
                "are merged into its row); nothing was recorded"
            )
        # Lightning's habit: training metrics, then validation metrics, for the same epoch.
        merged_into = latest if latest is not None and epoch == latest.epoch else None
        if metrics is None and isinstance(elapsed, (Mapping, MetricSource)):
            elapsed, metrics = None, elapsed
        if metrics is None:
            raise MonitorError(
                f"Monitor.log(epoch={epoch}): no metrics — call mon.log(epoch, {{'loss': ...}}) "
                "or mon.log(epoch, seconds, {'loss': ...})"
            )
        now = time.monotonic()
        if elapsed is None:
            duration = now - self._last_log
            if merged_into is not None:  # the epoch runs on to this call, unless its time was given
                duration = merged_into.duration + (0.0 if self._time_given else duration)
        else:
            try:
                duration = float(elapsed)  # type: ignore[arg-type]
            except (TypeError, ValueError, OverflowError):
                duration = math.nan
            if not duration >= 0:  # negative or NaN (an infinite duration is kept, as NaN metrics)
                raise MonitorError(
                    f"Monitor.log(epoch={epoch}): elapsed must be the epoch's duration in "
                    f"seconds, a number >= 0, got {elapsed!r}; nothing was recorded"
                )
        values = _resolve_metrics(epoch, metrics)
        ranks = self._pending_ranks
        if merged_into is not None:
            values = {**merged_into.metrics, **values}
            ranks = {**merged_into.ranks, **ranks}
        # The estimator ignores an epoch logged again: its interval runs from one epoch's first
        # log to the next one's, the same length either way.
        eta = self._eta.update(epoch, now)
        resources = self._sampler.sample()
        record = EpochRecord(
            epoch=epoch,
            total=self.num_epochs,
            duration=duration,
            elapsed=now - self._started,
            metrics=values,
            resources=resources,
            eta=eta,
            ranks=ranks,
        )
        self._pending_ranks = {}
        if merged_into is not None:
            self._records[-1] = record
        else:
            self._records.append(record)
        self._time_given = elapsed is not None or (merged_into is not None and self._time_given)
        stream = self._stream
        if stream is not None:
            line = epoch_line(
                epoch, self.num_epochs, duration, values, eta, resources, color=self._color(stream)
            )
            _write_line(stream, line)
        if self._server is not None:  # the page replaces an epoch sent again
            self._server.log.publish("epoch", record.to_json(), key=epoch)
        self._last_log = time.monotonic()  # the next epoch starts now (this call not counted)
        if self._smoke_budget_spent(epoch):
            self._stop_for_smoke()
        return record

    def _smoke_budget_spent(self, epoch: int) -> bool:
        """Under ``FLODL_SMOKE``: this loop has logged its 2 epochs and planned more.

        Only a loop the user wrote is stopped here: ``fl.Trainer`` runs exactly the budget
        itself (its callbacks and checkpoints must still run) and turns :attr:`ends_smoke_runs`
        off; an exception raised on any thread but the main one would end that thread, not the
        run.
        """
        if not smoke_enabled() or loops_capped() or len(self._records) < SMOKE_EPOCHS:
            return False
        if epoch + 1 >= self.num_epochs:
            return False
        return self.ends_smoke_runs and threading.current_thread() is threading.main_thread()

    def _stop_for_smoke(self) -> None:
        self.finish()
        self.close()
        stop = SmokeBudgetReached(len(self._records))
        if self.rank == 0:
            _write_line(sys.stderr, str(stop))
        raise stop

    def sample_resources(self) -> ResourceSample:
        """This process's resources now (on a non-zero rank: what to send to rank 0)."""
        return self._sampler.sample()

    def add_rank_resources(self, rank: int, sample: ResourceSample | Mapping[str, Any]) -> None:
        """Attach another rank's resources to the next logged epoch (shown per rank)."""
        if isinstance(sample, Mapping):
            sample = ResourceSample.from_json(dict(sample))
        self._pending_ranks[int(rank)] = sample

    @property
    def history(self) -> list[EpochRecord]:
        """Every logged epoch, in order."""
        return list(self._records)

    # -- the end --------------------------------------------------------------------------------

    def finish(self, *, error: BaseException | None = None) -> None:
        """Print the summary, write the HTML archive if ``save_html`` named one, and tell the
        dashboard the run is over (it keeps serving until :meth:`close` or process exit).

        ``error`` is the exception that ended a run early: the summary, the dashboard and the
        archive then say ``training failed at epoch 3/10 after 1m 02s (ValueError: ...)``, or
        ``training interrupted at epoch 3/10 after ...`` for a ``KeyboardInterrupt`` (Ctrl-C)
        and other exits, instead of ``training complete``. The first call decides how the run
        ended. Leaving a ``with fl.Monitor(...)`` block by an exception before ``finish`` does
        the same for you.

        Then waits for pending background checkpoint saves (``fl.checkpoint.flush()``) and
        raises the first one that failed."""
        self._end(error)
        checkpoint_flush()

    def _end(self, error: BaseException | None) -> None:
        """Everything :meth:`finish` does but the checkpoint flush (which may raise)."""
        first_finish = self._finished_at is None
        if self._finished_at is None:
            self._finished_at = time.monotonic()
            self._outcome = _Outcome.of(error, self._records, self.start_epoch, self.num_epochs)
        last = self._records[-1].metrics if self._records else {}
        outcome = self._outcome
        self._say(
            finish_line(
                self._finished_at - self._started,
                last,
                status=outcome.status,
                where=outcome.where,
                reason=outcome.reason,
            )
        )
        try:
            if self._archive_path is not None:
                self._write_html(self._archive_path)
                self._say(f"  saved: {self._archive_path}")
                if self.timeline is not None:
                    self._say(f"  saved: {_timeline_path(self._archive_path)}")
        except Exception as err:
            # Through the logger, so that a monitor with stream=None still tells; whatever
            # failed, the dashboard below still learns that the run ended.
            log.warning(
                "Monitor.finish: could not rewrite the dashboard archive (%s) — the run's "
                "final state is not in it; save it again with mon.save_html(path)",
                err if isinstance(err, OSError) else repr(err),  # an OSError names its path
            )
        finally:
            if self._server is not None and first_finish:
                self._server.log.publish("complete", self._complete_json())

    def finish_with(self, graph: Any, *, error: BaseException | None = None) -> None:
        """Like :meth:`finish`, after taking the graph's final SVG (``graph.svg()``)."""
        self._take_svg(graph, warn=True)
        self._publish_meta()
        self.finish(error=error)

    def _complete_json(self) -> dict[str, Any]:
        """The dashboard's and the archive's end of the run: ``status`` is ``complete``,
        ``failed`` or ``interrupted``; ``error`` the exception, when one ended it."""
        total = (self._finished_at or time.monotonic()) - self._started
        outcome = self._outcome
        out: dict[str, Any] = {"elapsed": round(total, 3), "status": outcome.status}
        if outcome.status == "complete":
            out["text"] = f"Complete ({format_eta(total)})"
            return out
        text = f"{outcome.status.capitalize()} {outcome.where} ({format_eta(total)})"
        if outcome.reason:
            short = outcome.reason
            short = short if len(short) <= 80 else short[:79] + "…"
            text += f": {short}"
            out["error"] = outcome.reason
        out["text"] = text
        return out

    def close(self) -> None:
        """Stop the dashboard server and the GPU poller; idempotent."""
        self._closed = True
        self._finalizer()
        self._server = None

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        try:
            if exc is not None and self._finished_at is None:
                # The block ended by an exception before finish(): say so, not "Complete".
                self._end(exc)
        except Exception:  # reporting the end must never replace the exception that ended it
            log.exception("Monitor: could not report the end of the run")
        finally:
            self.close()

    # -- archives -------------------------------------------------------------------------------

    def save_html(self, path: str | os.PathLike[str]) -> Path:
        """Write a self-contained HTML report (opens offline, no server) and remember the path:
        :meth:`finish` rewrites it with the final state. Returns the path."""
        self._archive_path = Path(path)
        self._write_html(self._archive_path)
        return self._archive_path

    def _write_html(self, path: Path) -> None:
        """The report, and with a timeline its ``<stem>.timeline.html`` beside it (linked)."""
        boot = self._boot("archive")
        boot["history"] = [r.to_json() for r in self._records]
        boot["svg"] = svg_data_uri(self._svg)
        boot["graph_html"] = self._graph_html
        boot["complete"] = self._complete_json() if self._finished_at is not None else None
        if self.timeline is not None:
            boot["timeline_page"] = _timeline_path(path).name  # a relative link: beside it
        page, _ = render_page(boot, title=self._title("Training Report"))
        write_text(path, page)
        if self.timeline is not None:
            timeline_page, _ = render_timeline(self.timeline, title=self._title("Timeline"))
            write_text(_timeline_path(path), timeline_page)

    def metric_names(self) -> list[str]:
        """Every metric name that appeared in any epoch, in order of first appearance."""
        names: dict[str, None] = {}
        for record in self._records:
            names.update(dict.fromkeys(record.metrics))
        return list(names)

    def export_csv(self, path: str | os.PathLike[str]) -> Path:
        """Write one row per epoch: ``epoch,duration_s,elapsed_s``, every metric that ever
        appeared (empty where an epoch lacks it), then resources. Returns the path."""
        names = self.metric_names()
        header = ["epoch", "duration_s", "elapsed_s", *names, *_CSV_RESOURCES]
        path = Path(path)
        with open_atomic(path, newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            for r in self._records:
                res = r.resources.to_json()
                writer.writerow(
                    [
                        r.epoch + 1,
                        f"{r.duration:.6f}",
                        f"{r.elapsed:.3f}",
                        *(_csv_value(r.metrics.get(n)) for n in names),
                        *("" if res.get(k) is None else res[k] for k in _CSV_RESOURCES.values()),
                    ]
                )
        return path

    def export_tensorboard(self, logdir: str | os.PathLike[str]) -> Path:
        """Write the run as a TensorBoard event file in ``logdir`` (``tensorboard --logdir``
        reads it; nothing extra is needed to write it). Steps are 1-based epochs; besides every
        metric, ``epoch_time_s`` and ``resources/*`` are written. Returns the file's path."""
        keys = {"cpu": "cpu_pct", "rss": "rss_bytes", "gpu": "gpu_pct", "vram_alloc": "vram_bytes"}

        def scalars(r: EpochRecord) -> list[tuple[str, float]]:
            res = r.resources.to_json()
            out = [*r.metrics.items(), ("epoch_time_s", r.duration)]
            out += [(f"resources/{tag}", float(res[k])) for k, tag in keys.items() if k in res]
            return out

        return write_scalars(
            logdir,
            ((r.epoch + 1, self._started_wall + r.elapsed, scalars(r)) for r in self._records),
        )

    def write_log(self, path: str | os.PathLike[str]) -> Path:
        """A plain-text log: one ``epoch e/T  name=value  [time]`` line per epoch and the total,
        then the records flodl logged while the monitor was open (``# messages``: elapsed
        seconds, level, logger, message; what reaches stderr at the current verbosity)."""
        width = digit_count(self.num_epochs)
        lines = ["# flodl training log"]
        for r in self._records:
            metrics = "".join(f"  {k}={format_metric(v)}" for k, v in r.metrics.items())
            lines.append(
                f"epoch {r.epoch + 1:>{width}}/{self.num_epochs}{metrics}  [{format_eta(r.duration)}]"
            )
        if self._records:
            end = self._finished_at or time.monotonic()
            lines.append(f"# total: {format_eta(end - self._started)}")
        messages = self._messages.lines()
        if messages:
            lines += ["# messages", *messages]
        path = Path(path)
        write_text(path, "\n".join(lines) + "\n")
        return path


@dataclass(frozen=True)
class _Outcome:
    """How a run ended: ``status`` ``complete``, ``failed`` (an exception) or ``interrupted``
    (Ctrl-C, ``SystemExit``); ``where``: ``at epoch 3/10`` (the epoch under way, 1-based) or
    ``at the end of epoch 10/10``; ``reason``: ``ValueError: message`` (first line)."""

    status: str = "complete"
    where: str = ""
    reason: str = ""

    @classmethod
    def of(
        cls, error: BaseException | None, records: list[EpochRecord], start: int, total: int
    ) -> _Outcome:
        if error is None:
            return cls()
        done = records[-1].epoch + 1 if records else start  # epochs logged, zero-based end
        where = f"at epoch {done + 1}/{total}"
        if done >= total:  # every epoch was logged: it ended in what came after
            where = f"at the end of epoch {total}/{total}"
        message = str(error).strip().splitlines()
        reason = f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
        reason = reason if len(reason) <= 300 else reason[:299] + "…"
        if isinstance(error, Exception):
            return cls("failed", where, reason)
        # Ctrl-C says all there is to say; another exit (SystemExit) keeps its code.
        return cls("interrupted", where, "" if isinstance(error, KeyboardInterrupt) else reason)


def _release(owned: dict[str, Any]) -> None:
    """Runs on close(), garbage collection or interpreter exit, whichever comes first."""
    server, owned["server"] = owned.get("server"), None
    if server is not None:
        server.close()
    sampler, owned["sampler"] = owned.get("sampler"), None
    if sampler is not None:
        sampler.close()
    timeline, owned["timeline"] = owned.get("timeline"), None
    if timeline is not None:
        timeline.stop()
    messages, owned["messages"] = owned.get("messages"), None
    if messages is not None:
        messages.detach()


def _timeline_path(archive: Path) -> Path:
    return archive.with_name(archive.stem + ".timeline.html")


def _rank_from_env() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _resolve_metrics(epoch: int, metrics: Any) -> dict[str, float]:
    if isinstance(metrics, Mapping):
        items = metrics.items()
    elif isinstance(metrics, MetricSource):
        items = metrics.latest_metrics().items()
    else:
        raise MonitorError(
            f"Monitor.log(epoch={epoch}): metrics must be a mapping of name -> number or a graph "
            f"with latest_metrics(), got {type(metrics).__name__}"
        )
    values: dict[str, float] = {}
    for name, value in items:
        if not isinstance(name, str):
            raise MonitorError(
                f"Monitor.log(epoch={epoch}): metric names must be strings, got {name!r}"
            )
        values[name] = _to_float(epoch, name, value)
    return values


def _to_float(epoch: int, name: str, value: Any) -> float:
    numel = getattr(value, "numel", None)
    if callable(numel):  # a tensor (or numpy array): exactly one element
        count = int(numel())
        if count != 1:
            raise MonitorError(
                f"Monitor.log(epoch={epoch}): metric {name!r} is a tensor with {count} elements — "
                "log a scalar (e.g. loss.item() or tensor.mean())"
            )
        value = value.item()
    try:
        return float(value)
    except (TypeError, ValueError):
        raise MonitorError(
            f"Monitor.log(epoch={epoch}): metric {name!r} must be a number, got {value!r}"
        ) from None
    except OverflowError:  # an int beyond a float's range (10**400)
        raise MonitorError(
            f"Monitor.log(epoch={epoch}): metric {name!r} is an int too large for a float; "
            "log it as a float (inf) or on a log scale"
        ) from None


def _csv_value(v: float | None) -> str:
    if v is None:
        return ""
    return repr(v) if math.isfinite(v) else str(v)


def _jsonable(value: Any) -> Any:
    """Metadata as plain JSON types (paths and other objects become strings)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return str(value)


def _write_line(stream: Any, text: str) -> None:
    """The monitor's console output (epoch lines, notices): one line, flushed at once so it
    interleaves correctly with the user's own output and survives a crash right after."""
    stream.write(text + "\n")
    stream.flush()
