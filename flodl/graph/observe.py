"""Observation: per-batch scalars -> per-epoch history -> trends, across a whole graph tree.

Each graph keeps its own metrics. ``collect`` / ``record_scalar`` append a number per batch to a
buffer; ``flush`` turns each buffer into its mean and appends it to the epoch history (with no
arguments: every buffer of the whole tree); ``trend`` asks questions of a history. Names with dots
are label paths: ``record_at("encoder.loss", v)`` records into the child ``encoder``. A name that
matches nothing raises :class:`~flodl.graph.paths.PathError` before anything changes.
"""

from __future__ import annotations

import difflib
import enum
import math
import numbers
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from flodl.graph.paths import PathError, PathKind
from flodl.graph.trend import Trend, TrendGroup

if TYPE_CHECKING:
    from flodl.graph.graph import Graph


class Reduce(enum.StrEnum):
    """How :meth:`ObservationMethods.collect_with` turns a tagged tensor into one number."""

    MEAN = "mean"
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    NORM = "norm"

    def apply(self, value: torch.Tensor) -> float:
        t = value.detach()
        if t.numel() == 1:
            return float(t.reshape(()).item())
        if not t.is_floating_point():  # integer or bool tags: reduce exactly
            t = t.to(torch.float64)
        elif t.dtype in (torch.float16, torch.bfloat16):
            t = t.float()
        if self is Reduce.MEAN:
            out = t.mean()
        elif self is Reduce.SUM:
            out = t.sum()
        elif self is Reduce.MAX:
            out = t.max()
        elif self is Reduce.MIN:
            out = t.min()
        else:
            out = torch.linalg.vector_norm(t)
        return float(out.item())


