"""Graph mode without a launcher: the devices a run uses, and starting the other local ranks.

``fl.Trainer.setup(..., devices=[...])`` (or two or more GPUs found) in a script started as
``python train.py`` makes that process rank 0 and re-executes the same command line once per
other device, with the rendezvous environment a launcher would set (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``). Each re-executed
process runs the script from the top, as under ``torchrun``, and its ``setup`` joins the group as
a launched rank. So one script runs unchanged on one device, on N devices, or under ``torchrun``.

Rank 0 is also the launcher: it hosts the group's store, waits for every rank to check in before
it joins (a rank that dies first is reported at once, not after the timeout), and at the end
waits for the others and reports one that failed. A re-executed rank dies with rank 0
(``PR_SET_PDEATHSIG`` on Linux), so nothing outlives a killed run.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from flodl.log import get_logger
from flodl.train.builder_runtime import intra_op_threads
from flodl.train.errors import TrainerConfigError, naming_ranks
from flodl.train.process_group import (
    attempt_prefix,
    ending_with_an_exception,
    is_lost_peer,
    is_timeout,
    peer_timed_out,
    ranks_missing_from_collective,
    register_group,
)
from flodl.train.trained_state import TrainingError

log = get_logger("flodl.train")

# Set in every re-executed rank: the pid of rank 0, which started it.
LAUNCHED_BY = "FLODL_LAUNCHED_BY"
READY_KEY = "flodl-ready/{}"


def resolve_devices(devices: Any, where: str = "Trainer.setup") -> list[torch.device] | None:
    """The devices of a run: as given, else every GPU when there are two or more, else None
    (one process on the model's own device)."""
    if devices is None:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return [torch.device("cuda", i) for i in range(count)] if count >= 2 else None
    if isinstance(devices, str | torch.device) or not isinstance(devices, Sequence):
        raise TrainerConfigError(
            f"{where}: devices must be a list of devices (e.g. ['cuda:0', 'cuda:1'] or "
            f"['cpu', 'cpu']) or None to use every GPU found, got {devices!r}"
        )
    if not devices:
        raise TrainerConfigError(f"{where}: devices is empty; pass None to use every GPU found")
    out = []
    for d in devices:
        try:
            device = torch.device(d)
        except (RuntimeError, TypeError) as err:
            raise TrainerConfigError(f"{where}: devices has {d!r}, not a device ({err})") from None
        if device.type == "cuda":
            device = existing_cuda_device(d, device, where)
        elif device.type != "cpu":
            raise TrainerConfigError(
                f"{where}: devices has {d!r}; ranks run on 'cpu' or 'cuda:N' devices"
            )
        out.append(device)
    return out


def existing_cuda_device(name: object, device: torch.device, where: str) -> torch.device:
    """``device`` (a CUDA one, named ``name`` by the caller) with its index, when this machine
    has it; else a :class:`TrainerConfigError` saying what it has (and, for a torch built
    without CUDA, how to get one that has it)."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = 0 if device.index is None else device.index
    if index < count:
        return torch.device("cuda", index)
    why = f"this machine has {count} CUDA device(s)"
    if torch.version.cuda is None:
        why = (
            f"this torch ({torch.__version__}) is built without CUDA: `fdl setup` installs the "
            "build for this machine's GPUs"
        )
    raise TrainerConfigError(f"{where}: devices has {name!r} but {why}")


def backend_for(devices: Sequence[torch.device]) -> str:
    """NCCL when every rank is on a GPU, else gloo (which also reduces CUDA tensors)."""
    return "nccl" if all(d.type == "cuda" for d in devices) else "gloo"


def can_relaunch() -> bool:
    """Whether this program can be started again as is: a script, ``python -m`` or ``-c``; not an
    interactive session, a notebook or a script read from standard input."""
    argv = list(getattr(sys, "orig_argv", []))
    if "-c" in argv[1:] or "-m" in argv[1:]:
        return True
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    return bool(argv) and script not in (None, "<stdin>")


def relaunch_command() -> list[str]:
    """The command line that started this process, to start it again as another rank."""
    if not can_relaunch():
        raise TrainerConfigError(
            "Trainer.setup: several devices need the other ranks to run this same program, but "
            "it was not started from a script (an interactive session, a notebook or standard "
            "input): run it as `python script.py`, or under torchrun, or pass one device"
        )
    return [sys.executable, *sys.orig_argv[1:]]


class LocalRanks:
    """Rank 0's handle on the ranks it started: their processes, checked and reaped."""

    def __init__(self, procs: dict[int, subprocess.Popen], timeout: float) -> None:
        self.procs, self.timeout = procs, timeout
        self.reported = False

    def failure(self) -> tuple[int, int] | None:
        """(rank, exit code) of the first rank that ended with an error, if any."""
        for rank, proc in sorted(self.procs.items()):
            code = proc.poll()
            if code not in (None, 0):
                return rank, code
        return None

    def running(self) -> list[int]:
        """The ranks this process started that have not ended."""
        return [rank for rank, proc in sorted(self.procs.items()) if proc.poll() is None]

    def any_failed(self) -> bool:
        """Whether a rank this process started has ended with an error (polled while rank 0
        waits for the others to leave the group)."""
        return self.failure() is not None

    def error(self, rank: int, code: int) -> TrainingError:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return TrainingError(
            f"rank {rank} (started by this process) {how}; its own output, above, says why. "
            "Every rank was stopped",
            rank=rank,
        )

    def failed_peer(self, err: BaseException) -> TrainingError | None:
        """After a collective failed with ``err``: the rank that ended, waiting for its exit.

        The wait is short (2 s) unless ``err`` says a peer closed or reset its connection: that
        peer is on its way out, but its interpreter can take seconds to end on a loaded machine
        (measured: over 2 s with every core busy), so the wait is then up to 15 s. Returning
        earlier would report the collective's error instead of the rank that failed.

        A collective that timed out while every started rank is still running means one of them
        is stuck (or far slower): they are stopped and the error names the ones that never
        reached the collective (:func:`ranks_missing_from_collective`), instead of gloo's
        ``Timed out waiting ... for recv``. So does a connection closed by a peer whose own
        collective timed out (:func:`peer_timed_out`): that peer was waiting with this rank."""
        # A peer whose own collective timed out closes its connections: this rank then joins
        # its diagnosis at once (see peer_timed_out) rather than wait for its report.
        lost_to_timeout = is_lost_peer(err) and peer_timed_out()
        found = None
        if not lost_to_timeout:
            deadline = time.monotonic() + (15.0 if is_lost_peer(err) else 2.0)
            while True:
                found = self.failure()
                if found is not None or time.monotonic() >= deadline:
                    break
                time.sleep(0.02)
        if found is None:
            alive = self.running()
            if not alive or not (lost_to_timeout or is_timeout(err)):
                return None
            # Of the running ranks, the stuck ones are those that never reached the collective.
            missing = ranks_missing_from_collective(self.timeout)
            stuck = [r for r in alive if missing is None or r in missing] or alive
            self.stop()
            self.reported = True
            return naming_ranks(
                stuck,
                f"a collective waited {self.timeout:g} s (Trainer.setup's timeout) for {{ranks}} "
                "(started by this process): running, but not taking part (stuck, or far slower "
                "than this rank). Every rank was stopped",
            )
        self.stop()
        self.reported = True
        return self.error(*found)

    def wait(self) -> None:
        """Wait (bounded) for every rank to end; raise for one that failed."""
        deadline = time.monotonic() + self.timeout
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        found = self.failure()
        alive = self.running()
        self.stop()
        if found is not None and not self.reported:
            self.reported = True
            raise self.error(*found)
        if alive:
            raise TrainingError(
                f"rank {alive[0]} (started by this process) did not end within {self.timeout:.0f} "
                "s of rank 0 finishing; it was stopped",
                rank=alive[0],
            )

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            proc.wait()

    def at_exit(self) -> None:
        """Rank 0's script is ending: stop the others if it failed, else wait for them. A rank
        that failed while rank 0 had nothing left to wait for fails the whole run."""
        if ending_with_an_exception():
            self.stop()
            return
        try:
            self.wait()
        except TrainingError as err:
            sys.stderr.write(f"flodl: {err}\n")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)


