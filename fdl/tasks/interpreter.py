"""Which Python a task runs, and a clear note when it cannot import torch or flodl.

A task's ``python`` is whatever ``python`` is first on ``PATH`` — often not the virtualenv that
``fdl`` itself was installed in (running ``.venv/bin/fdl`` does not activate ``.venv``). When a
task that runs Python fails, fdl checks (without importing anything) whether that interpreter can
find ``torch`` and ``flodl`` and, if not, says which interpreter ran, which one fdl runs under, and
how to fix it: activate the environment, or name the interpreter in the manifest::

    python: .venv/bin/python     # fdl.yml: tasks find this interpreter first on PATH

``python:`` (relative to the manifest's directory) puts that interpreter's directory first on
``PATH`` for every command of the manifest (a child manifest may set its own), and sets
``VIRTUAL_ENV`` when it lives in one.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from fdl.errors import FdlError

_PYTHON_WORD = re.compile(r"^(?:.*/)?python(?:\d+(?:\.\d+)?)?$")
_PROBE = (
    "import importlib.util, sys; "
    "print(sys.version.split()[0]); "
    "print(' '.join(m for m in ('torch', 'flodl') if importlib.util.find_spec(m) is None))"
)


def task_env(python: Path | None, env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``python``'s directory first on ``PATH`` (and ``VIRTUAL_ENV`` for a venv)."""
    if python is None:
        return env
    if not python.exists():
        raise FdlError(
            f"the manifest's 'python: {python}' does not exist",
            "create the environment (python3 -m venv .venv) or fix the path",
        )
    bin_dir = str(python.parent)
    out = dict(env)
    out["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", os.defpath)])
    if (python.parent.parent / "pyvenv.cfg").is_file():
        out["VIRTUAL_ENV"] = str(python.parent.parent)
    return out


def pythons_in(line: str) -> list[str]:
    """The Python interpreter words of a command line (``python``, ``python3.12``, ``.venv/bin/python``).

    >>> pythons_in("PYTHONPATH=src python -m demo.train --x && python3 -V")
    ['python', 'python3']
    """
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        words = line.split()
    found = []
    for word in words:
        for part in re.split(r"[;&|()]+", word):
            if _PYTHON_WORD.match(part) and part not in found:
                found.append(part)
    return found


def missing_modules(python: str, path: str | None, cwd: Path) -> tuple[str, str, list[str]] | None:
    """(resolved interpreter, its version, modules it cannot find) — ``None`` if not runnable."""
    resolved = shutil.which(python, path=path) if "/" not in python else str(cwd / python)
    if resolved is None:
        return None
    try:
        done = subprocess.run(
            [resolved, "-c", _PROBE], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) < 1:
        return None
    missing = lines[1].split() if len(lines) > 1 else []
    return resolved, lines[0], missing


def explain_failure(line: str, cwd: Path, env: dict[str, str]) -> str | None:
    """A note for a failed task whose Python cannot import torch/flodl, else ``None``."""
    for word in pythons_in(line):
        found = missing_modules(word, env.get("PATH"), cwd)
        if found is None or not found[2]:
            continue
        resolved, version, missing = found
        here = sys.executable
        fdl_can = not (missing_modules(here, None, cwd) or (here, "", ["?"]))[2]
        lines = [
            f"the task ran '{word}' = {resolved} (Python {version}), which cannot import "
            f"{' and '.join(missing)}",
            f"fdl itself runs under {here}"
            + (", which can" if fdl_can else ", which cannot either"),
        ]
        venv = Path(here).parent.parent
        if fdl_can and (venv / "pyvenv.cfg").is_file():
            lines.append(
                f"fix: activate that environment ('. {venv}/bin/activate'), or add "
                f"'python: {here}' to fdl.yml so tasks find it first on PATH"
            )
        else:
            lines.append(
                "fix: install flodl into the environment the task uses, or add "
                "'python: <path to an interpreter that has it>' to fdl.yml"
            )
        return "\n  ".join(lines)
    return None
