"""How an epoch is iterated: resident (gather on the device), streaming with a prefetch thread, or
streaming in the consumer's thread (Python datasets, reproducible random draws)."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from typing import cast

import torch

from flodl.data.batch import Batch
from flodl.data.errors import PrefetchError
from flodl.data.sources import Source

# How long blocking queue operations wait before re-checking for cancellation: short enough that
# an abandoned epoch stops promptly, long enough not to spin.
_POLL_S = 0.05
# Bound on waiting for a prefetch thread to finish its current get_batch after cancellation.
_JOIN_TIMEOUT_S = 30.0


class EpochIterator(Iterator[Batch]):
    """Batches of one epoch; ``len()`` is the number of batches the epoch yields in total.

    Breaking out of the loop (or calling :meth:`close`, or leaving a ``with`` block) releases
    the epoch's resources; for a streaming loader that stops its prefetch thread.
    """

    def __init__(self, num_batches: int, index: dict[str, int]) -> None:
        self._num_batches = num_batches
        self._index = index
        self._names = tuple(index)
        self._position = 0

    def __len__(self) -> int:
        return self._num_batches

    def __iter__(self) -> EpochIterator:
        return self

    def __enter__(self) -> EpochIterator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the epoch early and release what it holds (idempotent)."""
        self._position = self._num_batches

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class ResidentEpoch(EpochIterator):
    """Every tensor lives on the device; each batch is an ``index_select`` by a device permutation."""

    def __init__(
        self,
        tensors: tuple[torch.Tensor, ...],
        batches: list[torch.Tensor],
        index: dict[str, int],
    ) -> None:
        super().__init__(len(batches), index)
        self._tensors = tensors
        self._batches = batches

    def __next__(self) -> Batch:
        i = self._position
        if i >= self._num_batches:
            raise StopIteration
        self._position = i + 1
        rows = self._batches[i]
        return Batch._trusted(
            tuple(t.index_select(0, rows) for t in self._tensors), self._index, self._names
        )

    def close(self) -> None:
        super().close()
        self._batches = []


class _Failure:
    """An exception raised in the prefetch thread, carried to the consumer."""

    __slots__ = ("batch", "exc", "indices")

    def __init__(self, exc: BaseException, batch: int, indices: torch.Tensor) -> None:
        self.exc, self.batch, self.indices = exc, batch, indices


_END = object()


def _put(out: queue.Queue, item: object, stop: threading.Event) -> bool:
    """Blocking put that gives up when the epoch is cancelled (back-pressure without deadlock)."""
    while not stop.is_set():
        try:
            out.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _prefetch(
    source: Source,
    batches: list[torch.Tensor],
    device: torch.device,
    out: queue.Queue,
    stop: threading.Event,
) -> None:
    """The prefetch thread: fetch, (pin, copy on a side stream,) enqueue — until done or cancelled."""
    cuda = device.type == "cuda"
    stream = torch.cuda.Stream(device) if cuda else None
    for i, rows in enumerate(batches):
        if stop.is_set():
            return
        try:
            event = None
            if cuda:
                with torch.cuda.stream(stream):
                    tensors = source.fetch_to(rows, device, pin=True)
                    event = torch.cuda.Event()
                    event.record(stream)
            else:
                tensors = source.fetch_to(rows, device)
        except BaseException as exc:
            _put(out, _Failure(exc, i, rows), stop)
            return
        if not _put(out, (tensors, event), stop):
            return
    _put(out, _END, stop)


class StreamingEpoch(EpochIterator):
    """A background thread loads batches ahead into a bounded queue (``depth`` batches)."""

    def __init__(
        self,
        source: Source,
        batches: list[torch.Tensor],
        index: dict[str, int],
        device: torch.device,
        depth: int,
        epoch: int,
    ) -> None:
        super().__init__(len(batches), index)
        self._device = device
        self._epoch = epoch
        self._queue: queue.Queue = queue.Queue(maxsize=max(depth, 1))
        self._stop = threading.Event()
        # Started by the first next(): len() of an epoch, or one made and dropped, loads nothing.
        self._thread = threading.Thread(
            target=_prefetch,
            args=(source, batches, device, self._queue, self._stop),
            name=f"flodl-prefetch-epoch-{epoch}",
            daemon=True,
        )

    @property
    def thread(self) -> threading.Thread:
        """The prefetch thread (for tests and diagnostics); started by the first ``next()``."""
        return self._thread

    def _get(self) -> object:
        while True:
            try:
                return self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise PrefetchError(
                        f"DataLoader: the prefetch thread of epoch {self._epoch} stopped"
                        f" unexpectedly after {self._position} batches"
                    ) from None

    def __next__(self) -> Batch:
        if self._position >= self._num_batches:
            self.close()
            raise StopIteration
        if self._thread.ident is None:
            self._thread.start()
        item = self._get()
        if isinstance(item, _Failure):
            self.close()
            item.exc.add_note(_batch_note(item.batch, self._epoch, item.indices))
            raise item.exc
        if item is _END:  # the plan ended early: cannot happen unless batches were mutated
            self.close()
            raise StopIteration
        self._position += 1
        tensors, event = cast("tuple[tuple[torch.Tensor, ...], torch.cuda.Event | None]", item)
        if event is not None:
            current = torch.cuda.current_stream(self._device)
            current.wait_event(event)
            for t in tensors:  # memory made on the side stream is now used on this one
                t.record_stream(current)
        return Batch._trusted(tensors, self._index, self._names)

    def close(self) -> None:
        super().close()
        self._stop.set()
        while True:  # drop prefetched batches now rather than when the iterator is collected
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(_JOIN_TIMEOUT_S)


class DirectEpoch(EpochIterator):
    """Each batch is fetched when it is asked for, in the consumer's thread (like torch's
    ``num_workers=0``): a dataset's random draws then happen in a fixed order relative to the
    training loop's, so ``fl.manual_seed`` reproduces a run exactly."""

    def __init__(
        self,
        source: Source,
        batches: list[torch.Tensor],
        index: dict[str, int],
        device: torch.device,
        epoch: int,
    ) -> None:
        super().__init__(len(batches), index)
        self._source = source
        self._batches = batches
        self._device = device
        self._epoch = epoch

    def __next__(self) -> Batch:
        i = self._position
        if i >= self._num_batches:
            raise StopIteration
        rows = self._batches[i]
        try:
            tensors = self._source.fetch_to(rows, self._device)
        except BaseException as exc:
            self.close()
            exc.add_note(_batch_note(i, self._epoch, rows))
            raise
        self._position = i + 1
        return Batch._trusted(tensors, self._index, self._names)

    def close(self) -> None:
        super().close()
        self._batches = []


def _batch_note(batch: int, epoch: int, indices: torch.Tensor) -> str:
    rows = indices.tolist()
    shown = rows if len(rows) <= 16 else [*rows[:16], "..."]
    return (
        f"flodl.data: raised while loading batch {batch} of epoch {epoch} (dataset indices {shown})"
    )
