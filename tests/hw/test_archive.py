"""Zip extraction: CRC-checked, confined to the target, atomic."""

from __future__ import annotations

import pytest

from fdl.downloads import UnsafeArchiveError, extract_zip
from fdl.errors import FdlError
from tests.hw.conftest import libtorch_zip


def write(tmp_path, data: bytes):
    path = tmp_path / "a.zip"
    path.write_bytes(data)
    return path


def test_extracts_and_unwraps_the_top_directory(tmp_path):
    dest = extract_zip(write(tmp_path, libtorch_zip()), tmp_path / "out", strip="libtorch")
    assert (dest / "lib" / "libtorch.so").is_file()
    assert (dest / "share" / "cmake" / "Torch" / "TorchConfig.cmake").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"../evil.txt": b"x"}, "escapes the target"),
        ({"libtorch/../../evil.txt": b"x"}, "escapes the target"),
        ({"/etc/evil.txt": b"x"}, "absolute path"),
        ({"C:/evil.txt": b"x"}, "absolute path"),
    ],
)
def test_zip_slip_members_are_refused_before_anything_is_written(tmp_path, extra, message):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("previous install")
    with pytest.raises(UnsafeArchiveError, match=message):
        extract_zip(write(tmp_path, libtorch_zip(extra=extra)), tmp_path / "out", strip="libtorch")
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path.parent / "evil.txt").exists()
    assert (tmp_path / "out" / "keep.txt").read_text() == "previous install"  # nothing lost


def test_symlink_out_of_the_archive_is_refused(tmp_path):
    data = libtorch_zip(symlinks={"libtorch/lib/libc.so": "../../../../etc/passwd"})
    with pytest.raises(UnsafeArchiveError, match="points outside"):
        extract_zip(write(tmp_path, data), tmp_path / "out", strip="libtorch")
    assert not (tmp_path / "out").exists()
    data = libtorch_zip(symlinks={"libtorch/lib/abs.so": "/etc/passwd"})
    with pytest.raises(UnsafeArchiveError, match="points outside"):
        extract_zip(write(tmp_path, data), tmp_path / "out", strip="libtorch")


def test_symlink_inside_the_archive_is_kept(tmp_path):
    data = libtorch_zip(symlinks={"libtorch/lib/libtorch.so.2": "libtorch.so"})
    dest = extract_zip(write(tmp_path, data), tmp_path / "out", strip="libtorch")
    link = dest / "lib" / "libtorch.so.2"
    assert link.is_symlink() and link.resolve() == (dest / "lib" / "libtorch.so").resolve()


def test_corrupt_zip_is_refused(tmp_path):
    data = bytearray(libtorch_zip())
    name = b"libtorch/lib/libtorch.so"
    start = data.index(name) + len(name) + 4  # inside the first member's compressed bytes
    data[start : start + 8] = b"\x00" * 8
    with pytest.raises(FdlError, match=r"corrupt|not a valid zip"):
        extract_zip(write(tmp_path, bytes(data)), tmp_path / "out")
    with pytest.raises(FdlError, match="not a valid zip"):
        extract_zip(write(tmp_path, b"<html>404</html>"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_replaces_an_existing_tree_atomically(tmp_path):
    (tmp_path / "out" / "old").mkdir(parents=True)
    extract_zip(write(tmp_path, libtorch_zip()), tmp_path / "out", strip="libtorch")
    assert not (tmp_path / "out" / "old").exists() and (tmp_path / "out" / "lib").is_dir()
