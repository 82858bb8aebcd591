"""Writing a file whole or not at all: every report, export and page flodl writes goes through here.

A write goes to a temporary file beside the target, then replaces it in one rename: a reader
(a browser reloading a dashboard archive, a script tailing a CSV) never sees half a file, and a
failure mid-write (a full disk, an exception while rendering rows) leaves the previous file as
it was and no temporary file behind. A failure names the target, not the temporary file.

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
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that wants a file name (``safetensors``'
    ``save_file``); it becomes ``path`` when the block ends without an exception. With one,
    ``path`` is untouched and the temporary file is removed. ``OSError`` names ``path``; a
    directory (``"."`` included) is an ``IsADirectoryError`` before anything is written."""
    target = Path(path)
    if not target.name or target.is_dir():
        # "." has no name to put a temporary file beside: say what is wrong with the path.
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(target))
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        tmp.replace(target)
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
    with replacing(path) as tmp, open(tmp, mode, encoding=encoding, newline=newline) as f:
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
