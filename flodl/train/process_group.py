"""The process group of a multi-rank run: joining it, and leaving it cleanly or after a failure.

Both training modes go through these functions, so the group's lifecycle is written once:

- :func:`init_launched_group`: join the group a launcher (``torchrun``) describes, under this
  restart attempt's own store keys (:func:`attempt_prefix`);
- :func:`init_spawned_group`: join the group of ranks flodl spawned itself, on its control store;
- :func:`leave_group`: release the group. A rank that finished normally first meets every
  peer (a gloo group torn down while a peer still talks to it makes the peer
  fail); a rank leaving because of an exception does not, since its peers may be blocked in a
  collective and the launcher should see this rank fail at once.

Nothing here replaces a global hook: whether the script is ending because of an uncaught
exception is read from ``sys.last_value``, which the interpreter sets before atexit handlers run.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from datetime import timedelta

import torch.distributed as dist

from flodl.log import get_logger
from flodl.train.config import TIMEOUT
from flodl.train.errors import TrainingError, naming_ranks, rank_list

log = get_logger("flodl.train")

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _bind_default_group_lazily() -> None:
    """Import ``torch.distributed.nn.functional`` now, before any process group exists.

    Its functions take ``group=group.WORLD`` as a default argument, evaluated when the module is
    first imported, and building any torch optimizer imports it (through ``torch._dynamo``).
    Imported after a group started, those defaults hold the group for the life of the process:
    ``destroy_process_group`` cannot free it and its gloo threads keep running until the
    interpreter shuts down (see :func:`leave_group` for why that aborts). Imported before any
    group exists, the defaults hold nothing.
    """
    if dist.is_available() and not dist.is_initialized():
        with contextlib.suppress(ImportError):  # a build without it has nothing holding a group
            import torch.distributed.nn.functional  # noqa: F401


_bind_default_group_lazily()


def under_launcher() -> bool:
    """True inside ``torchrun`` (or any c10d launcher): the group is already described by env vars."""
    return all(v in os.environ for v in LAUNCHER_VARS) and int(os.environ["WORLD_SIZE"]) > 1


def attempt_prefix() -> str:
    """The key prefix of this launch attempt in the launcher's store.

    torchrun keeps one store for the whole job, restarts included: a restarted rank that read
    its group's keys unprefixed could find the previous attempt's (a dead peer's address) and
    fail to connect, or wait forever. Each attempt (run id, restart count) gets its own keys.
    """
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    return f"flodl/{run}/attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"


def init_launched_group(
    backend: str, timeout: float, before_join: Callable[[dist.Store], None] | None = None
) -> None:
    """Join the process group a launcher describes (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ...)
    under this attempt's own store keys (:func:`attempt_prefix`). ``before_join(store)`` runs
    once the launcher's store is reached, before the group forms (a self-launched rank checks
    in there)."""
    limit = timedelta(seconds=timeout)
    try:
        store, rank, world = next(dist.rendezvous("env://", timeout=limit))
    except RuntimeError as err:  # DistStoreError, DistNetworkError: nobody came, or no store
        raise _no_rendezvous(err, timeout) from err
    store.set_timeout(limit)
    if before_join is not None:
        before_join(store)
    prefixed = dist.PrefixStore(attempt_prefix(), store)
    prefixed.set(f"{_JOINING}{rank}", "1")
    try:
        dist.init_process_group(backend, store=prefixed, rank=rank, world_size=world, timeout=limit)
    except dist.DistStoreError as err:  # its wait for every rank timed out
        raise _not_joined(prefixed, world, timeout) from err
    register_group(prefixed)


def _no_rendezvous(err: RuntimeError, timeout: float) -> TrainingError:
    """The error for a launcher's environment whose ranks never met. Without torchrun's own
    variables it is most likely left over in the shell, and the ranks would never come."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    env = ", ".join(f"{v}={os.environ.get(v)}" for v in ("RANK", "WORLD_SIZE"))
    message = f"the ranks did not meet within {timeout:g} s ({first})"
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        message += (
            f". RANK/WORLD_SIZE are set in the environment ({env}), so flodl waits for the other "
            "ranks of a launcher; if no launcher started this process, unset RANK, WORLD_SIZE, "
            "MASTER_ADDR and MASTER_PORT to let .devices(...) (or setup's devices=) start the ranks"
        )
    return TrainingError(message)


