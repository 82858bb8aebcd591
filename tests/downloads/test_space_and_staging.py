"""Free-space checks that count the unpacking, reading a zip's size ahead over HTTP ranges,
unwritable destinations, and the staging trees interrupted extractions leave."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile

import pytest

from fdl.downloads import download
from fdl.downloads.archive import remote_unpacked_size, remove_stale_staging, staging_trees
from fdl.downloads.engine import DownloadError
from fdl.errors import FdlError


def test_the_space_message_states_every_term_of_the_sum(server, tmp_path):
    server.add("/huge.bin", b"x" * 1000, announce_length=1 << 50)
    with pytest.raises(DownloadError) as err:
        download(
            f"{server.url}/huge.bin",
            tmp_path / "huge.bin",
            retries=0,
            progress=False,
            reserve=5 << 20,
        )
    # "need 0.08 GB, 0.13 GB free" read as a contradiction: the margin is now said
    assert "(1048576.00 GiB to download, 5.0 MiB to unpack it, 64.0 MiB kept free)" in (
        err.value.what
    )
    assert list(tmp_path.iterdir()) == []


def test_a_reserve_that_does_not_fit_refuses_a_small_download(server, tmp_path):
    import shutil

    server.add("/small.bin", b"x" * 1000)
    free = shutil.disk_usage(tmp_path).free
    with pytest.raises(DownloadError, match="to unpack it") as err:
        download(f"{server.url}/small.bin", tmp_path / "small.bin", progress=False, reserve=free)
    assert err.value.code == 3 and list(tmp_path.iterdir()) == []
    # the same download with room to unpack goes through
    download(f"{server.url}/small.bin", tmp_path / "small.bin", progress=False, reserve=1 << 20)
    assert (tmp_path / "small.bin").stat().st_size == 1000


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_the_unpacked_size_is_read_ahead_from_the_central_directory(server):
    small = _zip({"a/lib.so": bytes(100_000), "a/x.h": b"#pragma once\n"})
    server.add("/small.zip", small)
    assert remote_unpacked_size(f"{server.url}/small.zip") == 100_000 + 13
    # many members: the central directory is larger than the tail read first, and far from
    # the start; only it and the tail are asked for, never the whole archive
    members = {f"inc/h{i}.h": os.urandom(64) for i in range(8000)}
    members["lib/big.so"] = os.urandom(2 << 20)
    large = _zip(members)
    server.add("/large.zip", large)
    assert remote_unpacked_size(f"{server.url}/large.zip") == 8000 * 64 + (2 << 20)
    ranges = [h["Range"] for h in server.gets("/large.zip")]
    assert ranges and all(r.startswith("bytes=") and r.rsplit("-", 1)[1] for r in ranges)
    asked = sum(int(r.rsplit("-", 1)[1]) - int(r[6:].split("-")[0]) + 1 for r in ranges)
    assert asked < len(large) // 2


def test_the_unpacked_size_is_unknown_without_ranges_or_a_zip(server):
    body = _zip({"a/lib.so": bytes(1000)})
    server.add("/noranges.zip", body, ranges=False)
    assert remote_unpacked_size(f"{server.url}/noranges.zip") is None
    server.add("/notzip.zip", os.urandom(5000))
    assert remote_unpacked_size(f"{server.url}/notzip.zip") is None
    assert remote_unpacked_size(f"{server.url}/missing.zip") is None


def test_an_unwritable_destination_is_an_fdl_error(server, tmp_path):
    server.add("/f.bin", b"x" * 1000)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(FdlError, match=r"cannot create .*a-file/sub: Not a directory") as err:
        download(f"{server.url}/f.bin", blocker / "sub" / "f.bin", progress=False)
    assert err.value.code == 3 and "--path" in (err.value.hint or "")


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: no process has this id now (until the system reuses it)
    return child.pid


def test_only_trees_of_runs_that_ended_on_this_host_are_removed(tmp_path):
    from fdl.downloads.archive import _owner_tag

    host = _owner_tag().rsplit("-", 1)[0]
    dead, alive = _dead_pid(), os.getpid()
    names = {
        f".cpu.extract-{host}-{dead}-abcd1234": False,  # killed mid-extraction
        f".cpu.old-{host}-{dead}": False,  # killed while deleting the tree it replaced
        f".cpu.old-{dead}": None,  # the same, named by an older fdl: from which host?
        f".cpu.extract-{host}-{alive}-abcd1234": True,  # a run still unpacking
        f".cpu.extract-elsewhere-{dead}-abcd1234": None,  # another host's: cannot tell
        # another host (or container) whose tag shares a prefix with ours: cannot tell either
        f".cpu.extract-{host[:-1]}{'0' if host[-1] != '0' else '1'}-{dead}-abcd1234": None,
        ".cpu.extract-k2j4l5m6": None,  # an older fdl's, without a process id
    }
    for name in names:
        (tmp_path / name / "lib").mkdir(parents=True)
        (tmp_path / name / "lib" / "libtorch.so").write_bytes(bytes(3000))
    (tmp_path / "cpu" / "lib").mkdir(parents=True)  # an installed variant: not a staging tree
    found = {tree.path.name: tree.owner_alive for tree in staging_trees(tmp_path)}
    assert found == names
    assert all(tree.size() >= 3000 for tree in staging_trees(tmp_path))
    removed = {p.name for p in remove_stale_staging(tmp_path)}
    assert removed == {name for name, alive in names.items() if alive is False}
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {"cpu"} | {name for name, alive in names.items() if alive is not False}
