"""Extract a zip safely: CRC-checked, every member confined to the target, then an atomic rename.

Rejected: absolute paths, drive letters, ``..`` components, and symlinks whose target leaves the
archive root. Extraction happens in a temporary sibling directory; only a complete, valid tree is
renamed to ``dest`` (an existing ``dest`` is replaced only then).
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


def _check_link(member: PurePosixPath, target: str, name: str) -> None:
    if target.startswith("/") or "\\" in target:
        raise UnsafeArchiveError(
            f"symlink {name!r} points outside the archive ({target})", "refusing to extract"
        )
    depth = len(member.parts) - 1
    for part in PurePosixPath(target).parts:
        depth += -1 if part == ".." else (0 if part == "." else 1)
        if depth < 0:
            raise UnsafeArchiveError(
                f"symlink {name!r} points outside the archive ({target})", "refusing to extract"
            )


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
            for info, rel in members:
                target = staging.joinpath(*rel.parts)
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                if _is_symlink(info):
                    link = zf.read(info).decode("utf-8", "replace")
                    _check_link(rel, link, info.filename)
                    target.symlink_to(link)
                    continue
                with zf.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    target.chmod(mode | 0o600)
            root = staging
            if strip:
                inner = staging / strip
                entries = list(staging.iterdir())
                if inner.is_dir() and len(entries) == 1:
                    root = inner
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
