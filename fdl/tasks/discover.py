"""Find the project manifest: the nearest ``fdl.yml`` in the current directory or a parent.

Names, in order of preference (the same order for manifests and overlays, unlike the Rust
original): ``fdl.yml``, ``fdl.yaml``, ``fdl.json``. A directory holding only a committed
``fdl.yml.example`` (or ``.dist``) counts too: on a terminal fdl offers, once, to copy it to the
git-ignored ``fdl.yml`` you can edit; elsewhere (CI, pipes) the example is used as is.
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


def _adopt_example(example: Path) -> Path:
    target = example.with_name(example.name.rsplit(".", 1)[0])
    if not (sys.stdin.isatty() and sys.stderr.isatty()) or os.environ.get("CI"):
        return example
    from rich.prompt import Confirm

    from fdl import console

    question = (
        f"fdl: found {example.name} but no {target.name}. Copy it to create your local config?"
    )
    if Confirm.ask(question, default=True, console=console.console(stderr=True)):
        shutil.copyfile(example, target)
        console.info(f"fdl: created {target.name} (edit it to customise; it is git-ignored)")
        return target
    return example
