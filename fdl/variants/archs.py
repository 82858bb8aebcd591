"""Compute capabilities and whether a compiled build runs on a GPU (numeric, never substrings).

Rules (CUDA programming guide, "binary compatibility"):

* SASS compiled for ``sm_Xy`` runs on a GPU ``X.z`` with ``z >= y`` — same major only
  (``sm_86`` runs on an RTX 4090 at 8.9; ``sm_60`` on a GTX 1060 at 6.1; never ``sm_90`` on 12.0).
* PTX for ``compute_Xy`` is JIT-compiled by the driver for any GPU ``>= X.y`` (slow first launch).

>>> coverage((8, 9), sass=[(8, 0), (8, 6), (9, 0)], ptx=[])
('sass', (8, 6))
>>> coverage((5, 0), sass=[(7, 5)], ptx=[])
('none', None)
"""

from __future__ import annotations

import re

ComputeCapability = tuple[int, int]

_CC = re.compile(r"^\s*(?:sm_|compute_)?(\d{1,2})\.?(\d)\s*$")


def parse_cc(text: str) -> ComputeCapability:
    """``"8.6"``, ``"sm_86"`` or ``"12.0"`` → ``(8, 6)``; ``ValueError`` for anything else.

    >>> parse_cc("sm_120"), parse_cc("6.1")
    ((12, 0), (6, 1))
    """
    match = _CC.match(text)
    if not match:
        raise ValueError(f"not a compute capability: {text!r}")
    return int(match.group(1)), int(match.group(2))


def format_cc(cc: ComputeCapability) -> str:
    """``(8, 6)`` → ``"8.6"``."""
    return f"{cc[0]}.{cc[1]}"


def sm_name(cc: ComputeCapability) -> str:
    """``(12, 0)`` → ``"sm_120"``."""
    return f"sm_{cc[0]}{cc[1]}"


def coverage(
    gpu: ComputeCapability,
    sass: list[ComputeCapability] | tuple[ComputeCapability, ...],
    ptx: list[ComputeCapability] | tuple[ComputeCapability, ...],
) -> tuple[str, ComputeCapability | None]:
    """How a build with these SASS/PTX targets runs on ``gpu``: ``("sass"|"ptx"|"none", via)``.

    ``via`` is the compiled target that will be used (the best binary-compatible SASS, or the
    newest PTX not above the GPU).
    """
    same_major = [a for a in sass if a[0] == gpu[0] and a[1] <= gpu[1]]
    if same_major:
        return "sass", max(same_major)
    jit = [p for p in ptx if p <= gpu]
    if jit:
        return "ptx", max(jit)
    return "none", None
