"""Atomic writes: a failed or killed save leaves the previous checkpoint intact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import flodl as fl
from tests.conftest import clean_env


def previous(path) -> None:
    fl.save_checkpoint(path, {"w": torch.full((4,), 1.5)})


def assert_previous_intact(path) -> None:
    back = fl.read_checkpoint(path)
    assert list(back) == ["w"] and torch.equal(back["w"], torch.full((4,), 1.5))
    assert fl.checkpoint_info(path).verified
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind


def run_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=timeout,
        check=False,
    )


def test_an_io_failure_mid_write_leaves_the_old_file(tmp_path):
    paths = [tmp_path / "plain" / "m.fdl", tmp_path / "gz" / "m.fdl.gz"]
    for path in paths:
        path.parent.mkdir()
        previous(path)
    # A real write failure: the file-size limit makes the kernel refuse bytes past 64 KiB.
    result = run_python(
        f"""
        import resource, signal, torch, flodl as fl
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        for path in {[str(p) for p in paths]!r}:
            try:
                fl.save_checkpoint(path, {{"w": torch.randn(1 << 20)}})
            except fl.CheckpointError as err:
                print("error:", err)
        """
    )
    errors = [line for line in result.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 2, result.stderr
    assert all("cannot write checkpoint" in e and "previous file" in e for e in errors)
    for path in paths:
        assert_previous_intact(path)


@pytest.mark.skipif(not hasattr(os, "fdatasync"), reason="no fdatasync on this platform")
def test_a_large_save_writes_back_while_it_writes_then_fsyncs(tmp_path, monkeypatch):
    # The disk gets the pages during the write (background fdatasync), so the final fsync only
    # waits for the tail; the file is still whole and verified.
    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: synced.append(fd) or real(fd))
    weights = {"w": torch.randn(24 << 20)}  # 96 MiB: three writeback windows
    fl.save_checkpoint(tmp_path / "big.fdl", weights)
    assert synced  # written back while writing, not only at the end
    back = fl.read_checkpoint(tmp_path / "big.fdl")
    assert (
        torch.equal(back["w"], weights["w"]) and fl.checkpoint_info(tmp_path / "big.fdl").verified
    )


def test_a_failed_background_writeback_fails_the_save_and_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "m.fdl"
    previous(path)

    def broken_disk(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", broken_disk, raising=False)
    with pytest.raises(fl.CheckpointError, match=r"Input/output error.*previous file"):
        fl.save_checkpoint(path, {"w": torch.randn(24 << 20)})
    assert_previous_intact(path)


def test_a_process_killed_while_saving_leaves_the_old_file(tmp_path):
    path = tmp_path / "model.fdl"
    previous(path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import torch, flodl as fl
                big = {{f"layer{{i}}": torch.randn(1 << 20) for i in range(48)}}  # ~200 MB
                print("ready", flush=True)
                while True:
                    fl.save_checkpoint({str(path)!r}, big)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        env=clean_env(),
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # kill it once a temp file is being written
            temps = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
            if temps and temps[0].stat().st_size > 1 << 20:
                break
            time.sleep(0.002)
        else:
            pytest.fail("the saving process never started writing")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    # The killed save leaves its temp file behind (nothing can clean up after SIGKILL) ...
    leftovers = [p for p in tmp_path.iterdir() if p.name != path.name]
    assert all(p.name.startswith(".model.fdl.") and p.name.endswith(".tmp") for p in leftovers)
    for p in leftovers:
        p.unlink()
    # ... but the checkpoint itself is either the previous one or a complete new one.
    back = fl.read_checkpoint(path)
    if list(back) == ["w"]:
        assert_previous_intact(path)
    else:
        assert len(back) == 48 and fl.checkpoint_info(path).verified


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(fl.CheckpointError, match=r"cannot write checkpoint.*directory exists"):
        fl.save_checkpoint(tmp_path / "nope" / "m.fdl", {"w": torch.ones(1)})


@pytest.mark.parametrize("where", [".", "", "sub"])
def test_a_directory_is_a_clear_error_naming_it(tmp_path, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    graph = fl.FlowBuilder(torch.nn.Linear(2, 1)).build()
    with pytest.raises(fl.CheckpointError, match=r"^\S+: cannot write checkpoint: Is a directory"):
        graph.save_checkpoint(where)  # blocking, as the background save refuses it
    with pytest.raises(fl.CheckpointError, match="Is a directory"):
        fl.save_training_state(where, graph)
    assert [p.name for p in tmp_path.iterdir()] == ["sub"] and not any((tmp_path / "sub").iterdir())


def test_a_refused_save_touches_nothing(tmp_path):
    path = tmp_path / "m.fdl"
    previous(path)

    with pytest.raises(fl.CheckpointError):
        fl.save_checkpoint(path, {"w": torch.ones(2), "bad": torch.ones(2, dtype=torch.complex64)})
    assert_previous_intact(path)


def test_through_a_symlink_the_checkpoint_it_points_to_is_replaced_and_keeps_its_mode(tmp_path):
    # "latest.fdl -> runs/7/model.fdl": the save replaced the link with a regular file and
    # left the run's file stale.
    run = tmp_path / "runs" / "7"
    run.mkdir(parents=True)
    previous(run / "model.fdl")
    (run / "model.fdl").chmod(0o640)
    latest = tmp_path / "latest.fdl"
    latest.symlink_to(run / "model.fdl")
    fl.save_checkpoint(latest, {"w": torch.full((4,), 2.5)})
    assert latest.is_symlink() and latest.resolve() == (run / "model.fdl").resolve()
    assert torch.equal(fl.read_checkpoint(run / "model.fdl")["w"], torch.full((4,), 2.5))
    assert (run / "model.fdl").stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in run.iterdir()) == ["model.fdl"]  # no temp file left


def test_a_checkpoint_written_to_a_fifo_streams_into_it(tmp_path):
    # A rename over the FIFO replaced the pipe itself, and its reader never saw the data.
    fifo = tmp_path / "pipe.fdl"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    try:
        fl.save_checkpoint(fifo, {"w": torch.full((4,), 3.5)})
        data, _ = reader.communicate(timeout=30)
    finally:  # a save that never opened the FIFO leaves the reader waiting: end it
        reader.kill()
        reader.wait()
    assert fifo.is_fifo()
    copy = tmp_path / "copy.fdl"
    copy.write_bytes(data)
    assert torch.equal(fl.read_checkpoint(copy)["w"], torch.full((4,), 3.5))