def _not_joined(store: dist.Store, world: int, timeout: float) -> TrainingError:
    """The error for a group that did not form within ``timeout``: which ranks never came."""
    return naming_ranks(
        _absent(store, _JOINING, world) or [],
        f"{{ranks}} did not join the group within {timeout:g} s (Trainer.setup's timeout): it "
        "started late (slow imports or data loading before setup?) or not at all; give setup "
        "a longer timeout if it was only slow",
    )


def _absent(store: dist.Store, prefix: str, world: int) -> list[int] | None:
    """The ranks that have not set ``prefix + rank`` in ``store``; None when it cannot tell
    (the store went with the rank that hosted it, or a timed-out client is unusable)."""
    try:
        return [r for r in range(world) if not store.check([f"{prefix}{r}"])]
    except Exception:
        return None


# Keys each rank sets in the group's store: before the group forms, after a collective of it
# timed out, and when it reaches the end of training.
_JOINING, _TIMED_OUT, _LEAVING = "flodl-joining/", "flodl-timed-out/", "flodl-leave/"


def register_group(store: dist.Store) -> None:
    """Record the store a group was created on (its ranks meet there when they leave)."""
    _STORE[:] = [store]


def init_spawned_group(
    backend: str, store: dist.Store, rank: int, world: int, timeout: float
) -> None:
    """Join the group of ranks flodl spawned, on its control ``store`` (keys under ``pg/``)."""
    prefixed = dist.PrefixStore("pg", store)
    limit = timedelta(seconds=timeout)
    dist.init_process_group(backend, store=prefixed, rank=rank, world_size=world, timeout=limit)
    register_group(prefixed)


def ending_with_an_exception() -> bool:
    """Whether the script is ending because of an uncaught exception (read in atexit handlers)."""
    return getattr(sys, "last_value", None) is not None


_GIL_HANDOVER_S = 0.02

# The store the group was created on (set when this module created the group).
_STORE: list[dist.Store] = []


def _group_store() -> dist.Store:
    return _STORE[-1] if _STORE else dist.distributed_c10d._get_default_store()


def is_timeout(err: BaseException) -> bool:
    """Whether a collective's error is its timeout (gloo: ``Timed out waiting 5000ms for recv
    operation to complete``), not a lost peer (``Connection closed by peer``)."""
    return "timed out" in str(err).lower()


def is_lost_peer(err: BaseException) -> bool:
    """Whether a collective's error is a peer's connection closing (gloo: ``Connection closed
    by peer``, ``Connection reset by peer``)."""
    return "by peer" in str(err)


# How long a rank that lost a peer's connection looks for that peer's recorded timeout.
PEER_TIMEOUT_WAIT_S = 3.0


def peer_timed_out(wait: float = PEER_TIMEOUT_WAIT_S) -> bool:
    """After this rank's collective lost a peer's connection: whether another rank recorded
    that its own collective timed out (within ``wait`` seconds).

    gloo closes a rank's connections when its collective times out, so the ranks waiting with
    it see "Connection closed by peer" before their own timeout. When a peer says it timed
    out, this rank joins the diagnosis (:func:`ranks_missing_from_collective`) instead of
    reporting the closed connection: otherwise it would leave first, the launcher would end
    the peer before it named the stuck rank, and nobody would name it. A peer that crashed
    records nothing, and this returns False after ``wait``.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    keys = [f"{_TIMED_OUT}{r}" for r in range(world) if r != rank]
    deadline = time.monotonic() + wait
    try:
        store = _group_store()
        while not any(store.check([key]) for key in keys):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
    except Exception:  # the store went with a rank that hosted it: nothing to tell
        return False
    return True


def ranks_missing_from_collective(timeout: float) -> list[int] | None:
    """After this rank's collective timed out: the ranks that never reached it (stuck in their
    own code, or far slower), or None when the group's store cannot tell.

    Every rank whose collective timed out says so in the group's store, then gives the others
    a grace period to say so too: they entered the collective at most a step apart, so they time
    out about that far apart. The ranks still silent after it never entered the collective.
    None when every rank timed out (nobody is missing: a slow network, not a stuck rank) or
    the store is gone.

    This runs only after a failure; a normal step pays nothing for it.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    keys = [f"{_TIMED_OUT}{r}" for r in range(world)]
    deadline = time.monotonic() + min(timeout, max(5.0, timeout / 4))
    try:
        store = _group_store()
        store.set(keys[rank], "1")
        while not store.check(keys):
            if time.monotonic() > deadline:
                return _absent(store, _TIMED_OUT, world)
            time.sleep(0.1)
    except Exception:  # the store went with a rank that hosted it: nothing to tell
        return None
    return None


