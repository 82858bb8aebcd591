"""``fdl libtorch download`` after things go wrong: a run killed mid-extraction, Ctrl-C during a
``--force`` download, no room to unpack, an unwritable home, an unsupported Python. Real
processes, signals and files against a loopback mirror."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.conftest import clean_env
from tests.fixtures.machines import CPU_PATH, NEWEST, libtorch_zip
from tests.libtorch_home.test_libtorch_cli import transfers


def words(text: str) -> str:
    """stderr with rich's line wrapping undone."""
    return " ".join(text.split())


def squashed(text: str) -> str:
    """Without any whitespace: a path longer than the terminal is folded mid-word."""
    return "".join(text.split())


def many_files_zip(count: int = 10_000) -> bytes:
    """A libtorch-shaped archive of many small headers: unpacking it takes a second or more."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("libtorch/lib/libtorch.so", b"\x7fELF fake torch library " * 200)
        for i in range(count):
            zf.writestr(f"libtorch/include/h{i // 1000}/f{i}.h", b"#pragma once\n")
    return buf.getvalue()


def start_fdl(*args: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "fdl", *args],
        cwd=cwd,
        env=clean_env(**env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(found, what: str, timeout: float = 60):
    """Poll ``found()`` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def staging(home: Path) -> list[Path]:
    precompiled = home / "precompiled"
    return sorted(precompiled.glob(".cpu.*")) if precompiled.is_dir() else []


# -- 1. a run killed while unpacking ------------------------------------------------------------


def test_sigterm_while_unpacking_removes_the_staging_tree_and_keeps_the_download(mirror, run_fdl):
    server, env, work, home = mirror
    body = many_files_zip()
    server.add(CPU_PATH, body)
    proc = start_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    wait_for(lambda: staging(home), "the staging tree")
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM, err  # it still dies of the signal…
    assert "Traceback" not in err
    assert staging(home) == []  # …after removing what it had unpacked
    assert not (home / "precompiled" / "cpu").exists() and not (home / ".active").exists()
    part = home / ".downloads" / f"libtorch-shared-with-deps-{NEWEST}+cpu.zip.part"
    assert part.read_bytes() == body  # the download is kept for the next run…
    again = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    assert again.returncode == 0, again.stderr
    assert transfers(server)[-1]["Range"] == f"bytes={len(body)}-"  # …which does not refetch it
    assert (home / "precompiled" / "cpu" / "include" / "h9" / "f9999.h").is_file()
    assert not (home / ".downloads").exists()


def test_trees_of_killed_runs_are_listed_and_removed_by_the_next_download(mirror, run_fdl):
    server, env, work, home = mirror
    server.add(CPU_PATH, many_files_zip())
    proc = start_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    (left,) = wait_for(lambda: staging(home), "the staging tree")
    proc.kill()  # SIGKILL: no chance to clean up
    proc.communicate(timeout=60)
    assert left.is_dir()
    # ".cpu.extract-<host>-<pid>-<random>": a live run's tree and a replaced tree left by a
    # run killed while deleting it, named the same way
    host = left.name.removeprefix(".cpu.extract-").rsplit("-", 2)[0]
    live = home / "precompiled" / f".cpu.extract-{host}-{os.getpid()}-abcd1234"
    live.mkdir()
    old = home / "precompiled" / f".cpu.old-{host}-{proc.pid}"
    (old / "lib").mkdir(parents=True)

    listed = run_fdl("libtorch", "list", env=env, cwd=work)
    assert listed.returncode == 0, listed.stderr
    said = words(listed.stderr)
    assert f"leftover: {left} (" in said and f"leftover: {old} (" in said
    assert "left by an interrupted run; the next 'fdl libtorch download' removes it" in said
    assert f"leftover: {live} (" in said and "in use by a running fdl" in said
    assert re.search(rf"leftover: {re.escape(str(left))} \(\d+(\.\d+)? (B|KiB|MiB)\)", said)

    server.add(CPU_PATH, libtorch_zip())
    result = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    assert result.returncode == 0, result.stderr
    assert not left.exists() and not old.exists()
    assert live.is_dir()  # never a tree a running process may be writing
    assert (home / "precompiled" / "cpu" / "lib" / "libtorch.so").is_file()
    assert run_fdl("libtorch", "list", env=env, cwd=work).stdout == "  precompiled/cpu (active)\n"


# -- 2. Ctrl-C during a --force download ---------------------------------------------------------