@dataclass
class Metrics:
    """One graph's observation state (plain floats: pickles and deep-copies with the graph).

    Each flushed value is kept with the zero-based epoch it was flushed in (``epochs[name]``
    beside ``history[name]``): a metric flushed only in some epochs stays on those epochs.
    ``flush_count`` is the number of epochs that hold data, ``flush_times`` the time of each
    one's last flush, and ``ended`` the last epoch a closing flush from this graph ended (see
    :func:`flush_epoch`).
    """

    buffers: dict[str, list[float]] = field(default_factory=dict)
    history: dict[str, list[float]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # first-seen order, for latest_metrics
    flush_count: int = 0
    flush_times: list[float] = field(default_factory=list)  # seconds since `started`
    started: float = field(default_factory=time.monotonic)
    sources: dict[str, str] = field(default_factory=dict)  # name -> "collect" or "record"
    epochs: dict[str, list[int]] = field(default_factory=dict)  # name -> epoch of each value
    ended: int = -1  # the last epoch ended by flush()/end_epoch() from this graph (or above it)

    def add(self, name: str, values: list[float]) -> None:
        if name not in self.order:
            self.order.append(name)
        self.buffers.setdefault(name, []).extend(values)

    def claim(self, name: str, source: str, what: str) -> None:
        """Mark ``name`` as fed by ``source`` ("collect" or "record"); one name fed by both
        would average a tag's activations with, say, a loss, and every trend would be wrong."""
        sources = self.__dict__.setdefault("sources", {})  # a graph pickled before had none
        first = sources.setdefault(name, source)
        if first == source:
            return
        if source == "record":
            raise ValueError(
                f"{what}: '{name}' already holds what collect('{name}') takes from the tag "
                f"'{name}', and a recorded number would be averaged with it — record it under "
                "another name"
            )
        raise ValueError(
            f"{what}: metric '{name}' already holds numbers recorded with record_scalar/record, "
            f"and the tag's values would be averaged with them — record those under another name"
        )

    def flush(self, names: list[str], *, close: bool = True) -> bool:
        """Flush ``names`` of this object alone (its own epoch clock); see :func:`flush_epoch`."""
        return flush_epoch([self], [(self, names)], close=close)

    def ended_epoch(self) -> int:
        """``ended``, built for a graph pickled without it: one from before values kept their
        epoch ended every epoch it flushed; one that kept a ``closed`` flag ended the latest
        epoch when it was set, the one before it otherwise."""
        ended = self.__dict__.get("ended")
        if ended is None:
            ended = self.flush_count - (1 if self.__dict__.pop("closed", True) else 2)
            self.__dict__["ended"] = ended
        return ended

    def epoch_index(self) -> dict[str, list[int]]:
        """``epochs``, built for a graph pickled before values kept their epoch: each history
        taken to end at the latest epoch (what ``latest_metrics`` assumed then)."""
        epochs = self.__dict__.get("epochs")
        if epochs is None:
            count = self.flush_count
            epochs = {n: list(range(count - len(v), count)) for n, v in self.history.items()}
            self.__dict__["epochs"] = epochs
        return epochs

    def last_epoch(self, name: str) -> int | None:
        """The epoch of ``name``'s latest value (None without one)."""
        epochs = self.epoch_index().get(name)
        return epochs[-1] if epochs else None

    def by_epoch(self, name: str) -> dict[int, float]:
        """Zero-based epoch -> ``name``'s value in it (only the epochs that have one)."""
        return dict(zip(self.epoch_index().get(name, ()), self.history.get(name, ()), strict=True))

    def forget(self, name: str) -> None:
        self.history.pop(name, None)
        self.epoch_index().pop(name, None)

    def _reach(self, epoch: int, now: float, ended: int) -> None:
        """Move this clock to ``epoch`` (the latest one, or a new one), flushed at ``now``."""
        t = now - self.started
        if epoch < self.flush_count:
            self.flush_times[epoch] = t  # the epoch's last flush so far
        else:
            # Epochs this graph missed (flushed from a graph above it while it had nothing)
            # take the same time: no duration, rather than another epoch's.
            self.flush_times.extend([t] * (epoch + 1 - self.flush_count))
            self.flush_count = epoch + 1
        self.ended = ended

    def known(self, name: str) -> bool:
        return name in self.order or name in self.history


def _mean(values: list[float]) -> float:
    """The mean, exact for finite values; with infinities or NaN, the NaN or infinity they make
    (NaN for ``inf - inf``, as NumPy gives), where ``math.fsum`` would raise."""
    n = len(values)
    special = [v for v in values if not math.isfinite(v)]
    if special:  # the finite values cannot change the result, nor overflow on the way to it
        return sum(special)
    try:
        return math.fsum(values) / n
    except OverflowError:  # finite values whose sum leaves a float's range (1e308 + 1e308)
        scaled = [v / n for v in values]
        try:
            return math.fsum(scaled)
        except OverflowError:  # a mean at the very edge of the range
            return sum(scaled)


def flush_epoch(
    scope: list[Metrics], plan: list[tuple[Metrics, list[str]]], *, close: bool
) -> bool:
    """Flush the buffers ``plan`` names into the epoch they belong to, on the clock ``scope``
    shares: ``scope[0]`` is the graph flushed from, the rest the graphs below it (the values of
    one flush share an epoch index; the latest epoch is the latest of any of them).

    * When one of the flushed metrics already has a value in the latest epoch, the flush starts
      a new epoch (flushing metric by metric, the next epoch's first flush).
    * Otherwise a flush by name (``close`` false) adds to the latest epoch, even one that a
      closing flush ended: validation flushed after ``end_epoch()`` joins the epoch it follows.
    * Otherwise a closing flush (``close``: ``flush()`` with no names, ``end_epoch()``) adds to
      the latest epoch unless ``scope[0]`` ended it, and starts a new one if it did.

    A closing flush then ends that epoch for every graph of ``scope`` (not for a graph above
    ``scope[0]``: a child's own closing flush leaves its parent's epoch under way); one with
    nothing to flush only ends the latest epoch. All or nothing: every mean is taken before any
    buffer is emptied. Returns whether anything was flushed.
    """
    means: list[tuple[Metrics, str, float]] = []
    for metrics, names in plan:
        for name in dict.fromkeys(names):
            values = metrics.buffers.get(name)
            if values:
                means.append((metrics, name, _mean(values)))
    latest = max(m.flush_count for m in scope) - 1  # the same for every graph of a tree, normally
    ended = scope[0].ended_epoch() >= latest
    if not means:
        if close:
            for metrics in scope:
                metrics.ended = max(metrics.ended_epoch(), latest)
        return False
    if latest < 0 or any(m.last_epoch(name) == latest for m, name, _ in means):
        epoch = latest + 1
    elif close:
        epoch = latest + 1 if ended else latest
    else:
        epoch = latest
    # What the epoch is once flushed: ended by a closing flush, or still as it was
    still_ended = close or (ended and epoch == latest)
    now = time.monotonic()
    for metrics, name, mean in means:
        del metrics.buffers[name]
        metrics.history.setdefault(name, []).append(mean)
        metrics.epoch_index().setdefault(name, []).append(epoch)
    for metrics in scope:
        metrics._reach(epoch, now, epoch if still_ended else epoch - 1)
    return True


def to_float(what: str, value: Any) -> float:
    """A recorded value as a float: a number (NumPy's too) or a one-element tensor or array.

    >>> import numpy as np, torch
    >>> to_float("x", np.float32(0.5)), to_float("x", torch.tensor([2])), to_float("x", np.array(3))
    (0.5, 2.0, 3.0)
    """
    size = getattr(value, "size", None)  # NumPy arrays and scalars; a tensor's is a method
    if isinstance(value, torch.Tensor) or (isinstance(size, int) and hasattr(value, "item")):
        if value.numel() != 1 if isinstance(value, torch.Tensor) else size != 1:
            raise ValueError(
                f"{what}: expected a number or a one-element tensor, got a "
                f"{'tensor' if isinstance(value, torch.Tensor) else 'NumPy array'} of shape "
                f"{list(value.shape)} — reduce it first "
                "(e.g. .mean()), or use collect() on a tag"
            )
        value = value.detach().item() if isinstance(value, torch.Tensor) else value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what}: expected a number, got {type(value).__name__} {value!r}")
    return float(value)