def meet_every_rank(timeout: float, peer_failed: Callable[[], bool] | None = None) -> None:
    """Return once every rank of the group has called this; raises after ``timeout`` seconds.

    The meeting goes through the group's store, not a collective: ``dist.barrier()``'s gloo work
    holds the works of the collectives before it, tensors made in Python included, and a gloo
    worker thread may drop it after ``wait()`` has returned, when nothing but the interpreter's
    shutdown comes next: see :func:`leave_group`.

    ``peer_failed``: polled while waiting; when it says True (a rank this process started has
    died) the meeting gives up at once instead of waiting out ``timeout`` for it.
    """
    store = _group_store()
    rank, world = dist.get_rank(), dist.get_world_size()
    store.set(f"{_LEAVING}{rank}", "1")
    keys = [f"{_LEAVING}{r}" for r in range(world)]
    if peer_failed is None:
        # A blocking wait, answered the moment the last rank arrives: the rank that hosts the
        # store may leave (and take the store with it) right then, so polling could miss it.
        try:
            store.wait(keys, timedelta(seconds=timeout))
        except dist.DistStoreError as err:  # the wait's timeout (a lost store is another error)
            raise TimeoutError(_late(store, world, timeout)) from err
        return
    # Rank 0 of ranks it started: it hosts the store and outlives them, so it can poll.
    deadline = time.monotonic() + timeout
    while not store.check(keys):
        if peer_failed():
            raise RuntimeError("a rank this process started ended before meeting the others")
        if time.monotonic() > deadline:
            raise TimeoutError(_late(store, world, timeout))
        time.sleep(0.05)


def _late(store: dist.Store, world: int, timeout: float) -> str:
    """The meeting's timeout, naming the ranks that have not arrived (when the store can tell)."""
    late = f"not every rank reached the end of training within {timeout:g} s"
    missing = _absent(store, _LEAVING, world)
    return late + f" ({rank_list(missing)} did not)" if missing else late


def leave_group(
    *,
    wait_for_peers: bool = True,
    timeout: float = TIMEOUT,
    peer_failed: Callable[[], bool] | None = None,
) -> None:
    """Release the default process group, if any.

    ``wait_for_peers``: first meet every rank (gloo; :func:`meet_every_rank`, which polls
    ``peer_failed``), for at most ``timeout`` seconds (``Trainer.setup``'s), unless the script is
    ending with an exception (peers may be blocked in a collective). A meeting that fails means
    a peer is gone, one that times out (logged) that a peer is late or stuck: this rank goes on
    and the group is left to the process exit.
    """
    if not dist.is_initialized():
        return
    if wait_for_peers and not ending_with_an_exception() and dist.get_backend() == "gloo":
        try:
            meet_every_rank(timeout, peer_failed)
        except TimeoutError as err:
            log.warning("%s: rank %d goes on without them", err, dist.get_rank())
            return
        except Exception:
            return
    # A gloo worker thread that finished the last collective may be waiting for the GIL to
    # drop its hold on a Python-made tensor. Before torch 2.5, destroying the group joins that
    # thread while holding the GIL, a deadlock (seen on a rank ending with an exception right
    # after a step, which skips the meeting); after it, a script that ends at once would start
    # the interpreter's shutdown first, which ends such a thread mid-C++ and aborts the process.
    # Sleeping hands the GIL over, before and after.
    time.sleep(_GIL_HANDOVER_S)
    dist.destroy_process_group()
    _STORE.clear()
    time.sleep(_GIL_HANDOVER_S)
