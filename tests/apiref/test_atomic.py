"""atomic_write: whole files or nothing, with the permissions and line endings users had."""

from __future__ import annotations

import os
import stat

import pytest

from fdl.apiref.atomic import atomic_write, newline_of


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("before", [0o644, 0o664, 0o600, 0o755])
def test_an_existing_file_keeps_its_mode(tmp_path, before):
    path = tmp_path / "AGENTS.md"
    path.write_text("old\n")
    path.chmod(before)
    atomic_write(path, "new\n")
    assert path.read_text() == "new\n" and mode(path) == before


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_a_new_file_gets_what_open_would_give_it(tmp_path, umask):
    old = os.umask(umask)
    try:
        atomic_write(tmp_path / "new.md", "x\n")
        with open(tmp_path / "by-open.md", "w") as handle:
            handle.write("x\n")
    finally:
        os.umask(old)
    assert mode(tmp_path / "new.md") == 0o666 & ~umask == mode(tmp_path / "by-open.md")
    now = os.umask(old)
    assert now == old  # atomic_write left the umask as it found it


def test_newline_is_applied_and_detected(tmp_path):
    path = tmp_path / "a.md"
    atomic_write(path, "one\ntwo\n", newline="\r\n")
    assert path.read_bytes() == b"one\r\ntwo\r\n"
    assert newline_of(path) == "\r\n"
    atomic_write(path, "one\n")
    assert path.read_bytes() == b"one\n" and newline_of(path) == "\n"
    assert newline_of(tmp_path / "missing.md") == "\n"
    (tmp_path / "no-newline.md").write_bytes(b"x")
    assert newline_of(tmp_path / "no-newline.md", default="\r\n") == "\r\n"


def test_a_symlink_is_written_through(tmp_path):
    target = tmp_path / "shared.md"
    target.write_text("old\n")
    target.chmod(0o644)
    link = tmp_path / "AGENTS.md"
    link.symlink_to(target)
    atomic_write(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n" and mode(target) == 0o644


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "a.md"
    path.write_text("old\n")

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        atomic_write(path, "new\n")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md"]
