"""Zip extraction: CRC-checked, confined to the target, atomic."""

from __future__ import annotations

import pytest

from fdl.downloads import UnsafeArchiveError, extract_zip
from fdl.errors import FdlError
from tests.fixtures.machines import libtorch_zip


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


# libtorch/y -> ..  and  libtorch/x -> y  each pass a lexical check; q -> x/.. is really the
# staging directory's parent, and q/z -> ../.. climbs further: writing q/z/ESCAPED.txt would land
# two levels above the install. (The audit's proof of concept, as an archive.)
SYMLINK_CHAIN = {
    "libtorch/y": "..",
    "libtorch/x": "y",
    "libtorch/q": "x/..",
    "libtorch/q/z": "../..",
}


def chain_zip(*, write_through: bool = True) -> bytes:
    extra = {"libtorch/q/z/ESCAPED.txt": b"written outside the libtorch home"}
    return libtorch_zip_ordered(SYMLINK_CHAIN, extra if write_through else {})


def libtorch_zip_ordered(symlinks: dict[str, str], files_after: dict[str, bytes]) -> bytes:
    """libtorch_zip, but with files written after the links (the order an attacker picks)."""
    import io
    import stat
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("libtorch/lib/libtorch.so", b"\x7fELF")
        for name, target in symlinks.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
        for name, data in files_after.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_symlink_chain_cannot_write_outside(tmp_path):
    home = tmp_path / "home"
    dest = home / "flodl" / "libtorch" / "precompiled" / "cpu"
    with pytest.raises(UnsafeArchiveError, match="through a symlink"):
        extract_zip(write(tmp_path, chain_zip()), dest, strip="libtorch")
    assert not list(tmp_path.rglob("ESCAPED.txt"))
    assert not dest.exists()
    assert [p.name for p in dest.parent.iterdir()] == []  # no staging left behind


def test_symlink_chain_leaving_the_installed_tree_is_refused(tmp_path):
    # No write goes through the links, but once libtorch/ is unwrapped, y -> .. (and everything
    # chained on it) would point into the directory that holds the install.
    data = libtorch_zip_ordered({k: v for k, v in SYMLINK_CHAIN.items() if k != "libtorch/q/z"}, {})
    with pytest.raises(UnsafeArchiveError, match="points outside"):
        extract_zip(write(tmp_path, data), tmp_path / "out", strip="libtorch")
    assert not (tmp_path / "out").exists()


def test_link_resolved_through_a_later_link_is_refused(tmp_path):
    # a -> b/..  is checked before b exists, so what it means depends on what b becomes.
    data = libtorch_zip_ordered({"libtorch/a": "b/..", "libtorch/b": "include/torch"}, {})
    dest = extract_zip(write(tmp_path, data), tmp_path / "ok", strip="libtorch")
    assert (dest / "a").resolve() == (dest / "include").resolve()  # harmless: stays in the tree
    data = libtorch_zip_ordered({"libtorch/lib/a": "b/../..", "libtorch/lib/b": ".."}, {})
    with pytest.raises(UnsafeArchiveError, match="points outside"):
        extract_zip(write(tmp_path, data), tmp_path / "out", strip="libtorch")
    assert not (tmp_path / "out").exists()


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_file_member_never_writes_through_a_same_named_link(tmp_path):
    # The link is harmless on its own; a later file member of the same name must not follow it
    # and overwrite what it points at (defence in depth behind the link checks).
    data = libtorch_zip_ordered(
        {"libtorch/lib/alias.so": "libtorch.so"}, {"libtorch/lib/alias.so": b"overwritten"}
    )
    with pytest.raises(UnsafeArchiveError, match="cannot be written over an existing entry"):
        extract_zip(write(tmp_path, data), tmp_path / "out", strip="libtorch")
    assert not (tmp_path / "out").exists()


def test_symlink_loop_is_refused(tmp_path):
    data = libtorch_zip_ordered({"libtorch/lib/a": "b", "libtorch/lib/b": "a"}, {})
    with pytest.raises(UnsafeArchiveError, match="symlink 'libtorch/lib/a'"):
        extract_zip(write(tmp_path, data), tmp_path / "out", strip="libtorch")
    assert not (tmp_path / "out").exists()


