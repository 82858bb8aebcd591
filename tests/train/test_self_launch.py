"""Graph mode without a launcher: ``Trainer.setup(..., devices=[...])`` starts the other ranks.

The multi-rank tests run real scripts (``self_launch_job.py``, ``examples/graph_ddp.py``) as a
user would, ``python script.py``, and look at what the processes did.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from torch import nn

import flodl as fl
from flodl.train.self_launch import resolve_devices
from tests.conftest import REPO_ROOT, clean_env
from tests.train import toy
from tests.train.leftovers import Leftovers

JOB = str(REPO_ROOT / "tests" / "train" / "self_launch_job.py")
EXAMPLE = str(REPO_ROOT / "examples" / "graph_ddp.py")


def run(*args: str, timeout: float = 120, env: dict[str, str] | None = None, **kw):
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or clean_env(OMP_NUM_THREADS="1"),
        check=False,
        **kw,
    )


def results(out: Path) -> dict[int, dict]:
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))}


# -- which devices ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ("cpu", "devices must be a list of devices"),
        (torch.device("cpu"), "devices must be a list of devices"),
        ([], "devices is empty"),
        (["cpu", 3.5], "devices has 3.5, not a device"),
        (["cpu", "mps"], "devices has 'mps'; ranks run on 'cpu' or 'cuda:N' devices"),
        (["cpu", "nonsense"], "devices has 'nonsense', not a device"),
    ],
)
def test_bad_devices_are_refused_naming_the_value(devices, message):
    model = fl.FlowBuilder(nn.Linear(2, 1)).build()
    with pytest.raises(fl.TrainerConfigError, match=re.escape(message)):
        fl.Trainer.setup(model, None, None, devices=devices)
    with pytest.raises(fl.TrainingNotSetUpError):  # nothing was set up
        model.step()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_a_gpu_this_machine_lacks_is_refused_in_both_modes_saying_why():
    # A CPU-only torch (CI's) says so and how to get one with CUDA; a CUDA torch on a machine
    # without a GPU (torch 2.14's default wheel, say) counts the devices.
    if torch.version.cuda is None:
        why = f"this torch ({torch.__version__}) is built without CUDA: `fdl setup` installs"
    else:
        why = "this machine has 0 CUDA device(s)"
    with pytest.raises(fl.TrainerConfigError, match=re.escape(f"has 'cuda:0' but {why}")):
        resolve_devices(["cuda:0", "cuda:1"])
    builder = fl.Trainer.builder(toy.make_model, toy.make_sgd, toy.mse_step)
    builder = builder.dataset(toy.regression_data(64)).batch_size(16).num_epochs(1)
    with pytest.raises(fl.TrainerConfigError, match=re.escape(f"has 'cuda' but {why}")):
        builder.devices(["cuda"]).run()  # before torch's "not compiled with CUDA" assertion


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_without_two_gpus_none_means_one_process_on_the_models_device():
    assert resolve_devices(None) is None
    model = fl.FlowBuilder(nn.Linear(2, 1)).build()
    fl.Trainer.setup(model, None, None)
    assert (model.world_size, model.device.type) == (1, "cpu")


def test_one_named_device_is_single_device_training_there():
    assert resolve_devices(["cpu", "cpu"]) == [torch.device("cpu")] * 2
    model = fl.FlowBuilder(nn.Linear(2, 1)).build()
    fl.Trainer.setup(model, None, lambda p: torch.optim.SGD(p, lr=0.1), devices=["cpu"])
    assert (model.world_size, model.device) == (1, torch.device("cpu"))
    model(torch.ones(3, 2)).sum().backward()
    model.step()
    assert model.training_step == 1


def test_under_a_launcher_devices_must_name_one_device_per_local_rank(tmp_path):
    # The launcher's environment (no peer needed: the mismatch is found before joining).
    env = clean_env(
        OMP_NUM_THREADS="1",
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="1",
    )
    result = run(JOB, str(tmp_path), "--devices", "cpu,cpu,cpu", env=env, timeout=60)
    assert result.returncode != 0
    assert (
        "TrainerConfigError: Trainer.setup: devices names 3 device(s) but the launcher started "
        "2 rank(s) on this machine" in result.stderr
    )


def test_a_program_read_from_standard_input_cannot_be_run_again_and_says_so():
    script = (
        "import flodl as fl, torch\n"
        "m = fl.FlowBuilder(torch.nn.Linear(2, 1)).build()\n"
        "fl.Trainer.setup(m, None, None, devices=['cpu', 'cpu'])\n"
    )
    result = run("-", input=script, timeout=60)
    assert result.returncode != 0
    assert "it was not started from a script" in result.stderr
    assert "under torchrun" in result.stderr


# -- starting the ranks ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.multiproc
def test_python_script_with_two_devices_trains_exactly_as_under_torchrun():
    alone = run(EXAMPLE, "--epochs", "2", "--verify", "--devices", "cpu,cpu")
    assert alone.returncode == 0, alone.stderr[-3000:]
    launched = run(
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        EXAMPLE,
        "--epochs",
        "2",
        "--verify",
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    pattern = r"rank (\d): world 2 steps 32 batches 32 loss [\d.]+ -> [\d.]+ digest ([0-9a-f]{16})"
    mine, theirs = re.findall(pattern, alone.stdout), re.findall(pattern, launched.stdout)
    assert sorted(r for r, _ in mine) == ["0", "1"]
    # The same parameters and buffers, bit for bit, on every rank of both runs.
    assert {d for _, d in mine} == {d for _, d in theirs} and len({d for _, d in mine}) == 1
    assert len(re.findall(r"rank \d: gradient check max abs diff", alone.stdout)) == 2
    assert "terminate called" not in alone.stderr


@pytest.mark.slow
@pytest.mark.multiproc
def test_the_ranks_share_the_cores_and_each_is_its_own_process(tmp_path):
    leftovers = Leftovers(tmp_path)
    env = clean_env(**leftovers.env())
    env.pop("OMP_NUM_THREADS", None)
    result = run(JOB, str(tmp_path), "--devices", "cpu,cpu", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = results(tmp_path)
    assert sorted(ranks) == [0, 1]
    assert ranks[0]["pid"] != ranks[1]["pid"]
    assert {r["world"] for r in ranks.values()} == {2}
    assert {r["steps"] for r in ranks.values()} == {8}  # 64 samples / 2 ranks / 8, 2 epochs
    assert ranks[0]["params"] == ranks[1]["params"]
    share = max(1, (os.cpu_count() or 1) // 2)
    assert {r["threads"] for r in ranks.values()} == {share}
    leftovers.check()


RANK_1_FAILED = "TrainingError: rank 1 (started by this process) exited with code 1"


def on_cpu_ranks(tmp_path, *flags: str, ranks: int = 2, leftovers: Leftovers | None = None):
    """The job on ``ranks`` CPU ranks with ``flags``: its result, and how long it took."""
    started = time.monotonic()
    marked = leftovers.env() if leftovers is not None else {}
    result = run(
        JOB,
        str(tmp_path),
        "--devices",
        ",".join(["cpu"] * ranks),
        *flags,
        env=clean_env(OMP_NUM_THREADS="1", **marked),
    )
    return result, time.monotonic() - started


def fails_saying(tmp_path, *flags: str, says: list[str], within: float, ranks: int = 2) -> str:
    """The job with ``flags`` fails within ``within`` seconds, printing each of ``says``, with
    no rank writing a result and nothing left behind (processes, shared memory, temp files).
    Its standard error, for more checks."""
    leftovers = Leftovers(tmp_path)
    result, took = on_cpu_ranks(tmp_path, *flags, ranks=ranks, leftovers=leftovers)
    assert result.returncode != 0
    for text in says:
        assert text in result.stderr, result.stderr[-3000:]
    assert took < within
    assert results(tmp_path) == {}
    leftovers.check()
    return result.stderr


@pytest.mark.slow
@pytest.mark.multiproc
@pytest.mark.parametrize("failing", [1, 0])
def test_a_failing_rank_fails_the_run_at_once_and_stops_the_others(tmp_path, failing):
    says = [f"RuntimeError: rank {failing} fails on purpose"]  # its traceback
    if failing == 1:  # rank 0 names the rank it started
        says.append(RANK_1_FAILED)
    # Not the 30 s collective timeout; rank 0 failing stops the rank it started.
    fails_saying(tmp_path, "--fail-rank", str(failing), says=says, within=25)


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_failing_rank_slow_to_exit_is_still_the_one_reported(tmp_path):
    # Rank 1 closes its connections at once (rank 0's collective fails) but ends 5 s later.
    result, _ = on_cpu_ranks(tmp_path, "--fail-rank", "1", "--slow-exit", "5")
    assert result.returncode != 0 and RANK_1_FAILED in result.stderr


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_rank_failing_after_its_last_step_is_reported_without_waiting_out_the_timeout(tmp_path):
    # Rank 0 is then in finish(), waiting for every rank to leave the group: it stops waiting
    # for a rank it started that died, instead of the 30 s a meeting may take; it raises there,
    # before writing its own result.
    says = ["RuntimeError: rank 1 fails on purpose before finish", RANK_1_FAILED]
    fails_saying(tmp_path, "--fail-before-finish", "1", says=says, within=25)


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_rank_later_to_finish_than_setups_timeout_is_reported_and_stopped(tmp_path):
    # Rank 1 reaches finish() 40 s after its last step; setup's timeout is 10 s. Rank 0 waits
    # that long for it in finish() (not a fixed 60 s), says so, gives it the timeout again to
    # end, then stops it and names it.
    says = [
        "not every rank reached the end of training within 10 s (rank 1 did not): rank 0 goes "
        "on without them",
        "rank 1 (started by this process) did not end within 10 s of rank 0 finishing",
    ]
    fails_saying(tmp_path, "--timeout", "10", "--slow-finish", "40", says=says, within=38)


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_rank_waiting_on_a_late_rank_0_gives_up_after_setups_timeout_and_the_run_ends(tmp_path):
    # Rank 1 does not host the store: it waits on it (blocking) for rank 0, which reaches
    # finish() 20 s late; after setup's 10 s it says so and ends. Rank 0 then finds rank 1
    # already arrived, and the run ends cleanly with both ranks' results.
    flags = ("--timeout", "10", "--slow-finish", "20", "--slow-rank", "0")
    result, _ = on_cpu_ranks(tmp_path, *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    late = (
        "not every rank reached the end of training within 10 s (rank 0 did not): rank 1 goes on "
        "without them"
    )
    assert late in result.stderr
    ranks = results(tmp_path)
    assert sorted(ranks) == [0, 1] and ranks[0]["params"] == ranks[1]["params"]


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_stuck_rank_is_named_when_rank_0s_collective_times_out(tmp_path):
    # Rank 1 is alive but stops taking part after its first step: rank 0's next collective
    # waits out setup's timeout, then names the rank and stops it, instead of passing on gloo's
    # "Timed out waiting 10000ms for recv operation to complete". Rank 1 would sleep 300 s. 10 s:
    # with 5, a started interpreter importing torch on a loaded machine missed setup itself.
    stuck = (
        "TrainingError: a collective waited 10 s (Trainer.setup's timeout) for rank 1 (started "
        "by this process): running, but not taking part"
    )
    fails_saying(tmp_path, "--timeout", "10", "--stall-rank", "1", says=[stuck], within=60)


@pytest.mark.slow
@pytest.mark.multiproc
def test_of_three_ranks_only_the_stuck_one_is_named_not_every_running_one(tmp_path):
    # Rank 2 stalls; rank 1 runs and times out in the same collective as rank 0, and says so
    # in the store: rank 0 names rank 2 alone (both are running, only one is stuck). 10 s: two
    # started interpreters importing torch at once on a loaded machine must check in within it.
    stuck = (
        "TrainingError: a collective waited 10 s (Trainer.setup's timeout) for rank 2 (started "
        "by this process): running, but not taking part"
    )
    flags = ("--timeout", "10", "--stall-rank", "2")
    stderr = fails_saying(tmp_path, *flags, says=[stuck], within=60, ranks=3)
    assert "for rank 1, 2" not in stderr


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_stuck_rank_is_named_when_a_peer_timed_out_first_and_closed_rank_0s_connection(tmp_path):
    # Rank 0 reaches the collective 3 s after rank 1; rank 2 never does. Rank 1 times out first
    # and gloo closes its connections, so rank 0 sees "Connection closed by peer" 3 s before its
    # own timeout. It finds rank 1's timeout in the store and joins the diagnosis: rank 2 is
    # named, not rank 1 as "failed" (which waited on rank 0 too, and named ranks 0 and 2).
    stuck = (
        "TrainingError: a collective waited 10 s (Trainer.setup's timeout) for rank 2 (started "
        "by this process): running, but not taking part"
    )
    flags = ("--timeout", "10", "--stall-rank", "2", "--late-rank", "0", "--late", "3")
    flags += ("--tiny",)  # fewer gradient values than ranks: gloo closes the timed-out pairs
    stderr = fails_saying(tmp_path, *flags, says=[stuck], within=60, ranks=3)
    assert "rank 1 (started by this process)" not in stderr


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_rank_that_never_reaches_setup_is_reported_without_waiting(tmp_path):
    started = time.monotonic()
    result = run(JOB, str(tmp_path), "--devices", "cpu,cpu", "--skip-setup", "1")
    assert result.returncode != 0
    assert "rank 1 (started by this process) ended without reaching Trainer.setup" in (
        result.stderr
    )
    assert time.monotonic() - started < 25


@pytest.mark.slow
@pytest.mark.multiproc
def test_killing_rank_0_takes_the_ranks_it_started_with_it(tmp_path):
    leftovers = Leftovers(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, JOB, str(tmp_path), "--devices", "cpu,cpu", "--hang"],
        env=clean_env(OMP_NUM_THREADS="1", **leftovers.env()),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        pids_file = tmp_path / "pids"
        deadline = time.monotonic() + 60
        while not pids_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = json.loads(pids_file.read_text())
        assert len(pids) == 2  # rank 0 and the rank it started
        os.kill(pids[0], signal.SIGKILL)
        proc.wait(timeout=10)
        started = []
        for pid in pids[1:]:
            with contextlib.suppress(psutil.NoSuchProcess):
                started.append(psutil.Process(pid))
        _, alive = psutil.wait_procs(started, timeout=10)
        assert not alive
    finally:
        if proc.poll() is None:
            proc.kill()
    leftovers.check()


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        (["-c", "from flodl.train.self_launch import can_relaunch; print(can_relaunch())"], "True"),
        (["-"], "False"),  # the program text came from standard input: nothing to run again
    ],
)
def test_whether_the_program_can_be_started_again(how, expected, tmp_path):
    source = "from flodl.train.self_launch import can_relaunch; print(can_relaunch())\n"
    script = tmp_path / "script.py"
    script.write_text(source)
    assert run(str(script), timeout=60).stdout.strip() == "True"
    given = run(*how, input=source if how == ["-"] else None, timeout=60)
    assert given.stdout.strip() == expected, given.stderr