def test_ctrl_c_on_a_force_download_is_resumed_by_the_same_command(mirror, run_fdl):
    server, env, work, home = mirror
    assert run_fdl("libtorch", "download", "--cpu", env=env, cwd=work).returncode == 0
    body = libtorch_zip(extra={"libtorch/lib/libc10.so": os.urandom(3 << 20)})
    served = server.add(CPU_PATH, body, stall_at=1 << 20)  # a new archive that hangs at 1 MiB
    part = home / ".downloads" / f"libtorch-shared-with-deps-{NEWEST}+cpu.zip.part"
    env = {**env, "FDL_STALL_TIMEOUT": "6"}  # reading the index ahead hangs too: 2 s at most
    proc = start_fdl("libtorch", "download", "--cpu", "--force", env=env, cwd=work)
    wait_for(lambda: part.is_file() and part.stat().st_size == 1 << 20, "1 MiB in the .part")
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "kept, re-run the same command to resume" in words(err)

    served.stall_at = None
    again = run_fdl("libtorch", "download", "--cpu", "--force", env=env, cwd=work)
    assert again.returncode == 0, again.stderr
    assert f"resumed at {1 << 20} bytes" in again.stderr  # what the message promised
    assert transfers(server)[-1]["Range"] == f"bytes={1 << 20}-"
    lib = home / "precompiled" / "cpu" / "lib"
    assert (lib / "libc10.so").stat().st_size == 3 << 20  # --force did replace the install


def test_force_starts_over_when_the_part_has_no_server_validator(mirror, run_fdl):
    # without an ETag/Last-Modified a resumed part could splice two versions of the file
    server, env, work, home = mirror
    body = libtorch_zip(extra={"libtorch/lib/libc10.so": os.urandom(300_000)})
    server.add(CPU_PATH, body, etag=None, drop_after=10_000, drops_left=1000)
    env = {**env, "FDL_STALL_TIMEOUT": "0.5"}  # every attempt is cut short: it gives up
    first = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    assert first.returncode == 3, first.stderr
    assert (home / ".downloads" / f"libtorch-shared-with-deps-{NEWEST}+cpu.zip.part").is_file()
    server.add(CPU_PATH, body, etag=None)
    again = run_fdl("libtorch", "download", "--cpu", "--force", env=env, cwd=work)
    assert again.returncode == 0, again.stderr
    assert "Range" not in transfers(server)[-1] and "resumed" not in again.stderr


# -- 3. no room to unpack ------------------------------------------------------------------------


def claims_more_than_the_disk(home_parent: Path) -> bytes:
    """A small valid archive whose central directory declares a member twice as large as the free
    space where it would unpack (a real zip64 size; nothing is ever unpacked)."""
    free = shutil.disk_usage(home_parent).free
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("libtorch/lib/libtorch.so", b"\x7fELF" * 100)
        zf.writestr("libtorch/lib/libc10.so", os.urandom(50_000))
        zf.filelist[-1].file_size = 2 * free  # written into the central directory at close
    return buf.getvalue()


NO_LIMITS = {"FDL_MAX_EXTRACT_SIZE": "100000000T", "FDL_MAX_EXTRACT_RATIO": "1e18"}


def test_no_room_to_unpack_is_refused_before_downloading(mirror, run_fdl):
    server, env, work, home = mirror
    body = claims_more_than_the_disk(work)
    server.add(CPU_PATH, body)
    result = run_fdl("libtorch", "download", "--cpu", env={**env, **NO_LIMITS}, cwd=work)
    assert result.returncode == 3, result.stderr
    err = words(result.stderr)
    assert "error: not enough disk space in" in err
    # every term of the sum is stated, the 64 MiB margin included
    assert "to download," in err and "to unpack it, 64.0 MiB kept free)" in err
    assert len(transfers(server)) == 1  # asked for, but refused on its headers: body not read
    assert list((home / ".downloads").iterdir()) == []
    assert not (home / "precompiled" / "cpu").exists()


def test_an_archive_with_no_room_to_unpack_is_kept_and_not_fetched_again(mirror, run_fdl):
    server, env, work, home = mirror
    body = claims_more_than_the_disk(work)
    # no byte ranges: the size cannot be read ahead, so the refusal comes after the download
    server.add(CPU_PATH, body, ranges=False)
    env = {**env, **NO_LIMITS}
    result = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    assert result.returncode == 3, result.stderr
    err = words(result.stderr)
    assert "to extract" in err and "and 64.0 MiB is kept free, so it needs" in err
    part = home / ".downloads" / f"libtorch-shared-with-deps-{NEWEST}+cpu.zip.part"
    assert "free some space, then re-run the same command" in err
    assert str(part) in squashed(result.stderr)
    assert part.read_bytes() == body  # the whole archive is kept, and listed
    listed = run_fdl("libtorch", "list", env=env, cwd=work)
    assert f"keptdownload:{part}(" in squashed(listed.stderr)
    assert not (home / "precompiled" / "cpu").exists() and staging(home) == []

    server.add(CPU_PATH, body)  # the mirror now answers ranges: the kept part is complete
    again = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    assert again.returncode == 3 and "to extract" in words(again.stderr), again.stderr
    last = transfers(server)[-1]
    assert last["Range"] == f"bytes={len(body)}-"  # 416: nothing was transferred again
    assert part.read_bytes() == body