def zeros_zip(tmp_path, size: int):
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("libtorch/lib/libtorch.so", b"\x7fELF")
        zf.writestr("libtorch/lib/zeros.bin", bytes(size))
    return write(tmp_path, buf.getvalue())


def test_a_bomb_by_ratio_is_refused_before_anything_is_written(tmp_path):
    from fdl.downloads import ExtractLimits

    archive = zeros_zip(tmp_path, 32 << 20)
    with pytest.raises(UnsafeArchiveError, match=r"unpacks to \d+x its size.*over the 50x limit"):
        extract_zip(archive, tmp_path / "out", strip="libtorch")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zip"]  # no staging, no output
    limits = ExtractLimits(max_ratio=5000)  # an archive the user trusts
    assert (
        extract_zip(archive, tmp_path / "out", strip="libtorch", limits=limits) / "lib"
    ).is_dir()


def test_a_bomb_by_size_is_refused(tmp_path):
    from fdl.downloads import ExtractLimits

    archive = zeros_zip(tmp_path, 4 << 20)
    limits = ExtractLimits(max_size=1 << 20, max_ratio=10_000)
    with pytest.raises(UnsafeArchiveError, match=r"unpacks to 4.0 MiB, over the 1.0 MiB limit"):
        extract_zip(archive, tmp_path / "out", strip="libtorch", limits=limits)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zip"]


def test_limits_come_from_the_environment_unless_given(monkeypatch):
    from fdl.downloads import ExtractLimits
    from fdl.errors import FdlUsageError

    assert ExtractLimits.resolve() == ExtractLimits(32 * 1024**3, 50.0)
    monkeypatch.setenv("FDL_MAX_EXTRACT_SIZE", "1.5G")
    monkeypatch.setenv("FDL_MAX_EXTRACT_RATIO", "8")
    assert ExtractLimits.resolve() == ExtractLimits(int(1.5 * 1024**3), 8.0)
    assert ExtractLimits.resolve("500M", 3).max_size == 500 * 1024**2
    monkeypatch.setenv("FDL_MAX_EXTRACT_SIZE", "big")
    with pytest.raises(FdlUsageError, match="FDL_MAX_EXTRACT_SIZE 'big' is not a size"):
        ExtractLimits.resolve()


def test_not_enough_disk_for_the_unpacked_tree_is_refused(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    archive = zeros_zip(tmp_path, 8 << 20)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(10**12, 10**12, 1 << 20))
    from fdl.downloads import ExtractLimits

    with pytest.raises(FdlError, match=r"not enough disk space.*unpacks to 8\.0 MiB") as err:
        extract_zip(archive, tmp_path / "out", limits=ExtractLimits(max_ratio=10_000))
    assert err.value.code == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zip"]


def test_each_member_is_decompressed_once_and_no_test_pass_runs(tmp_path, monkeypatch):
    import zipfile

    archive = write(tmp_path, libtorch_zip())
    opened: list[str] = []
    real_open = zipfile.ZipFile.open

    def counting_open(self, name, *args, **kw):
        opened.append(name if isinstance(name, str) else name.filename)
        return real_open(self, name, *args, **kw)

    def no_testzip(self):
        raise AssertionError("testzip() decompresses everything a second time")

    monkeypatch.setattr(zipfile.ZipFile, "open", counting_open)
    monkeypatch.setattr(zipfile.ZipFile, "testzip", no_testzip)
    extract_zip(archive, tmp_path / "out", strip="libtorch")
    assert sorted(opened) == sorted(set(opened)) and len(opened) == 4  # 4 files, once each


def test_a_failed_check_leaves_the_previous_tree(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("previous install")

    def refuse(root):
        assert (root / "lib" / "libtorch.so").is_file()  # it sees the extracted tree
        raise FdlError("not what we wanted")

    with pytest.raises(FdlError, match="not what we wanted"):
        extract_zip(
            write(tmp_path, libtorch_zip()), tmp_path / "out", strip="libtorch", check=refuse
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zip", "out"]
    assert (tmp_path / "out" / "keep.txt").read_text() == "previous install"
