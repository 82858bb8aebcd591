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


VCS_ENTRIES = {".git", ".hg", ".svn", ".bzr", ".jj"}


def check_here(target: Path) -> None:
    """``fdl init .``: the directory must be empty or hold only version-control metadata."""
    other = sorted(p.name for p in target.iterdir() if p.name not in VCS_ENTRIES)
    if other:
        shown = ", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
        raise FdlError(
            f"'{target}' is not empty (it holds {shown})",
            "'fdl init .' only fills an empty directory (or one with just .git); "
            "use 'fdl init NAME' to create a new one, or 'fdl init --update' inside a project",
        )


def create_here(target: Path, answers: Answers) -> list[str]:
    """Render ``answers`` into the existing, empty (or VCS-only) directory ``target``: staged
    next to it, then moved in entry by entry; on failure the moved entries are removed again."""
    check_here(target)
    files = project_files(answers)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.fdl-init-", dir=target.parent))
    moved: list[Path] = []
    try:
        write_tree(staging, files)
        for entry in sorted(staging.iterdir()):
            destination = target / entry.name
            entry.rename(destination)
            moved.append(destination)
    except BaseException as err:
        for path in moved:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise FdlError(
                f"could not create the project in '{target}': {err.strerror or err}",
                "nothing was left behind; fix the cause and run again",
            ) from err
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return list(files)
