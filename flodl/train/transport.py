"""Carrying messages between ranks and the coordinator over a c10d ``TCPStore``.

Each direction is a sequence of keys: the coordinator writes ``ctl/<rank>/<n>``, a rank writes
``up/<rank>/<n>``. Readers are helper threads blocking on ``store.wait`` (with a short timeout, so
they notice when to stop) and pushing into a ``queue.Queue`` the training loop drains without
blocking. Every thread uses its own store client (c10d stores are not shared across threads).
Values are pickled: both ends are processes of the same training job.

Rank 0 runs the coordinator's thread in its own process, so its messages to and from the
coordinator skip the store: :class:`LocalLink` is a pair of in-process queues (no reader or
sender threads, no pickling, no round trip).

A rank never waits on the store from its training thread: :class:`RankChannel` hands messages to a
sender thread, which writes whatever has queued up since its last write as one key (a
:class:`Bundle`), so a burst of per-batch timings costs one round trip instead of one each.
"""

from __future__ import annotations

import pickle
import queue
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from flodl.errors import _renamed
from flodl.train.config import TIMEOUT
from flodl.train.errors import CoordinatorLostError

# ``CoordinatorLost`` was this module's name for CoordinatorLostError; it still resolves, with a
# warning.
__getattr__ = _renamed(__name__, {"CoordinatorLost": CoordinatorLostError})

_STOP = b"\x00flodl-stop"


def drain(inbox: queue.Queue) -> list[Any]:
    """Everything queued now, in order, without waiting."""
    out = []
    while True:
        try:
            out.append(inbox.get_nowait())
        except queue.Empty:
            return out


def next_within(inbox: queue.Queue, timeout: float) -> Any:
    """The next message, or None after ``timeout`` seconds without one."""
    try:
        return inbox.get(timeout=timeout)
    except queue.Empty:
        return None


class Bundle(tuple):
    """Several messages written under one key; readers unpack them in order."""


def client(host: str, port: int, timeout: float = TIMEOUT) -> dist.TCPStore:
    return dist.TCPStore(
        host, port, is_master=False, timeout=timedelta(seconds=timeout), wait_for_workers=False
    )


class KeyStream:
    """Reads ``<prefix>/0``, ``<prefix>/1``, ... in order on a background thread."""

    def __init__(self, host: str, port: int, prefix: str, sink: queue.Queue) -> None:
        self._host, self._port = host, port
        self._store = client(host, port, timeout=3600)
        self._prefix, self._sink = prefix, sink
        self._next = 0
        self._thread = threading.Thread(target=self._run, name=f"flodl-recv-{prefix}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            key = f"{self._prefix}/{self._next}"
            try:
                raw = self._store.get(key)  # blocks until the key exists
                if raw == _STOP:  # left in place: later writes see it and are dropped
                    return
                self._store.delete_key(key)
            except RuntimeError:  # the store went away: the job is over
                return
            self._next += 1
            value = pickle.loads(raw)
            for msg in value if isinstance(value, Bundle) else (value,):
                self._sink.put(msg)

    def stop(self) -> None:
        """End the reader: a stop marker in the next slot (never over a real message)."""
        if not self._thread.is_alive():
            return
        try:
            store = client(self._host, self._port, timeout=5)
            n = self._next
            while store.compare_set(f"{self._prefix}/{n}", "", _STOP) != _STOP:  # type: ignore[arg-type]  # torch's annotation says str; the store takes bytes
                n += 1  # a real message is there: the reader will consume it first
        except RuntimeError:
            return
        self._thread.join(timeout=5)


class KeyWriter:
    """Writes ``<prefix>/0``, ``<prefix>/1``, ... (one writer per prefix)."""

    def __init__(self, store: dist.TCPStore, prefix: str) -> None:
        self._store, self._prefix, self._n = store, prefix, 0

    def put(self, value: Any) -> bool:
        """Write the next message; False (dropped) once the reader has stopped."""
        raw = pickle.dumps(value)
        if self._store.compare_set(f"{self._prefix}/{self._n}", "", raw) != raw:  # type: ignore[arg-type]  # torch's annotation says str; the store takes bytes
            return False  # the slot holds the reader's stop marker
        self._n += 1
        return True


class Sender:
    """Writes queued messages from a background thread, in order, batching what has piled up."""

    _CLOSE = object()

    def __init__(self, writer: KeyWriter, name: str) -> None:
        self._writer = writer
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, msg: Any) -> None:
        self._queue.put(msg)

    def _run(self) -> None:
        while True:
            pending = [self._queue.get()]
            while True:
                try:
                    pending.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            closing = pending[-1] is self._CLOSE
            if closing:
                pending.pop()
            if pending:
                try:
                    self._writer.put(pending[0] if len(pending) == 1 else Bundle(pending))
                except RuntimeError:  # the store went away: the job is over
                    return
            if closing:
                return

    def close(self, timeout: float = 10.0) -> None:
        """Flush everything sent so far, then stop."""
        if self._thread.is_alive():
            self._queue.put(self._CLOSE)
            self._thread.join(timeout)


