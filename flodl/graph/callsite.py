"""Where in the user's code a builder call was made (file:line), for error messages."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

_PACKAGE_DIR = str(Path(__file__).resolve().parent)


@dataclass(frozen=True)
class CallSite:
    """The first frame outside ``flodl.graph`` when a builder method was called."""

    filename: str
    lineno: int
    function: str

    def __str__(self) -> str:
        return f"{_short(self.filename)}:{self.lineno}"


def _short(filename: str) -> str:
    """A path relative to the working directory when it lies below it; else unchanged."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def capture() -> CallSite | None:
    """The caller's location, skipping frames that belong to the graph package itself."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_PACKAGE_DIR):
            return CallSite(filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None