def launch_local_ranks(devices: Sequence[torch.device], timeout: float) -> LocalRanks:
    """Make this process rank 0 of ``len(devices)`` and start the others; join the group."""
    world = len(devices)
    command = relaunch_command()
    limit = timedelta(seconds=timeout)
    store = dist.TCPStore("127.0.0.1", 0, world, True, limit, wait_for_workers=False)
    rendezvous = {
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(store.port),
    }
    # CPU ranks share this machine's cores, as spawned Builder ranks do (GPU ranks: untouched).
    cpu_threads = intra_op_threads(None, world) if all(d.type == "cpu" for d in devices) else None
    procs: dict[int, subprocess.Popen] = {}
    for rank in range(1, world):
        env = {**os.environ, **rendezvous, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        env[LAUNCHED_BY] = str(os.getpid())
        if cpu_threads is not None:
            env.setdefault("OMP_NUM_THREADS", str(cpu_threads))
        procs[rank] = subprocess.Popen(command, env=env)
    ranks = LocalRanks(procs, timeout)
    atexit.register(ranks.at_exit)  # before the group's own exit handler, so it runs after it
    # This process's own code (and the script after setup) sees the world it is rank 0 of.
    os.environ.update(rendezvous, RANK="0", LOCAL_RANK="0")
    if cpu_threads is not None and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(cpu_threads)
    log.info("started ranks 1..%d of %d (%s)", world - 1, world, " ".join(command))
    try:
        _wait_for_ranks(store, ranks, timeout)
    except BaseException:
        ranks.stop()
        raise
    prefixed = dist.PrefixStore(attempt_prefix(), store)
    dist.init_process_group(
        backend_for(devices), store=prefixed, rank=0, world_size=world, timeout=limit
    )
    register_group(prefixed)
    return ranks


def _wait_for_ranks(store: dist.TCPStore, ranks: LocalRanks, timeout: float) -> None:
    """Return once every started rank checked in; raise at once for one that died first."""
    deadline = time.monotonic() + timeout
    waiting = set(ranks.procs)
    while waiting:
        found = ranks.failure()
        if found is not None:
            ranks.reported = True
            raise ranks.error(*found)
        waiting = {r for r in waiting if not store.check([READY_KEY.format(r)])}
        ended = [r for r in sorted(waiting) if ranks.procs[r].poll() is not None]
        if ended:  # it ran the program to its end without calling setup the same way
            ranks.reported = True
            raise TrainingError(
                f"rank {ended[0]} (started by this process) ended without reaching "
                "Trainer.setup: every rank must run the same program and call setup with the "
                "same devices",
                rank=ended[0],
            )
        if waiting and time.monotonic() > deadline:
            raise TrainingError(
                f"rank {min(waiting)} (started by this process) did not reach Trainer.setup "
                f"within {timeout:.0f} s",
                rank=min(waiting),
            )
        time.sleep(0.02)


def check_in(store: dist.Store) -> None:
    """In a rank rank 0 started: say it reached setup, and die with rank 0."""
    rank = int(os.environ["RANK"])
    die_with_parent(int(os.environ[LAUNCHED_BY]))
    store.set(READY_KEY.format(rank), "1")


def die_with_parent(parent: int) -> None:
    """Ask the kernel to kill this process when its parent (pid ``parent``) dies (Linux).

    The kernel sends the signal when the parent *thread* that started this process ends, so
    the parent must start it from a thread that outlives it."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # rank 0 died before the request was made
        os._exit(1)