class RankChannel:
    """A rank's end: send to the coordinator (never blocking), receive control messages.

    With ``watch`` (a :class:`Heartbeat`) and ``limit`` seconds, :meth:`wait` raises
    :class:`CoordinatorLostError` once the store has not answered the heartbeat for ``limit`` seconds:
    a frozen rank 0 (SIGSTOP, a hang in native code) holds the store, and a store call to a
    frozen server blocks forever, whatever its timeout, so the silence is the only sign.
    """

    def __init__(
        self,
        host: str,
        port: int,
        rank: int,
        *,
        watch: Heartbeat | None = None,
        limit: float | None = None,
        lost_key: str | None = None,
    ) -> None:
        self._inbox: queue.Queue = queue.Queue()
        self._reader = KeyStream(host, port, f"ctl/{rank}", self._inbox)
        self._sender = Sender(KeyWriter(client(host, port), f"up/{rank}"), f"flodl-send-{rank}")
        self._watch, self._limit = watch, limit
        # Set by a supervising process that hosts the store when it lost rank 0.
        self._lost_key = lost_key
        self._lost_store = client(host, port) if lost_key is not None else None
        self.lost = False

    def send(self, msg: Any) -> None:
        self._sender.put(msg)

    def poll(self) -> list[Any]:
        return drain(self._inbox)

    def wait(self, timeout: float) -> Any:
        msg = next_within(self._inbox, timeout)
        if msg is not None:
            return msg
        if self._lost_store is not None and self._lost_store.check([self._lost_key]):  # type: ignore[list-item]
            raise CoordinatorLostError(self._lost_store.get(self._lost_key).decode())  # type: ignore[arg-type]
        if self._watch is not None and self._limit is not None:
            silent = self._watch.silent_for()
            if silent > self._limit:
                self.lost = True
                raise CoordinatorLostError(
                    f"rank 0 stopped responding: its control store has not answered for "
                    f"{silent:.0f} s (its process is frozen, blocked in native code, or gone)"
                )
        return None

    def close(self) -> None:
        if self.lost:  # every store call would block forever: leave the threads (daemons) be
            return
        self._sender.close()
        self._reader.stop()


class LocalLink:
    """Rank 0's channel to the coordinator thread in its own process: two in-process queues.

    ``inbox`` receives the coordinator's messages to rank 0; what rank 0 sends goes straight into
    the coordinator's inbox (set by :class:`CoordinatorChannel`). The same methods as
    :class:`RankChannel`; never lost (the coordinator lives and dies with this process).
    """

    def __init__(self) -> None:
        self.inbox: queue.Queue = queue.Queue()
        self.coordinator_inbox: queue.Queue | None = None
        self.lost = False

    def send(self, msg: Any) -> None:
        assert self.coordinator_inbox is not None, "the coordinator's channel is not open yet"
        self.coordinator_inbox.put(msg)

    def poll(self) -> list[Any]:
        return drain(self.inbox)

    def wait(self, timeout: float) -> Any:
        return next_within(self.inbox, timeout)

    def close(self) -> None:
        return


