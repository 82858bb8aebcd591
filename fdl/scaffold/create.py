"""Write a new project atomically: render in memory, write into a temp directory next to the
target, then rename it into place — a failure at any point leaves nothing behind."""

from __future__ import annotations

import os
import shutil
import tempfile
from importlib.abc import Traversable
from pathlib import Path

from fdl.errors import FdlError
from fdl.scaffold import answers as answers_file
from fdl.scaffold.render import WHEELS_DIR, Answers, render


def check_target(target: Path) -> None:
    """Refuse an existing path (an empty directory is fine); the parent must exist."""
    if target.exists() or target.is_symlink():
        if target.is_dir() and not target.is_symlink() and not any(target.iterdir()):
            return
        raise FdlError(
            f"'{target}' already exists",
            "choose another name, or remove it first (fdl never writes into an existing project;"
            " use 'fdl init --update' inside one)",
        )
    if not target.parent.is_dir():
        raise FdlError(f"'{target.parent}' does not exist", "create the parent directory first")


def project_files(answers: Answers, templates: Traversable | None = None) -> dict[str, bytes]:
    """The rendered project plus its answers file."""
    files = render(answers, templates)
    if answers.flodl_wheel:
        from fdl.scaffold.bundle import build_wheel

        name, wheel = build_wheel()
        files[f"{WHEELS_DIR}/{name}"] = wheel
    files[answers_file.ANSWERS_PATH] = answers_file.dump(answers, files)
    return files


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def create(target: Path, answers: Answers, templates: Traversable | None = None) -> list[str]:
    """Render ``answers`` into the new directory ``target``; returns the files written."""
    check_target(target)
    files = project_files(answers, templates)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.fdl-init-", dir=target.parent))
    try:
        write_tree(staging, files)
        staging.chmod(0o777 & ~_umask())
        staging.rename(target)  # atomic; replaces an empty directory, fails on anything else
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise FdlError(
            f"could not create '{target}': {err.strerror or err}",
            "nothing was written; fix the cause and run again",
        ) from err
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return list(files)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
