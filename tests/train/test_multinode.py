"""Multi-node and restarts, as a user runs them: real ``torchrun`` jobs on loopback.

Two ``torchrun`` "nodes" (``--nnodes 2``, c10d rendezvous on 127.0.0.1, one rank each) must train
what one node with two ranks trains: Graph mode the same parameters, Builder mode (whose averaging
windows depend on dispatch timing) a final loss in the same band. Under ``--max-restarts 1`` a
rank that dies mid-epoch must not cost the run: the framework resumes from the last
``checkpoint_every`` snapshot, with no resume code in the script (tests/train/torchrun_job.py).
Every job runs with one thread per rank and a bounded time; whatever it started is killed at
the end, failed or not.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from flodl.train.builder_runtime import intra_op_threads
from tests.conftest import REPO_ROOT, clean_env
from tests.train.leftovers import Leftovers

JOB = str(REPO_ROOT / "tests" / "train" / "torchrun_job.py")
LIMIT_S = 100  # per test: every torchrun job of it together
EXIT_ABORT = "terminate called without an active exception"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Jobs:
    """``torchrun`` processes started by a test; :meth:`close` kills what is left of them."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.env: dict[str, str] = {}  # added to every job's environment
        self.deadline = time.monotonic() + LIMIT_S

    def start(
        self, *torchrun_args: str, job_args: list[str], log: Path, **env: str
    ) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", *torchrun_args, JOB, *job_args],
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            env=clean_env(OMP_NUM_THREADS="1", **self.env, **env),
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def wait(self, proc: subprocess.Popen, log: Path) -> None:
        try:
            code = proc.wait(timeout=max(self.deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            pytest.fail(f"torchrun did not finish within {LIMIT_S} s:\n{log.read_text()[-3000:]}")
        text = log.read_text()
        assert code == 0, text[-3000:]
        if "restart 1" not in text:  # a deliberately killed attempt is not a clean exit
            assert EXIT_ABORT not in text, text[-3000:]  # every process exits cleanly

    def close(self) -> None:
        """Kill every process still running: torchrun and the ranks it started (each rank runs
        in a session of its own, so killing torchrun's process group would miss them)."""
        for proc in self.procs:
            if proc.poll() is not None:
                continue
            try:
                family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(True)]
            except psutil.NoSuchProcess:
                continue
            for p in family:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.send_signal(signal.SIGKILL)
            psutil.wait_procs(family, timeout=10)
            proc.wait(timeout=10)


@pytest.fixture
def jobs():
    started = Jobs()
    try:
        yield started
    finally:
        started.close()


def results(out: Path) -> dict[tuple[int, int], dict]:
    """What each rank wrote, by (rank, attempt)."""
    found = {}
    for path in out.glob("rank*-attempt*.json"):
        data = json.loads(path.read_text())
        found[data["rank"], data["attempt"]] = data
    return found


def one_node(jobs: Jobs, out: Path, *job_args: str, restarts: int = 0) -> dict:
    out.mkdir()
    log = out / "torchrun.log"
    args = ["--standalone", "--nproc-per-node", "2", "--max-restarts", str(restarts)]
    jobs.wait(jobs.start(*args, job_args=["--out", str(out), *job_args], log=log), log)
    return results(out)


def two_agents(
    jobs: Jobs,
    out: Path,
    node_args: Callable[[int], list[str]],
    job: list[str],
    node_env: Callable[[int], dict[str, str]] = lambda node: {},
) -> list[tuple[subprocess.Popen, Path]]:
    """Start two torchrun agents (nodes 0 and 1, with ``node_args(node)`` and
    ``node_env(node)``) meeting at a c10d rendezvous on loopback; each node's process and log
    (``out/node<N>.log``)."""
    out.mkdir()
    rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}"]
    rendezvous += ["--rdzv-id", uuid.uuid4().hex[:8]]
    started = []
    for node in (0, 1):
        log = out / f"node{node}.log"
        proc = jobs.start(*node_args(node), *rendezvous, job_args=job, log=log, **node_env(node))
        started.append((proc, log))
    return started