class CoordinatorChannel:
    """The coordinator's end: one inbox fed by every rank, one writer per rank. With ``local``
    (rank 0's :class:`LocalLink`), rank 0's messages go through in-process queues."""

    def __init__(self, host: str, port: int, world: int, local: LocalLink | None = None) -> None:
        self.inbox: queue.Queue = queue.Queue()
        self._local = local
        first = 0
        if local is not None:
            local.coordinator_inbox = self.inbox
            first = 1
        self._readers = [KeyStream(host, port, f"up/{r}", self.inbox) for r in range(first, world)]
        self._senders: dict[int, Sender] = {
            r: Sender(KeyWriter(client(host, port), f"ctl/{r}"), f"flodl-ctl-{r}")
            for r in range(first, world)
        }
        self.store = client(host, port)  # the coordinator thread's own client

    def send(self, rank: int, msg: Any) -> None:
        if rank == 0 and self._local is not None:
            self._local.inbox.put(msg)
        else:
            self._senders[rank].put(msg)

    def flush(self) -> None:
        """Deliver everything sent so far (the senders stop)."""
        for sender in self._senders.values():
            sender.close()

    def close(self) -> None:
        self.flush()
        for reader in self._readers:
            reader.stop()


HEARTBEAT_INTERVAL = 0.5


def heartbeat_timeout(timeout: float) -> float:
    """How long a rank's heartbeat may stay silent: half the run's timeout (at least 5 s), so a
    frozen rank is named before its peers' collectives time out waiting for it."""
    return max(timeout / 2, 5.0)


def progress_key(rank: int) -> str:
    return f"progress/{rank}"


def heartbeat_key(rank: int) -> str:
    return f"hb/{rank}"


def still_beating(
    store: dist.Store, ranks: list[int], within: float = 3 * HEARTBEAT_INTERVAL
) -> bool:
    """Whether every one of ``ranks`` bumped its heartbeat within ``within`` seconds: alive (if
    stuck), not crashed. False when the store cannot tell."""
    try:
        first = {r: store.add(heartbeat_key(r), 0) for r in ranks}
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            time.sleep(0.1)
            if all(store.add(heartbeat_key(r), 0) != first[r] for r in ranks):
                return True
    except RuntimeError:  # the store is gone: nothing to tell
        pass
    return False


def ranks_behind(store: dist.Store, world: int, entered: int) -> list[int]:
    """The ranks whose heartbeat says they entered fewer than ``entered`` collectives (the
    lockstep progress in ``progress/<rank>``): after a collective this rank entered as its
    ``entered``-th timed out, the ranks it waited for. Empty when the store cannot tell."""
    behind = []
    try:
        for r in range(world):
            key = progress_key(r)
            if store.check([key]) and int(store.get(key).split()[0]) < entered:
                behind.append(r)
    except (RuntimeError, ValueError):  # the store is gone: nothing to tell
        return []
    return behind


class Heartbeat:
    """A rank's proof of life: a thread bumping ``hb/<rank>`` in the control store."""

    def __init__(self, host: str, port: int, rank: int) -> None:
        self._store = client(host, port, timeout=30)
        self._key = heartbeat_key(rank)
        self._progress_key = progress_key(rank)
        # Set by a rank in lockstep: what it has done so far (``LockstepRank.progress``), for
        # the supervising process to tell a rank its peers wait for from the waiting ones.
        self.progress: Callable[[], str] | None = None
        self._stop = threading.Event()
        self._answered = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="flodl-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._store.add(self._key, 1)
                if self.progress is not None:
                    self._store.set(self._progress_key, self.progress())
            except RuntimeError:  # the store went away: the job is over
                return
            self._answered = time.monotonic()
            self._stop.wait(HEARTBEAT_INTERVAL)

    def silent_for(self) -> float:
        """Seconds since the control store last answered this heartbeat."""
        return time.monotonic() - self._answered

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout)


class GlooCollective:
    """Parameter averaging over the default process group (gloo on CPU, NCCL on GPUs)."""

    def __init__(self, world: int) -> None:
        self.world = world

    def average_(self, flat, weight: float) -> None:
        """In place: ``Σ w_r · θ_r / Σ w_r`` over ranks, in one all-reduce (the weight rides along)."""
        import torch

        buf = torch.cat([flat * weight, flat.new_tensor([weight])])
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        flat.copy_(buf[:-1] / buf[-1])
