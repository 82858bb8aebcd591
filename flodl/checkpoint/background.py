"""Background checkpoints: copy the tensors between steps, write the file on another thread.

A save that blocks training for the whole write (encode, checksum, fsync) costs a large model
seconds per checkpoint. ``save_checkpoint(path, background=True)`` instead takes a
:class:`ModelSnapshot` — a CPU copy of every parameter and buffer, so later in-place updates by
the optimizer never leak into the file — and hands the write to a :class:`CpuWorker`, one
background thread with a bounded queue. Training waits only for the copy.

* The file is written exactly as a blocking save writes it: atomically (temporary file, fsync,
  rename), so a crash or ``kill -9`` at any moment leaves the previous file intact and the new
  one either complete or absent.
* A failed write is logged (ERROR, ``flodl.checkpoint``) as soon as the writer hits it, naming
  its file and its :func:`~flodl.checkpoint.listeners.save_tags` labels (the Trainer's
  ``version``), and :func:`flush` raises the first failure since the last flush. A failure never
  costs a later save: the next background call takes its snapshot and queues its write as
  usual. A path that cannot be written for sure (no such directory) is refused at the call
  instead, as a blocking save refuses it. ``fl.Monitor.finish`` and the Trainer's end of
  training call :func:`flush`.
* At normal interpreter exit (the end of the script, ``sys.exit``, an uncaught exception) the
  pending saves are still written: an ``atexit`` hook flushes the default worker. A process
  killed by a signal, or ended with ``os._exit`` (as multiprocessing children are), writes
  nothing more: call :func:`flush` before such an exit.
* The queue is bounded (``max_pending``, 2 by default): a save submitted while it is full waits
  for room, so snapshots never pile up in memory faster than the disk takes them.

One thread works through the queue in order, so saves land in the order they were requested.

>>> import tempfile, torch, flodl as fl
>>> from pathlib import Path
>>> model = torch.nn.Linear(4, 2)
>>> path = Path(tempfile.mkdtemp()) / "model.fdl"
>>> fl.save_checkpoint(path, list(model.named_parameters()), background=True)
>>> fl.checkpoint.flush()
>>> fl.checkpoint_keys(path)
['weight', 'bias']
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from flodl.checkpoint import listeners
from flodl.checkpoint.errors import CheckpointError
from flodl.checkpoint.streams import refuse_unwritable
from flodl.log import get_logger

__all__ = ["CpuWorker", "ModelSnapshot", "default_worker", "flush"]

log = get_logger("flodl.checkpoint")

_STOP = object()


class CpuWorker:
    """One background thread running submitted callables in order, with a bounded queue.

    ``submit(fn, *args, **kwargs)`` returns a :class:`concurrent.futures.Future` at once (or
    after waiting for room when ``max_pending`` tasks are already queued). A task that raises
    does not stop the worker: the error is kept, raised by :meth:`flush` and, if nobody flushed
    first, by the next :meth:`submit`. (Background checkpoint saves queue their writes without
    that check: a failed write is logged when it happens and must not cost the next save.)
    :meth:`close` flushes and stops the thread.

    >>> worker = CpuWorker(max_pending=4)
    >>> results = []
    >>> for i in range(3):
    ...     _ = worker.submit(results.append, i)
    >>> worker.flush()
    >>> results
    [0, 1, 2]
    >>> worker.close()
    """

    def __init__(self, max_pending: int = 2, *, name: str = "flodl-cpu-worker") -> None:
        if not isinstance(max_pending, int) or isinstance(max_pending, bool) or max_pending < 1:
            raise ValueError(f"CpuWorker(max_pending={max_pending!r}): need an integer >= 1")
        self.max_pending = max_pending
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_pending)
        # Each failure, and whether its task already logged it (a checkpoint write does).
        self._errors: list[tuple[BaseException, bool]] = []
        self._lock = threading.Lock()
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                future, fn, args, kwargs, reported = item
                self._busy = True
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn(*args, **kwargs))
                    except BaseException as err:  # kept for flush(); the worker goes on
                        with self._lock:
                            self._errors.append((err, reported))
                        future.set_exception(err)
            finally:
                self._busy = False
                self._queue.task_done()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Queue ``fn(*args, **kwargs)``; raises a previous task's error first (and forgets it)."""
        if self._closed:
            raise RuntimeError("CpuWorker.submit: the worker is closed")
        self._raise_error()
        return self._enqueue(fn, args, kwargs)

    def _enqueue(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        reported: bool = False,
    ) -> Future[Any]:
        """Queue a task without raising earlier errors first. ``reported``: the task logs its
        own failure, so :meth:`flush` need not log it again when it raises another one."""
        if self._closed:
            raise RuntimeError("CpuWorker.submit: the worker is closed")
        future: Future[Any] = Future()
        self._queue.put((future, fn, args, kwargs, reported))
        return future

    def is_idle(self) -> bool:
        """True when nothing is queued or running (e.g. to skip a save while one is in flight)."""
        return self._queue.unfinished_tasks == 0

    @property
    def pending(self) -> int:
        """Tasks queued or running."""
        return self._queue.unfinished_tasks

    def flush(self) -> None:
        """Wait until every submitted task has run; raise the first error since the last flush
        (the others are logged), then forget them."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("CpuWorker.flush called from its own task: it would wait forever")
        self._queue.join()
        self._raise_error()

    def _take_errors(self) -> list[tuple[BaseException, bool]]:
        with self._lock:
            errors, self._errors = self._errors, []
        return errors

    def _raise_error(self) -> None:
        errors = self._take_errors()
        for extra, reported in errors[1:]:
            if not reported:
                log.error("another background task failed as well: %r", extra)
        if errors:
            raise errors[0][0]

    def close(self) -> None:
        """Flush, then stop the thread; idempotent. Raises what :meth:`flush` raises."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._queue.put(_STOP)
            self._thread.join()

    def __enter__(self) -> CpuWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cpu_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor that shares nothing with ``tensor`` (a later in-place update cannot leak)."""
    tensor = tensor.detach()
    if tensor.device.type == "cpu":
        return tensor.clone()
    return tensor.to("cpu", copy=True)


@dataclass(frozen=True)
class ModelSnapshot:
    """A CPU copy of a model's parameters and buffers, taken between training steps.

    ``params`` and ``buffers`` are ``(name, tensor)`` lists in the model's order; the copies
    share no memory with the model, so the optimizer may go on updating it while the snapshot is
    written (:meth:`save`, usually on a :class:`CpuWorker`). ``structural_hash`` is the graph's,
    when the model is a flodl Graph. ``seconds`` is how long the copy took.

    >>> import torch, flodl as fl
    >>> model = torch.nn.BatchNorm1d(3)
    >>> snap = fl.checkpoint.ModelSnapshot.of(model)
    >>> with torch.no_grad():
    ...     _ = model.weight.add_(1.0)
    >>> snap.params[0][0], snap.params[0][1].tolist(), [n for n, _ in snap.buffers]
    ('weight', [1.0, 1.0, 1.0], ['running_mean', 'running_var', 'num_batches_tracked'])
    """

    params: list[tuple[str, torch.Tensor]]
    buffers: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    structural_hash: str | bytes | None = None
    seconds: float = 0.0

    @classmethod
    def of(cls, module: torch.nn.Module) -> ModelSnapshot:
        """Snapshot a module (a Graph's snapshot carries its structural hash)."""
        digest = getattr(module, "structural_hash", None)
        digest = digest() if callable(digest) else None
        return cls.from_tensors(module.named_parameters(), module.named_buffers(), digest)

    @classmethod
    def from_tensors(
        cls,
        params: Iterable[tuple[str, torch.Tensor]] | dict[str, torch.Tensor],
        buffers: Iterable[tuple[str, torch.Tensor]] | dict[str, torch.Tensor] | None = None,
        structural_hash: str | bytes | None = None,
    ) -> ModelSnapshot:
        """Snapshot named tensors (lists of pairs or dicts), as ``fl.save_checkpoint`` takes them."""
        start = time.perf_counter()
        pairs = [_pairs(params, "params"), _pairs(buffers or [], "buffers")]
        with torch.no_grad():
            copied = [[(name, _cpu_copy(t)) for name, t in group] for group in pairs]
        return cls(copied[0], copied[1], structural_hash, time.perf_counter() - start)

    @property
    def nbytes(self) -> int:
        """Bytes held by the copies."""
        return sum(t.numel() * t.element_size() for _, t in [*self.params, *self.buffers])

    def save(self, path: str | os.PathLike[str], **options: Any) -> None:
        """Write the snapshot with ``fl.save_checkpoint`` (atomic; ``options`` pass through)."""
        from flodl.checkpoint.api import save_checkpoint

        save_checkpoint(path, self.params, self.buffers, self.structural_hash, **options)


def _pairs(named: Any, what: str) -> list[tuple[str, torch.Tensor]]:
    items = list(named.items()) if isinstance(named, dict) else list(named)
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], torch.Tensor)):
            raise CheckpointError(
                f"ModelSnapshot: {what} must be (name, tensor) pairs or a dict, got {item!r:.80}"
            )
    return items


