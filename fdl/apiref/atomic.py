"""Write a file so that readers see the old content or the new one, never half of either.

The new file takes the place of the old one with its permission bits (a user's 0644 AGENTS.md
stays 0644; a new file gets what ``open()`` would give it, 0o666 less the umask), and a symlink
is written through, not replaced.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def atomic_write(path: Path, text: str, *, newline: str = "\n") -> Path:
    """Write ``text`` to ``path`` via a temp file in the same directory, fsync and rename.

    ``newline`` is what each ``\\n`` of ``text`` becomes on disk (see :func:`newline_of`).
    """
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)  # mkstemp makes 0600 files
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def newline_of(path: Path, default: str = "\n") -> str:
    """The line ending an existing file uses (its first one), or ``default``."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(64 * 1024)
    except OSError:
        return default
    end = head.find(b"\n")
    if end < 0:
        return default
    return "\r\n" if end > 0 and head[end - 1 : end] == b"\r" else "\n"


def _mode_for(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    # The only portable way to read the umask is to set it; restore it at once.
    current = os.umask(0o022)
    os.umask(current)
    return current