def two_nodes(jobs: Jobs, out: Path, *job_args: str) -> dict:
    """Two torchrun agents, one rank each, meeting at a c10d rendezvous on loopback."""
    started = two_agents(
        jobs,
        out,
        lambda node: ["--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1"],
        ["--out", str(out), *job_args],
    )
    for proc, log in started:
        jobs.wait(proc, log)
    return results(out)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_nodes_train_the_graph_mode_parameters_of_one_node(jobs, tmp_path):
    single, multi = one_and_two_nodes(jobs, tmp_path, "graph")
    assert multi[0, 0]["params"] == multi[1, 0]["params"]  # the ranks agree
    for a, b in zip(single[0, 0]["params"], multi[0, 0]["params"], strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
    assert multi[0, 0]["steps"] == single[0, 0]["steps"] == 4 * 512 // 16 // 2


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_nodes_train_the_builder_mode_loss_of_one_node(jobs, tmp_path):
    single, multi = one_and_two_nodes(jobs, tmp_path, "builder")
    assert multi[0, 0]["params"] == multi[1, 0]["params"]  # every rank's join() is the average
    assert multi[0, 0]["epochs"] == [0, 1, 2, 3]
    # Not bit-reproducible (averaging windows follow dispatch timing): the same band.
    assert multi[0, 0]["final_loss"] == pytest.approx(single[0, 0]["final_loss"], rel=0.3)
    assert multi[0, 0]["final_loss"] < multi[0, 0]["losses"][0] / 10


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_rank_killed_mid_epoch_resumes_from_the_last_checkpoint(jobs, tmp_path):
    whole, restarted, ck = killed_and_whole(jobs, tmp_path, "builder")
    assert (tmp_path / "restarted" / "killed").read_text() == "rank 1 died in epoch 2\n"
    assert sorted(restarted) == [(0, 1), (1, 1)]  # attempt 0 died: only the restart finished
    log = (tmp_path / "restarted" / "torchrun.log").read_text()
    assert "restart 1: resuming from" in log and "checkpoint-0002.fdl (epoch 2 of 4" in log
    resumed, reference = restarted[0, 1], whole[0, 0]
    assert resumed["epochs"] == [2, 3]  # epochs 0 and 1 came from the checkpoint
    # Its first epoch trains on from the checkpoint, not from scratch (epoch 0's loss)...
    assert resumed["losses"][0] < reference["losses"][0] / 4
    # ...and the run ends in the uninterrupted run's band.
    assert resumed["final_loss"] == pytest.approx(reference["final_loss"], rel=0.3)
    assert resumed["params"] == restarted[1, 1]["params"]
    assert (ck / "checkpoint-0004.fdl").is_file() and (ck / "checkpoint-0004.train.pt").is_file()


def test_cpu_ranks_share_the_cores_of_their_own_machine():
    assert intra_op_threads(None, 2) == max(1, (os.cpu_count() or 1) // 2)
    # One rank per node of a two-node job: it has its machine to itself.
    assert intra_op_threads(None, 1) == max(1, os.cpu_count() or 1)
    assert intra_op_threads(3, 1) == 3


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_graph_mode_resumes_to_the_parameters_of_the_uninterrupted_run(jobs, tmp_path):
    leftovers = Leftovers(tmp_path)
    jobs.env = leftovers.env()
    whole, restarted, _ = killed_and_whole(jobs, tmp_path, "graph")
    assert (tmp_path / "restarted" / "killed").is_file()
    leftovers.check()  # nothing left by the killed rank, its restart or the whole run
    assert sorted(restarted) == [(0, 1), (1, 1)]
    assert (
        "checkpoint-0002.fdl (epoch 2 of 4, step 32, written by a world of 2)"
        in (tmp_path / "restarted" / "torchrun.log").read_text()
    )
    resumed, reference = restarted[0, 1], whole[0, 0]
    assert reference["epochs"] == [0, 1, 2, 3] and resumed["epochs"] == [2, 3]
    assert resumed["steps"] == reference["steps"] == 64  # the training step was restored
    # Lockstep Graph mode is deterministic: model, optimizer state and data order all resume.
    for a, b in zip(reference["params"], resumed["params"], strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
    assert resumed["params"] == restarted[1, 1]["params"]


def killed_and_whole(jobs, tmp_path: Path, mode: str):
    """An uninterrupted run and one whose rank 1 dies in epoch 2 (both under --max-restarts 1),
    and the restarted run's checkpoint directory."""
    whole = one_node(jobs, tmp_path / "whole", "--mode", mode, restarts=1)
    ck = tmp_path / "restarted" / "ck"
    restarted = one_node(
        jobs,
        tmp_path / "restarted",
        *("--mode", mode, "--checkpoints", str(ck), "--kill-epoch", "2"),
        restarts=1,
    )
    return whole, restarted, ck


def one_and_two_nodes(jobs, tmp_path: Path, mode: str):
    """The same job on one node of two ranks and on two loopback nodes of one rank each."""
    single = one_node(jobs, tmp_path / "one", "--mode", mode)
    multi = two_nodes(jobs, tmp_path / "two", "--mode", mode)
    assert sorted(multi) == sorted(single) == [(0, 0), (1, 0)]
    # Node 1's only rank is global rank 1 but local rank 0, on a node of one rank.
    assert multi[1, 0]["local_rank"] == 0 and multi[1, 0]["world"] == 2
    return single, multi


def two_nodes_then_one(jobs: Jobs, out: Path, *job_args: str) -> tuple[dict, str]:
    """An elastic job (``--nnodes 1:2``, ``--max-restarts 1``) of two loopback nodes, one rank
    each; the rank on node 1 dies with its torchrun agent in the middle of epoch 2, so node 0's
    agent restarts its rank in a world of one. Node 0 hosts the rendezvous (it must outlive the
    kill). Returns what the ranks wrote and node 0's log."""

    def node_args(node: int) -> list[str]:
        return [
            *("--nnodes", "1:2", "--nproc-per-node", "1", "--max-restarts", "1"),
            # Both nodes join the first round (it closes as soon as both are in); the restart's
            # round closes with node 0 alone once no other node joined for last_call_timeout.
            *("--rdzv-conf", f"last_call_timeout=10,is_host={'true' if node == 0 else 'false'}"),
        ]

    job = ["--out", str(out), "--checkpoints", str(out / "ck"), *job_args]
    job += ["--kill-epoch", "2", "--kill-node"]
    # the rank on the node whose DOOMED_NODE is 1 kills its agent
    started = two_agents(jobs, out, node_args, job, lambda node: {"DOOMED_NODE": str(node)})
    survivor, log = started[0]
    jobs.wait(survivor, log)
    started[1][0].wait(timeout=10)  # killed in epoch 2
    assert (out / "killed").is_file()
    return results(out), log.read_text()


@pytest.mark.slow
@pytest.mark.multiproc
@pytest.mark.timeout(150)
def test_graph_mode_resumed_by_a_smaller_world_rescales_its_step_and_covers_the_data(
    jobs, tmp_path
):
    found, log = two_nodes_then_one(jobs, tmp_path / "elastic", "--mode", "graph")
    resumed = [r for (_, attempt), r in found.items() if attempt == 1]
    assert len(resumed) == 1 and resumed[0]["world"] == 1
    resumed = resumed[0]
    assert "checkpoint-0002.fdl (epoch 2 of 4, step 32, written by a world of 2)" in log
    assert resumed["epochs"] == [2, 3]
    # Two epochs at a world of 2 are 2 x 16 steps per rank; at a world of 1 an epoch is 32
    # steps, so the step (and any step-based schedule) stands where an uninterrupted run of one
    # rank stands after two epochs, and ends where it ends.
    assert "training step 32 (16 per epoch) becomes 64 (32 per epoch at this size)" in log
    assert resumed["first_steps"] == [64, 96] and resumed["steps"] == 4 * 512 // 16
    # The lone rank's shard is the whole dataset: every sample once per epoch.
    assert [sorted(s) for s in resumed["seen"]] == [list(range(512))] * 2


@pytest.mark.slow
@pytest.mark.multiproc
@pytest.mark.timeout(150)
def test_builder_mode_resumed_by_a_world_of_one_goes_on_from_the_checkpoint(jobs, tmp_path):
    found, log = two_nodes_then_one(jobs, tmp_path / "elastic", "--mode", "builder")
    resumed = [r for (_, attempt), r in found.items() if attempt == 1]
    assert len(resumed) == 1 and resumed[0]["world"] == 1
    # A world of one runs Builder mode's single-device path: it resumes too, not from epoch 0.
    assert "checkpoint-0002.fdl (epoch 2 of 4, step 64, written by a world of 2)" in log
    assert resumed[0]["epochs"] == [2, 3]
    ck = tmp_path / "elastic" / "ck"
    assert (ck / "checkpoint-0004.fdl").is_file() and (ck / "checkpoint-0004.train.pt").is_file()
