"""flodl.files: reports, exports and pages are written whole or not at all, errors name the target."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
import torch

import flodl as fl
from flodl.files import open_atomic, replacing, write_bytes, write_text


def test_a_failed_write_leaves_the_previous_file_and_nothing_else(tmp_path):
    target = tmp_path / "report.csv"
    write_text(target, "old\n")
    with pytest.raises(ValueError, match="while rendering"), open_atomic(target) as f:
        f.write("half a ")
        raise ValueError("while rendering")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.csv"]
    with pytest.raises(RuntimeError), replacing(target) as tmp:
        tmp.write_text("new")
        raise RuntimeError
    assert target.read_text() == "old\n" and len(list(tmp_path.iterdir())) == 1


def test_a_missing_directory_is_an_error_naming_the_target_not_a_temporary_file(tmp_path):
    target = tmp_path / "absent" / "page.html"
    with pytest.raises(FileNotFoundError) as err:
        write_text(target, "x")
    assert err.value.filename == str(target) and ".tmp" not in str(err.value)
    with pytest.raises(FileNotFoundError, match=r"page\.bin'$"):
        write_bytes(tmp_path / "absent" / "page.bin", b"x")


def test_every_writer_goes_through_it(tmp_path):
    # The timeline's three exports, the monitor's archive and CSV: one failure, one message.
    timeline = fl.monitor.Timeline(gpu=False)
    timeline.event("mark")
    writers = [timeline.save_json, timeline.save_csv, timeline.save_html]
    monitor = fl.Monitor(1, stream=None, gpu=False)
    monitor.log(0, 0.1, {"loss": 1.0})
    writers += [monitor.export_csv, monitor.save_html]
    try:
        for i, write in enumerate(writers):
            target = tmp_path / "absent" / "out"
            with pytest.raises(FileNotFoundError) as err:
                write(target)
            assert err.value.filename == str(target), write
            write(tmp_path / f"{i}.out")  # and into a directory that exists
    finally:
        monitor.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{i}.out" for i in range(5)]


@pytest.mark.parametrize("where", [".", "", "sub"])
def test_a_directory_is_an_error_naming_it_and_nothing_is_written(tmp_path, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    monitor = fl.Monitor(1, stream=None, gpu=False)
    monitor.log(0, 0.1, {"loss": 1.0})
    writers = [
        lambda p: write_text(p, "x"),
        monitor.save_html,
        monitor.export_csv,
        monitor.write_log,
        fl.monitor.Timeline(gpu=False).save_json,
    ]
    try:
        for write in writers:
            with pytest.raises(IsADirectoryError, match=r"Is a directory: ") as err:
                write(where)
            assert err.value.filename == str(Path(where))
    finally:
        monitor.close()
    assert [p.name for p in tmp_path.iterdir()] == ["sub"] and not any((tmp_path / "sub").iterdir())


def test_through_a_symlink_the_file_it_points_to_is_replaced_and_the_link_stays(tmp_path):
    real = tmp_path / "runs" / "report.csv"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "latest.csv"
    link.symlink_to(real)
    write_text(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    assert [p.name for p in real.parent.iterdir()] == ["report.csv"]  # no temporary file left
    dangling = tmp_path / "dangling.csv"
    dangling.symlink_to(tmp_path / "runs" / "later.csv")  # a link to a file not written yet
    write_bytes(dangling, b"x")
    assert dangling.is_symlink() and (tmp_path / "runs" / "later.csv").read_bytes() == b"x"


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755, 0o444])
def test_a_replaced_file_keeps_its_permission_bits(tmp_path, mode):
    target = tmp_path / "report.txt"
    target.write_text("old")
    target.chmod(mode)
    with replacing(target) as tmp:
        assert stat.S_IMODE(tmp.stat().st_mode) == 0o600  # owner-only while it is written
        tmp.write_text("new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == mode
    fresh = write_text(tmp_path / "fresh.txt", "x")  # a new file: the usual mode (umask)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask


def test_a_fifo_is_written_into_never_replaced_or_removed(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_text(fifo, "through the pipe\n")
    reader.join(timeout=30)
    assert got == [b"through the pipe\n"]
    with pytest.raises(RuntimeError), replacing(fifo) as path:  # a failure removes nothing
        assert path == fifo
        raise RuntimeError
    assert stat.S_ISFIFO(fifo.stat().st_mode) and [p.name for p in tmp_path.iterdir()] == ["pipe"]


@pytest.mark.skipif(not os.path.exists(os.devnull), reason="no null device")
def test_a_device_is_written_in_place():
    # Only the path handed over is checked before anything is written, so no version of
    # replacing() could rename over the device node here.
    with replacing(os.devnull) as path:
        assert path == Path(os.devnull)
        path.write_bytes(b"discarded")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_a_path_through_proc_is_appended_to_not_replaced(tmp_path):
    # /dev/stdout redirected to a log resolves to that log: renaming over it cut the log off
    # from the process (all it had and all it printed later were lost).
    log = tmp_path / "out.log"
    log.write_text("earlier line\n")
    with open(log, "a") as held:
        fd_link = tmp_path / "stdout"
        fd_link.symlink_to(f"/proc/self/fd/{held.fileno()}")  # what /dev/stdout is
        inode = log.stat().st_ino
        write_text(fd_link, "written through\n")
        held.write("later line\n")
    assert log.read_text() == "earlier line\nwritten through\nlater line\n"
    assert log.stat().st_ino == inode and fd_link.is_symlink()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root (lchown)")
def test_another_users_link_in_a_shared_sticky_directory_is_not_followed(tmp_path):
    # As the kernel's protected_symlinks: a link planted in /tmp by someone else must not
    # redirect a write to the file it names (it used to be replaced, mode and all).
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    planted = shared / "metrics.json"
    planted.symlink_to(victim)
    os.lchown(planted, 1234, 1234)
    with pytest.raises(PermissionError, match="owned by another user"):
        write_text(planted, "{}")
    with pytest.raises(fl.CheckpointError, match="owned by another user"):
        fl.save_checkpoint(planted, {"w": torch.zeros(2)})
    assert victim.read_text() == "precious\n"
    os.lchown(planted, os.geteuid(), os.getegid())  # one's own link is followed
    write_text(planted, "{}")
    assert victim.read_text() == "{}" and planted.is_symlink()
