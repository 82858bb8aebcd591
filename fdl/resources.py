"""Locate the data files that ship with fdl: ``scaffold_templates/`` and ``porting_skill/``.

In the repository they live at the top level; in a wheel they are packaged as
``fdl/_bundled/<name>`` (see ``[tool.hatch.build.targets.wheel.force-include]``).
"""

from __future__ import annotations

from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from fdl.errors import ExitCode, FdlError

BUNDLED = ("scaffold_templates", "porting_skill")


def bundled_dir(name: str) -> Traversable:
    """The directory of bundled data ``name`` (one of :data:`BUNDLED`).

    >>> bundled_dir("scaffold_templates").is_dir()
    True
    """
    if name not in BUNDLED:
        raise ValueError(f"unknown bundled directory {name!r}; expected one of {BUNDLED}")
    installed = resources.files("fdl") / "_bundled" / name
    if installed.is_dir():
        return installed
    checkout = Path(__file__).resolve().parent.parent / name
    if checkout.is_dir():
        return checkout
    raise FdlError(
        f"fdl's bundled '{name}' directory is missing from this installation",
        "reinstall flodl (pip install --force-reinstall flodl)",
        ExitCode.UNAVAILABLE,
    )
