"""Writing a file whole or not at all: every report, export and page flodl writes goes through here.

A write goes to a temporary file beside the target, then replaces it in one rename: a reader
(a browser reloading a dashboard archive, a script tailing a CSV) never sees half a file, and a
failure mid-write (a full disk, an exception while rendering rows) leaves the previous file as
it was and no temporary file behind. A failure names the target, not the temporary file.

What is replaced is the file itself: a symbolic link is followed as the kernel would (see
:func:`destination`), and the file it points to is replaced (the link stays a link); a replaced
file keeps its permission bits. A path that exists and is not a regular file (a FIFO, a
terminal, a device), or is reached through ``/proc`` (``/dev/stdout``), is written in place,
appended to as ``>>`` would: it is never renamed over or removed, so that write is not
whole-or-nothing.

This module is internal (flodl's packages share it); checkpoints have their own writer, which
also syncs to disk (``flodl.checkpoint``).

>>> import tempfile
>>> from pathlib import Path
>>> target = Path(tempfile.mkdtemp()) / "report.txt"
>>> write_text(target, "ok\\n") == target, target.read_text()
(True, 'ok\\n')
>>> with open_atomic(target, newline="") as f:
...     _ = f.write("a,b\\n")
>>> sorted(p.name for p in target.parent.iterdir())
['report.txt']
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

_MAX_LINKS = 40  # as the kernel's limit on a chain of symbolic links


def destination(path: str | os.PathLike[str]) -> tuple[Path, int | None] | None:
    """Where a write to ``path`` lands: ``(the regular file to replace, its mode or None when it
    is new)``, or None when ``path`` must be written in place.

    In place: an existing FIFO, device or terminal, and anything reached through ``/proc`` or
    ``/dev/fd`` (``/dev/stdout`` redirected to a log: replacing that file would cut the log
    off from the process writing it). Symbolic links are followed as the kernel follows them
    on open, with its ``protected_symlinks`` rule: a link in a world-writable sticky directory
    (``/tmp``) is followed only when it belongs to this user or to the directory's owner, else
    ``PermissionError`` (another user's planted link must not redirect the write)."""
    current = Path(path).absolute()  # not resolve(): links are followed one by one below
    for _ in range(_MAX_LINKS):
        if str(current).startswith(("/proc/", "/dev/fd/")):
            return None
        try:
            st = current.lstat()
        except FileNotFoundError:
            break  # a new file (or a dangling link's target, which the write creates)
        if not stat.S_ISLNK(st.st_mode):
            break
        dir_st = current.parent.stat()
        shared = dir_st.st_mode & stat.S_ISVTX and dir_st.st_mode & stat.S_IWOTH
        if shared and st.st_uid not in (os.geteuid(), dir_st.st_uid):
            raise PermissionError(
                errno.EACCES,
                "a symbolic link owned by another user in a shared directory is not followed",
                str(current),
            )
        current = current.parent / current.readlink()  # an absolute target replaces the parent
    else:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), os.fspath(path))
    real = Path(os.path.realpath(current))
    try:
        mode: int | None = real.stat().st_mode
    except OSError:  # a new file (or one we cannot see: the write then says why)
        return real, None
    if mode is not None and not stat.S_ISREG(mode):
        return None
    return real, mode


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that wants a file name (``safetensors``'
    ``save_file``); it becomes ``path`` when the block ends without an exception. With one,
    ``path`` is untouched and the temporary file is removed. ``OSError`` names ``path``; a
    directory (``"."`` included) is an ``IsADirectoryError`` before anything is written.

    Through a symbolic link, the file it points to is replaced; an existing file keeps its
    permission bits. A path that is not a regular file (a FIFO, a device) is yielded itself:
    the writer writes into it, and nothing is renamed or removed."""
    target = Path(path)
    if not target.name or target.is_dir():
        # "." has no name to put a temporary file beside: say what is wrong with the path.
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(target))
    found = destination(target)
    if found is None:
        # Renaming over a FIFO or a device node would replace the node itself (/dev/full once).
        yield target
        return
    real, mode = found
    tmp = real.with_name(f".{real.name}.{secrets.token_hex(4)}.tmp")
    try:
        if mode is not None:
            # Owner-only until it is complete: a private file is never readable on the way.
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        yield tmp
        if mode is not None:
            tmp.chmod(stat.S_IMODE(mode))
        tmp.replace(real)
    except BaseException as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(err, OSError) and err.filename == str(tmp):
            raise type(err)(err.errno, err.strerror, str(target)) from None
        raise


@contextlib.contextmanager
def open_atomic(
    path: str | os.PathLike[str], mode: str = "w", *, newline: str | None = None
) -> Iterator[IO[Any]]:
    """An open file (``mode`` ``"w"`` for text in UTF-8, ``"wb"`` for bytes) that becomes
    ``path`` when the block ends without an exception (see :func:`replacing`)."""
    encoding = None if "b" in mode else "utf-8"
    with replacing(path) as tmp:
        # written in place (a FIFO, /dev/stdout): appended, so a log behind it is not cut
        how = mode.replace("w", "a") if tmp == Path(path) else mode
        with open(tmp, how, encoding=encoding, newline=newline) as f:
            yield f


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all; returns the path."""
    with open_atomic(path) as f:
        f.write(text)
    return Path(path)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` whole or not at all; returns the path."""
    with open_atomic(path, "wb") as f:
        f.write(data)
    return Path(path)