def _check_name(method: str, name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise PathError(f"{method}: a metric name is a non-empty string, got {name!r}", str(name))
    if "." in name:
        raise PathError(
            f"{method}({name!r}): dots make a label path — use record_at / trend_at for a "
            "metric of a child graph",
            name,
        )
    return name


class ObservationMethods:
    """Tagged values, per-batch metrics, epoch history and trends (mixed into ``fl.Graph``)."""

    _metrics: Metrics

    # ------------------------------------------------------------------ values of the last pass
    def tagged_at(self, path: str) -> Any:
        """The last-pass value of the tag at ``path`` (None before the first forward).

        >>> import torch, flodl as fl
        >>> from torch import nn
        >>> enc = fl.FlowBuilder(nn.Linear(2, 4)).tag("hidden").label("encoder").build()
        >>> model = fl.FlowBuilder(enc).through(nn.Linear(4, 1)).build()
        >>> model.tagged_at("encoder.hidden") is None
        True
        >>> _ = model(torch.zeros(3, 2))
        >>> model.tagged_at("encoder.hidden").shape
        torch.Size([3, 4])
        """
        target = self._tree().validate_path(path)
        if target.kind is not PathKind.TAG:
            raise PathError(f'path "{path}" resolves to a {target.kind.value}, not a tag', path)
        return target.graph.tagged(target.name)

    # ------------------------------------------------------------------ per-batch buffers
    def _expand(self, names: tuple[str, ...]) -> list[str]:
        """Tag groups replaced by their members, also through a path: ``enc.grp`` ->
        ``enc.grp_0, enc.grp_1``. Other names are returned unchanged (checked later)."""
        out: list[str] = []
        for name in names:
            prefix, dot, last = name.rpartition(".") if isinstance(name, str) else ("", "", name)
            graph = self._tree()
            if prefix:
                try:
                    graph = graph.subgraph(prefix)
                except PathError:  # not a group then; the caller's lookup explains the path
                    out.append(name)
                    continue
            members = graph.tag_groups.get(last)
            out += [prefix + dot + m for m in members] if members else [name]
        return out

    def collect(self, *tags: str) -> dict[str, float]:
        """Append the mean of each tagged value of the last forward to its per-batch buffer.

        Tags may be tag groups (expanded) or paths into children (``"encoder.hidden"``: the value
        lands in the child's buffer under ``hidden``). Every name is checked before anything is
        appended. Returns what was collected.

        >>> import torch, flodl as fl
        >>> from torch import nn
        >>> g = fl.FlowBuilder(nn.Linear(2, 2)).tag("out").build()
        >>> _ = g(torch.ones(4, 2))
        >>> list(g.collect("out"))
        ['out']
        """
        return self._collect(tags, Reduce.MEAN, "collect")

    def collect_with(
        self, tags: str | list[str] | tuple[str, ...], reduce: str
    ) -> dict[str, float]:
        """Like :meth:`collect`, reducing each tagged tensor with ``reduce``: ``"mean"``,
        ``"sum"``, ``"max"``, ``"min"`` or ``"norm"`` (the L2 norm of all its elements; a
        :class:`Reduce` works too). A one-element value is taken as is. The epoch value
        (``flush``) is the mean over the batches, as for every metric.

        >>> import torch, flodl as fl
        >>> from torch import nn
        >>> g = fl.FlowBuilder(nn.Identity()).tag("x").build()
        >>> _ = g(torch.tensor([3.0, -4.0]))
        >>> g.collect_with("x", "norm"), g.collect_with(["x"], "min")
        ({'x': 5.0}, {'x': -4.0})
        """
        names = (tags,) if isinstance(tags, str) else tuple(tags)
        try:
            reducer = Reduce(reduce)
        except ValueError:
            choices = ", ".join(repr(r.value) for r in Reduce)
            raise ValueError(
                f"collect_with: reduce must be one of {choices}, got {reduce!r}"
            ) from None
        return self._collect(names, reducer, "collect_with")

    def _collect(self, tags: tuple[str, ...], reduce: Reduce, method: str) -> dict[str, float]:
        root = self._tree()
        if not tags:
            raise PathError(f"{method}() needs at least one tag (or tag group) name", "")
        pending: list[tuple[Graph, str, float]] = []
        collected: dict[str, float] = {}
        for name in self._expand(tags):
            target = root.validate_path(name)
            if target.kind is not PathKind.TAG:
                raise PathError(
                    f'{method}: "{name}" resolves to a {target.kind.value}, not a tag', name
                )
            value = target.graph.tagged(target.name)
            if value is None:
                raise ValueError(
                    f"{method}: tag '{name}' has no value yet — run a forward pass before collecting"
                )
            if isinstance(value, torch.Tensor):
                if value.numel() == 0:
                    raise ValueError(
                        f"{method}: tag '{name}' holds an empty tensor (no {reduce.value})"
                    )
                number = reduce.apply(value)
            else:
                number = to_float(f"{method}('{name}')", value)
            target.graph._metrics.claim(target.name, "collect", f"{method}('{name}')")
            pending.append((target.graph, target.name, number))
            collected[name] = number
        for graph, local, number in pending:
            graph._metrics.add(local, [number])
        return collected

    def record_scalar(self, name: str, value: float | torch.Tensor) -> None:
        """Append one number (or one-element tensor) to metric ``name``'s per-batch buffer."""
        _check_name("record_scalar", name)
        number = to_float(f"record_scalar('{name}')", value)
        self._metrics.claim(name, "record", f"record_scalar('{name}')")
        self._metrics.add(name, [number])

    def record(self, name: str, values: list[float]) -> None:
        """Append several numbers to metric ``name``'s per-batch buffer."""
        _check_name("record", name)
        if isinstance(values, int | float) or (
            isinstance(values, torch.Tensor) and values.dim() == 0
        ):
            raise TypeError(
                f"record('{name}', values) takes several numbers (a list or a 1-D tensor), got "
                f"one; for one number use record_scalar('{name}', value)"
            )
        numbers = [to_float(f"record('{name}')", v) for v in values]
        self._metrics.claim(name, "record", f"record('{name}')")
        self._metrics.add(name, numbers)

    def record_at(self, path: str, value: float | torch.Tensor) -> None:
        """``record_scalar`` into the graph named by the path's prefix: ``"encoder.loss"``."""
        graph, name = self._split(path)
        graph.record_scalar(name, value)

    def collected(self, name: str) -> list[float]:
        """The values buffered for ``name`` since the last flush."""
        return list(self._metrics.buffers.get(name, ()))

    # ------------------------------------------------------------------ epochs
    def flush(self, *names: str) -> None:
        """Close the per-batch buffers: each one's mean is appended to its epoch history.

        No arguments: every buffer of this graph and of every child graph, recursively, and the
        epoch ends (``end_epoch()`` does this). With names (metric names, tag groups or paths
        like ``"encoder.loss"``): exactly those; a name never recorded raises, and nothing is
        flushed.

        Which epoch the values belong to: if one of the flushed metrics already has a value in
        the latest epoch, a new one (the next epoch's first flush). Otherwise, a flush with
        names adds to the latest epoch, even an ended one (``flush("loss")`` then
        ``flush("acc")`` make one epoch; validation flushed by name after ``end_epoch()`` joins
        the epoch just ended); a flush without names adds to it unless this graph ended it,
        and starts a new one if it did. A child's own ``flush()`` or ``flush_local()`` ends
        the epoch for the child only: the root's next ``flush()`` still adds to it.

        The graph's tree keeps one epoch count: what a flush from this graph puts in its
        children's histories is numbered like its own metrics.
        """
        tree = self._tree()._tree_graphs()
        if not names:
            plan = [(g._metrics, list(g._metrics.buffers)) for g in tree]
        else:
            by_graph: dict[int, tuple[Metrics, list[str]]] = {}
            for name in self._expand(names):
                graph, local = self._split(name)
                graph._require_known(local, name)
                by_graph.setdefault(id(graph), (graph._metrics, []))[1].append(local)
            plan = list(by_graph.values())
        flush_epoch([g._metrics for g in tree], plan, close=not names)

    def flush_local(self, *names: str) -> None:
        """Like ``flush`` but for this graph only (no recursion into children): with no names,
        every buffer of this graph, and the epoch ends for this graph only."""
        keys = self._expand(names) if names else list(self._metrics.buffers)
        for key in keys:
            self._require_known(_check_name("flush_local", key), key)
        self._metrics.flush(keys, close=not names)

    @property
    def flush_count(self) -> int:
        """How many epochs hold data flushed from this graph (its own metrics, or its
        children's flushed from it): flushes within one epoch count once (see :meth:`flush`)."""
        return self._metrics.flush_count

    @property
    def flush_times(self) -> list[float]:
        """Seconds (monotonic) from the graph's creation to the last flush of each epoch."""
        return list(self._metrics.flush_times)

    def _epoch_histories(self, prefix: str = "") -> dict[str, dict[int, float]]:
        """Dotted path -> {zero-based epoch: value} of every flushed metric of the tree."""
        m = self._metrics
        out = {prefix + k: m.by_epoch(k) for k in m.history}
        for label, child in self._tree().children_graphs().items():
            out.update(child._epoch_histories(f"{prefix}{label}."))
        return out

    def latest_metrics(self) -> dict[str, float]:
        """Dotted label path -> the value flushed in the latest epoch, for this graph and its
        children (the latest epoch of any graph of the tree). A metric with no value in that
        epoch is left out, not given its older one.

        This is what ``fl.Monitor.log(epoch, elapsed, graph)`` records.

        >>> import flodl as fl
        >>> from torch import nn
        >>> enc = fl.FlowBuilder(nn.Linear(2, 4)).label("encoder").build()
        >>> model = fl.FlowBuilder(enc).through(nn.Linear(4, 1)).build()
        >>> model.record_scalar("loss", 0.5); model.record_at("encoder.aux", 0.25); model.flush()
        >>> model.latest_metrics()
        {'loss': 0.5, 'encoder.aux': 0.25}
        """
        return self._latest_in(self._latest_epoch())

    def latest_metrics_local(self) -> dict[str, float]:
        """This graph's own metrics only, in first-recorded order (those of ``latest_metrics``)."""
        return self._latest_in(self._latest_epoch(), local=True)

    def _latest_epoch(self) -> int:
        """The latest epoch of this graph and the graphs below it (-1 before any flush)."""
        return max(g._metrics.flush_count for g in self._tree_graphs()) - 1

    def _latest_in(self, epoch: int, prefix: str = "", local: bool = False) -> dict[str, float]:
        m = self._metrics
        out = {
            prefix + name: m.history[name][-1]
            for name in m.order
            if m.history.get(name) and m.last_epoch(name) == epoch
        }
        if not local:
            for label, child in self._tree().children_graphs().items():
                out.update(child._latest_in(epoch, f"{prefix}{label}."))
        return out

    def reset_trend(self, *names: str) -> None:
        """Forget epoch history: of ``names`` (groups expand), or all of it with no arguments."""
        sources = self._metrics.__dict__.get("sources", {})
        if not names:
            self._metrics.history.clear()
            self._metrics.epoch_index().clear()
            for key in set(sources) - set(self._metrics.buffers):
                del sources[key]
            return
        keys = self._expand(names)
        for key in keys:
            self._require_known(key, key)
        for key in keys:
            self._metrics.forget(key)
            if key not in self._metrics.buffers:
                sources.pop(key, None)

    # ------------------------------------------------------------------ trends
    def trend(self, name: str) -> Trend:
        """The epoch history of metric ``name`` as a :class:`Trend` (a path delegates to a child).

        A tag that has not been flushed yet gives an empty trend; a name that is neither a tag
        nor a recorded metric raises (a typo must not read as "not improving" forever).

        >>> import flodl as fl
        >>> from torch import nn
        >>> g = fl.FlowBuilder(nn.Linear(2, 2)).build()
        >>> for v in (1.0, 0.5, 0.25):
        ...     g.record_scalar("loss", v); g.flush()
        >>> g.trend("loss").improving()
        True
        """
        if isinstance(name, str) and "." in name:
            return self.trend_at(name)
        self._require_known(name, name)
        return Trend(name, tuple(self._metrics.history.get(name, ())))

    def trends(self, *names: str) -> TrendGroup:
        """A :class:`TrendGroup` over ``names`` (tag groups expand)."""
        return TrendGroup(self.trend(n) for n in self._expand(names))

    def trend_at(self, path: str) -> Trend:
        """``trend`` of the metric at ``path`` (``"encoder.loss"``)."""
        graph, name = self._split(path)
        return Trend(path, graph.trend(name).values)  # named as asked: "encoder.loss"

    def eta(self, total_epochs: int) -> float:
        """Seconds left for ``total_epochs`` at the mean epoch pace so far (0.0 before a flush)."""
        m = self._metrics
        if not m.flush_count:
            return 0.0
        return m.flush_times[-1] / m.flush_count * max(total_epochs - m.flush_count, 0)

    # ------------------------------------------------------------------ helpers
    def _tree(self) -> Graph:
        return self  # type: ignore[return-value]

    def _tree_graphs(self) -> list[Graph]:
        """This graph and its labelled descendants, parents first, in registration order."""
        out = [self._tree()]
        for child in self._tree().children_graphs().values():
            out += child._tree_graphs()
        return out

    def _split(self, path: str) -> tuple[Graph, str]:
        if not isinstance(path, str) or not path:
            raise PathError(f"expected a metric name or path, got {path!r}", str(path))
        prefix, _, last = path.rpartition(".")
        graph = self._tree().subgraph(prefix) if prefix else self._tree()
        return graph, _check_name("record_at" if prefix else "metric", last)

    def _require_known(self, name: str, shown: str) -> None:
        graph = self._tree()
        if self._metrics.known(name) or name in graph.tag_map or name in graph.tag_groups:
            return
        candidates = list(self._metrics.order) + list(graph.tag_map)
        close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.5)
        known = ", ".join(repr(c) for c in self._metrics.order) or "none yet"
        raise PathError(
            f"no metric or tag '{shown}' in this graph (recorded metrics: {known}) — record it "
            "with record_scalar/collect first",
            shown,
            close,
        )
