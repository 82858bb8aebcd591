"""Background checkpoints: a CPU snapshot now, the atomic write on a worker thread."""

from __future__ import annotations

import doctest
import io
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch
from torch import nn

import flodl as fl
import flodl.checkpoint.background as background
from flodl.checkpoint import CpuWorker, ModelSnapshot, listeners
from tests.fixtures.failing_saves import path_failing_at_write

REPO = Path(__file__).resolve().parents[2]


def _child_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    env.pop("FLODL_VERBOSITY", None)
    return env


def test_docstring_examples():
    result = doctest.testmod(background, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_background_save_writes_the_values_of_the_call_not_later_updates(tmp_path):
    model = fl.FlowBuilder(nn.Linear(64, 64)).tag("l").through(nn.BatchNorm1d(64)).build()
    path = tmp_path / "m.fdl"
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert model.save_checkpoint(path, background=True) is None
    with torch.no_grad():  # the optimizer goes on updating the model in place
        for p in model.parameters():
            p.add_(100.0)
    fl.checkpoint.flush()
    fresh = fl.FlowBuilder(nn.Linear(64, 64)).tag("l").through(nn.BatchNorm1d(64)).build()
    report = fresh.load_checkpoint(path)  # the structural hash travelled with the snapshot
    assert not report.missing
    for name, value in fresh.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_free_function_background_save_and_options_pass_through(tmp_path):
    path = tmp_path / "t.fdl.gz"
    fl.save_checkpoint(path, {"w": torch.arange(6.0)}, {"n": torch.tensor(3)}, background=True)
    fl.checkpoint.flush()
    assert path.read_bytes()[:2] == b"\x1f\x8b"  # gzip, as a blocking save of a .gz path
    assert fl.checkpoint_keys(path) == ["w", "n"]


def test_a_failed_background_save_raises_on_flush_then_is_forgotten(tmp_path):
    with path_failing_at_write(tmp_path) as path:
        fl.save_checkpoint(path, {"w": torch.ones(1)}, background=True)
    with pytest.raises(fl.CheckpointError, match="directory exists"):
        fl.checkpoint.flush()
    fl.checkpoint.flush()  # reported once


@pytest.mark.parametrize("where", ["missing-dir/x.fdl", "."], ids=["missing-dir", "a-directory"])
def test_a_path_that_cannot_be_written_is_refused_at_the_call(tmp_path, where):
    # Not at the next save or flush, maybe an epoch later: nothing is queued.
    message = "check that the directory exists" if "/" in where else "Is a directory"
    with pytest.raises(fl.CheckpointError, match=message):
        fl.save_checkpoint(tmp_path / where, {"w": torch.ones(1)}, background=True)
    assert background.default_worker().pending == 0
    fl.checkpoint.flush()  # nothing left to report


def test_a_failed_background_save_is_logged_at_once_and_costs_no_later_save(tmp_path, caplog):
    with caplog.at_level(logging.ERROR, logger="flodl.checkpoint"):
        with listeners.save_tags(version=1), path_failing_at_write(tmp_path) as path:
            fl.save_checkpoint(path, {"w": torch.ones(1)}, background=True)
        background.default_worker()._queue.join()  # let it fail
        logged = [r.getMessage() for r in caplog.records if r.name == "flodl.checkpoint"]
        assert len(logged) == 1  # when it failed, as that save's failure: its file, its labels
        assert logged[0].startswith(f"background checkpoint save failed (version 1): {path}: ")
        good = tmp_path / "good.fdl"
        fl.save_checkpoint(good, {"w": torch.full((1,), 2.0)}, background=True)  # goes ahead
        # Not lost either: flush() still raises it, naming the file that failed, once.
        with pytest.raises(
            fl.CheckpointError, match=rf"^{re.escape(str(path))}: cannot write checkpoint"
        ):
            fl.checkpoint.flush()
    assert fl.read_checkpoint(good)["w"].item() == 2.0
    fl.checkpoint.flush()
    assert len([r for r in caplog.records if r.name == "flodl.checkpoint"]) == 1


def test_background_needs_a_path():
    with pytest.raises(fl.CheckpointError, match="needs a file path"):
        fl.save_checkpoint(io.BytesIO(), {"w": torch.ones(1)}, background=True)


def test_monitor_finish_waits_for_and_reports_background_saves(tmp_path):
    mon = fl.Monitor(1, stream=None, gpu=False)
    mon.log(0, 0.1, {"loss": 1.0})
    with path_failing_at_write(tmp_path) as path:
        fl.save_checkpoint(path, {"w": torch.ones(1)}, background=True)
    with pytest.raises(fl.CheckpointError):
        mon.finish()
    mon.close()


def test_cpu_worker_runs_in_order_and_keeps_going_after_an_error():
    seen = []

    def boom():
        raise RuntimeError("task failed")

    with CpuWorker(max_pending=8) as worker:
        worker.submit(seen.append, 1)
        failed = worker.submit(boom)
        worker.submit(seen.append, 2)
        with pytest.raises(RuntimeError, match="task failed"):
            worker.flush()
        assert seen == [1, 2] and isinstance(failed.exception(), RuntimeError)
        assert worker.is_idle() and worker.pending == 0
    with pytest.raises(RuntimeError, match="closed"):
        worker.submit(seen.append, 3)


def test_cpu_worker_queue_is_bounded():
    gate = threading.Event()
    worker = CpuWorker(max_pending=1)
    worker.submit(gate.wait)  # running (off the queue)
    worker.submit(lambda: None)  # fills the one queue slot
    third_returned = threading.Event()

    def submit_third():
        worker.submit(lambda: None)
        third_returned.set()

    t = threading.Thread(target=submit_third)
    t.start()
    assert not third_returned.wait(0.3)  # waits for room instead of piling up
    assert not worker.is_idle()
    gate.set()
    t.join(10)
    assert third_returned.is_set()
    worker.close()
    with pytest.raises(ValueError, match="max_pending"):
        CpuWorker(max_pending=0)


def test_model_snapshot_is_a_cpu_copy_with_the_graph_hash():
    graph = fl.FlowBuilder(nn.Linear(3, 2)).build()
    snap = ModelSnapshot.of(graph)
    assert snap.structural_hash == graph.structural_hash()
    assert [n for n, _ in snap.params] == [n for n, _ in graph.named_parameters()]
    weight = dict(graph.named_parameters())["linear_1.weight"]
    assert snap.params[0][1].data_ptr() != weight.data_ptr()
    assert snap.nbytes == sum(p.numel() * 4 for p in graph.parameters())
    with pytest.raises(fl.CheckpointError, match="pairs"):
        ModelSnapshot.from_tensors([("w", 3.0)])


_KILLED = textwrap.dedent(
    """
    import sys, torch, flodl as fl
    path, step = sys.argv[1], int(sys.argv[2])
    tensors = {"w": torch.full((4_000_000,), float(step))}
    fl.save_checkpoint(path, tensors, background=True)
    print("returned", flush=True)
    sys.stdin.read()  # wait to be killed
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.02, 0.1])
def test_sigkill_right_after_a_background_save_never_leaves_a_partial_file(tmp_path, delay):
    path = tmp_path / "ckpt.fdl"
    fl.save_checkpoint(path, {"w": torch.full((4_000_000,), -1.0)})  # the previous checkpoint
    script = tmp_path / "child.py"
    script.write_text(_KILLED)
    child = subprocess.Popen(
        [sys.executable, str(script), str(path), "7"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=_child_env(),
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "returned"
        if delay:
            threading.Event().wait(delay)
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    w = torch.zeros(4_000_000)
    fl.load_checkpoint(path, [("w", w)])  # complete and valid: either the old or the new file
    assert float(w[0]) in (-1.0, 7.0) and bool((w == w[0]).all())


@pytest.mark.slow
def test_pending_background_saves_are_written_at_normal_exit(tmp_path):
    path = tmp_path / "exit.fdl"
    code = textwrap.dedent(
        f"""
        import torch, flodl as fl
        fl.save_checkpoint({str(path)!r}, {{"w": torch.full((2_000_000,), 3.0)}}, background=True)
        raise SystemExit(0)
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=_child_env(), timeout=120)
    w = torch.zeros(2_000_000)
    fl.load_checkpoint(path, [("w", w)])
    assert bool((w == 3.0).all())


@pytest.mark.parametrize("how", ["graph", "trainer"])
def test_saves_return_before_the_file_is_written(tmp_path, how):
    from flodl.train.checkpointing import SaveFdl

    gate = threading.Event()
    background.default_worker().submit(gate.wait)  # the writer is busy with an earlier save
    model = fl.FlowBuilder(nn.Linear(2, 2)).build()
    if how == "graph":
        path = tmp_path / "g.fdl"
        model.save_checkpoint(path, background=True)
    else:
        saver = SaveFdl(str(tmp_path))
        saver(3, model)
        path = saver.path(3)
    assert not path.exists()  # the call returned with the write still queued
    gate.set()
    fl.checkpoint.flush()
    assert model.load_checkpoint(path).loaded
