"""Find the project manifest: the nearest ``fdl.yml`` in the current directory or a parent.

Names, in order of preference (the same order for manifests and overlays, unlike the Rust
original): ``fdl.yml``, ``fdl.yaml``, ``fdl.json``. A directory holding only a committed
``fdl.yml.example`` (or ``.dist``) counts too: on a terminal fdl offers, once, to copy it to an
``fdl.yml`` you can edit (a "no" is remembered in ``$FLODL_HOME``); elsewhere (CI, pipes) the
example is used as is.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

MANIFEST_NAMES = ("fdl.yml", "fdl.yaml", "fdl.json")
TEMPLATE_SUFFIXES = (".example", ".dist")


def manifest_in(directory: Path) -> Path | None:
    """The manifest file directly inside ``directory`` (no example files), if any."""
    for name in MANIFEST_NAMES:
        candidate = directory / name
        if candidate.is_file():
            return candidate
    return None


def example_in(directory: Path) -> Path | None:
    """A committed ``fdl.yml.example`` / ``.dist`` (or the yaml/json twins) in ``directory``."""
    for name in MANIFEST_NAMES:
        for suffix in TEMPLATE_SUFFIXES:
            candidate = directory / (name + suffix)
            if candidate.is_file():
                return candidate
    return None


def find_manifest(start: Path | None = None, *, offer_copy: bool = True) -> Path | None:
    """The nearest manifest at or above ``start`` (default: the current directory).

    With ``offer_copy`` and an interactive terminal, finding only an example asks whether to
    copy it to the real name first. Returns ``None`` outside any project.
    """
    directory = (start or Path.cwd()).resolve()
    for folder in (directory, *directory.parents):
        found = manifest_in(folder)
        if found is not None:
            return found
        example = example_in(folder)
        if example is not None:
            return _adopt_example(example) if offer_copy else example
    return None


DECLINED_FILE = "declined-examples.json"  # under $FLODL_HOME: examples the user chose to keep


def _adopt_example(example: Path) -> Path:
    target = example.with_name(example.name.rsplit(".", 1)[0])
    if not (sys.stdin.isatty() and sys.stderr.isatty()) or os.environ.get("CI"):
        return example
    if str(example) in _declined():
        return example  # asked once already: the answer was no
    from rich.prompt import Confirm

    from fdl import console

    question = (
        f"fdl: found {example.name} but no {target.name}. Copy it to create your local config?"
    )
    if Confirm.ask(question, default=True, console=console.console(stderr=True)):
        shutil.copyfile(example, target)
        ignored = _git_ignored(target)  # claimed only when git says so
        note = ""
        if ignored is True:
            note = "; it is git-ignored"
        elif ignored is False:
            note = "; it is not git-ignored: add it to .gitignore to keep your edits out of commits"
        console.info(f"fdl: created {target.name} (edit it to customise{note})")
        return target
    _decline(example)
    console.info(
        f"fdl: using {example.name} as is; fdl will not ask again here (copy it to "
        f"{target.name} yourself to customise)"
    )
    return example


def _git_ignored(path: Path) -> bool | None:
    """Whether git ignores ``path`` (``None``: not in a git work tree, or no git)."""
    import subprocess

    try:
        done = subprocess.run(
            ["git", "check-ignore", "-q", "--", path.name],
            cwd=path.parent,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {0: True, 1: False}.get(done.returncode)  # 128: not a repository


def _declined_path() -> Path:
    home = os.environ.get("FLODL_HOME")
    return (Path(home).expanduser() if home else Path.home() / ".flodl") / DECLINED_FILE


def _declined() -> list[str]:
    """Examples the user declined to copy. Kept per user, not in the project (whose ``.fdl/``
    is committed): one person's "no" is not the team's."""
    import json

    try:
        data = json.loads(_declined_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [str(p) for p in data] if isinstance(data, list) else []


def _decline(example: Path) -> None:
    import json

    path = _declined_path()
    known = [p for p in _declined() if Path(p).exists()]  # forget projects that are gone
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(sorted({*known, str(example)}), indent=1), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # not remembered: asked again next time, nothing worse
