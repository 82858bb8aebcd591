"""Extract a zip safely: CRC-checked, every member confined to the target, then an atomic rename.

Rejected: absolute paths, drive letters, ``..`` components, symlinks whose target leaves the
installed tree (resolved with every link of the archive in place, so chains of links that each look
harmless are caught), and any member written beneath a symlink. Extraction happens in a temporary
sibling directory; only a complete, valid tree is renamed to ``dest`` (an existing ``dest`` is
replaced only then).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from fdl.errors import FdlError


class UnsafeArchiveError(FdlError):
    pass


def _member_path(name: str) -> PurePosixPath:
    normalized = name.replace("\\", "/")
    path = PurePosixPath(normalized)
    if normalized.startswith("/") or (len(normalized) > 1 and normalized[1] == ":"):
        raise UnsafeArchiveError(
            f"archive member {name!r} has an absolute path", "refusing to extract"
        )
    if ".." in path.parts:
        raise UnsafeArchiveError(
            f"archive member {name!r} escapes the target (..)", "refusing to extract"
        )
    return path


def _is_symlink(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def _refuse_link(name: str, target: str) -> UnsafeArchiveError:
    return UnsafeArchiveError(
        f"symlink {name!r} points outside the archive ({target})", "refusing to extract"
    )


def _check_link(member: PurePosixPath, target: str, name: str) -> None:
    """Lexical check: catches the plain cases early, before the link exists."""
    if target.startswith("/") or "\\" in target:
        raise _refuse_link(name, target)
    depth = len(member.parts) - 1
    for part in PurePosixPath(target).parts:
        depth += -1 if part == ".." else (0 if part == "." else 1)
        if depth < 0:
            raise _refuse_link(name, target)


def _real_dir(staging: Path, rel: PurePosixPath, name: str) -> Path:
    """Create ``rel`` under ``staging`` as real directories and return it.

    A lexical check cannot see through links created earlier in the same archive (``y -> ..``,
    ``q -> y/..``): writing through one lands outside. So nothing is ever created beneath a
    symlink, whatever it points to: each component must be a real directory.
    """
    current = staging
    for part in rel.parts:
        current = current / part
        try:
            mode = current.lstat().st_mode
        except FileNotFoundError:
            current.mkdir()
            continue
        if stat.S_ISLNK(mode):
            raise UnsafeArchiveError(
                f"archive member {name!r} is written through a symlink ({part})",
                "refusing to extract",
            )
        if not stat.S_ISDIR(mode):
            raise UnsafeArchiveError(
                f"archive member {name!r} needs {part!r} to be a directory, but it is a file",
                "the archive is malformed; download it again",
            )
    return current


def _check_links_resolve_inside(root: Path, links: list[tuple[Path, str, str]]) -> None:
    """With every link in place, each one must resolve inside ``root`` (the final tree).

    Checked after extraction because a link's meaning depends on links created after it, and
    against the unwrapped root because ``libtorch/y -> ..`` is inside the archive but outside
    the installed tree once ``libtorch/`` is stripped.
    """
    real_root = root.resolve()
    for path, target, name in links:
        if not path.is_relative_to(root):
            continue  # a sibling of the unwrapped directory: not installed
        try:
            resolved = path.resolve()
        except (RuntimeError, OSError) as err:  # a loop (RuntimeError before Python 3.13)
            raise UnsafeArchiveError(
                f"symlink {name!r} cannot be resolved ({target}: {err})", "refusing to extract"
            ) from err
        if not resolved.is_relative_to(real_root):
            raise _refuse_link(name, target)


def _write_file(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path) -> None:
    # O_NOFOLLOW: an earlier symlink member with the same name must not redirect the write.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(target, flags, 0o600)
    except OSError as err:
        raise UnsafeArchiveError(
            f"archive member {info.filename!r} cannot be written over an existing entry ({err})",
            "refusing to extract",
        ) from err
    with zf.open(info) as src, os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    mode = (info.external_attr >> 16) & 0o777
    if mode:
        target.chmod(mode | 0o600)


def extract_zip(archive: Path | str, dest: Path | str, *, strip: str | None = None) -> Path:
    """Extract ``archive`` into ``dest`` atomically and return ``dest``.

    ``strip``: a single top-level directory to unwrap if the archive has one (``"libtorch"``).
    """
    archive, dest = Path(archive), Path(dest)
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as err:
        raise FdlError(
            f"{archive} is not a valid zip archive ({err})", "delete it and download again"
        ) from err
    with zf:
        try:
            bad = zf.testzip()
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as err:
            bad = f"? ({err})"
        if bad is not None:
            raise FdlError(
                f"{archive} is corrupt (CRC error in {bad})", "delete it and download again"
            )
        members = [(info, _member_path(info.filename)) for info in zf.infolist()]
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.extract-", dir=dest.parent))
        try:
            links: list[tuple[Path, str, str]] = []
            for info, rel in members:
                if info.is_dir():
                    _real_dir(staging, rel, info.filename)
                    continue
                parent = _real_dir(staging, rel.parent, info.filename)
                target = parent / rel.name
                if _is_symlink(info):
                    link = zf.read(info).decode("utf-8", "replace")
                    _check_link(rel, link, info.filename)
                    if os.path.lexists(target):
                        raise UnsafeArchiveError(
                            f"archive member {info.filename!r} appears twice",
                            "refusing to extract",
                        )
                    target.symlink_to(link)
                    links.append((target, link, info.filename))
                    continue
                _write_file(zf, info, target)
            root = staging
            if strip:
                inner = staging / strip
                entries = list(staging.iterdir())
                if inner.is_dir() and not inner.is_symlink() and len(entries) == 1:
                    root = inner
            _check_links_resolve_inside(root, links)
            old = None
            if dest.exists():
                old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
                dest.replace(old)
            root.replace(dest)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        finally:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(staging)
    return dest