def test_after_space_is_freed_the_kept_archive_installs_without_a_new_transfer(mirror, monkeypatch):
    # The free space seen by fdl's disk checks (shutil.disk_usage, its one view of the disk) is
    # set, as a full disk would set it: room for the archive, not for what it unpacks to. fdl
    # itself runs unchanged, in process, against the loopback mirror.
    from collections import namedtuple

    from fdl.commands import libtorch
    from fdl.errors import FdlError

    server, _env, _work, home = mirror
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("libtorch/lib/libtorch.so", bytes(8 << 20))  # 8 MiB of zeros: ~8 KiB packed
    body = buf.getvalue()
    server.add(CPU_PATH, body)
    usage = namedtuple("usage", "total used free")
    free = {"bytes": (64 << 20) + (4 << 20)}  # the margin and 4 MiB: the download fits
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(1 << 40, 0, free["bytes"]))

    def install():
        return libtorch.download_variant(
            None,
            "cpu",
            "linux-x86_64",
            path=str(home),
            mirror=server.url,
            progress=False,
            max_extract_ratio="5000",
        )

    # with the size read ahead, the check before downloading already counts the unpacking
    with pytest.raises(FdlError, match=r"8\.0 MiB to unpack it, 64\.0 MiB kept free"):
        install()
    assert len(transfers(server)) == 1  # refused on the headers: the body was not read
    assert list((home / ".downloads").iterdir()) == []

    # a mirror without ranges: it downloads, then the extraction is refused and the archive kept
    server.add(CPU_PATH, body, ranges=False)
    with pytest.raises(FdlError, match=r"it unpacks to 8\.0 MiB, and 64\.0 MiB is kept free") as e:
        install()
    assert "the downloaded archive is kept" in (e.value.hint or "")
    before = len(transfers(server))

    free["bytes"] = 1 << 30  # space was freed
    server.add(CPU_PATH, body)
    summary = install()
    assert summary["downloaded"] is True and summary["resumed_from"] == len(body)
    new = transfers(server)[before:]
    assert [g.get("Range") for g in new] == [f"bytes={len(body)}-"]  # checked, not re-sent
    assert (home / "precompiled" / "cpu" / "lib" / "libtorch.so").stat().st_size == 8 << 20
    assert not (home / ".downloads").exists()


# -- 4. an unwritable home ------------------------------------------------------------------------


def test_an_unwritable_home_is_one_error_line_not_a_traceback(mirror, run_fdl, tmp_path):
    _server, env, work, _home = mirror
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")  # unwritable even for root, unlike a chmod
    for how in ("env", "path"):
        args = ["--path", str(blocker / "libtorch")] if how == "path" else []
        run_env = {**env, "FLODL_HOME": str(blocker / "flodl")} if how == "env" else env
        result = run_fdl("libtorch", "download", "--cpu", *args, env=run_env, cwd=work)
        assert result.returncode == 3, result.stderr
        assert "Traceback" not in result.stderr
        err = words(result.stderr)
        assert f"error:cannotcreate{blocker}/" in squashed(result.stderr)
        assert ": Not a directory — " in err and "--path DIR, or FLODL_HOME" in err
    assert blocker.read_text() == "not a directory\n"


def test_an_unwritable_active_file_is_one_error_line(mirror, run_fdl):
    _server, env, work, home = mirror
    assert (
        run_fdl("libtorch", "download", "--cpu", "--no-activate", env=env, cwd=work).returncode == 0
    )
    (home / ".active").mkdir()  # .active cannot be replaced by a file
    result = run_fdl("libtorch", "activate", "cpu", env=env, cwd=work)
    assert result.returncode == 3 and "Traceback" not in result.stderr, result.stderr
    assert f"error:cannotwriteto{home}/.active:Isadirectory—" in squashed(result.stderr)


# -- 5. the Python running fdl does not matter for libtorch ---------------------------------------


def test_auto_detect_does_not_filter_libtorch_by_python(mirror, run_fdl, tmp_path):
    _server, env, work, home = mirror
    table = json.loads(
        (Path(__file__).parents[2] / "fdl" / "variants" / "torch_releases.json").read_text()
    )
    for release in table["releases"]:
        release["python"] = ["3.40", "3.41"]  # no torch wheel for the Python running fdl
    (tmp_path / "table.json").write_text(json.dumps(table))
    env = {**env, "FDL_TORCH_TABLE": str(tmp_path / "table.json")}
    result = run_fdl("libtorch", "download", "--dry-run", env=env, cwd=work)
    assert result.returncode == 0, result.stderr
    assert f"libtorch {NEWEST} (cpu, cpu)" in result.stderr
    assert "Python" not in result.stderr and not home.exists()