_default: CpuWorker | None = None
_default_lock = threading.Lock()


def default_worker() -> CpuWorker:
    """The process-wide worker background saves use (created on first use, flushed at exit)."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = CpuWorker(name="flodl-checkpoint-writer")
            atexit.register(_flush_at_exit, _default)
        return _default


def flush() -> None:
    """Wait for every pending background save; raise the first error (no-op when none ran).

    >>> import flodl as fl
    >>> fl.checkpoint.flush()
    """
    worker = _default
    if worker is not None and not worker._closed:
        worker.flush()


def _flush_at_exit(worker: CpuWorker) -> None:
    pending = worker.pending
    if pending:
        log.info("writing %d pending background checkpoint(s) before exit", pending)
    worker._queue.join()
    for err, reported in worker._take_errors():
        if not reported:  # a checkpoint write logged its own failure when it happened
            log.error("a background task failed: %s", err)


def save_in_background(
    save: Callable[..., Any],
    dest: Any,
    params: Any,
    buffers: Any,
    structural_hash: str | bytes | None,
    **options: Any,
) -> None:
    """Snapshot the tensors now, then run ``save(dest, snapshot..., **options)`` (a blocking
    write) on the default worker and tell the save listeners once it is done.

    An earlier background save's failure is not raised here: the writer logged it when it
    happened and :func:`flush` raises it; this save goes ahead all the same."""
    if not isinstance(dest, str | os.PathLike):
        raise CheckpointError(
            f"background=True needs a file path (got {type(dest).__name__}): a stream may be "
            "closed or moved before the background write reaches it"
        )
    # Said at the call: a typo in the directory would otherwise surface only at the next save
    # or flush, possibly an epoch later.
    refuse_unwritable(Path(dest))
    worker = default_worker()
    snap = ModelSnapshot.from_tensors(params, buffers, structural_hash)
    log.debug(
        "checkpoint snapshot of %d tensors (%.1f MB) in %.1f ms; writing %s in the background",
        len(snap.params) + len(snap.buffers),
        snap.nbytes / 1e6,
        snap.seconds * 1e3,
        os.fspath(dest),
    )
    tags = listeners.begin(dest) or {}
    # Not submit(): it would raise an earlier write's failure in place of this save, which
    # would then be lost although the disk may be fine again.
    args = (save, os.fspath(dest), snap.params, snap.buffers, snap.structural_hash, options, tags)
    worker._enqueue(_write, args, {}, reported=True)


def _write(
    save: Callable[..., Any],
    dest: str,
    params: list[tuple[str, torch.Tensor]],
    buffers: list[tuple[str, torch.Tensor]],
    structural_hash: str | bytes | None,
    options: dict[str, Any],
    tags: dict[str, Any],
) -> None:
    start = time.perf_counter()
    try:
        save(dest, params, buffers, structural_hash, **options)
    except Exception as err:
        # Said now, as this checkpoint's failure: flush() may come much later, and the next
        # save goes ahead without raising it.
        labels = ", ".join(f"{key} {value}" for key, value in tags.items())
        what = (
            str(err) if isinstance(err, CheckpointError) else f"{dest}: {type(err).__name__}: {err}"
        )
        log.error(
            "background checkpoint save failed%s: %s — later saves go ahead; "
            "fl.checkpoint.flush() raises this error",
            f" ({labels})" if labels else "",
            what,
        )
        raise
    log.info(
        "checkpoint saved: %s (%.0f ms, background)", dest, (time.perf_counter() - start) * 1e3
    )
    listeners.notify(dest, tags, background=True)
