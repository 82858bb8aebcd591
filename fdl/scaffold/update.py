"""``fdl init --update``: bring a newer fdl's templates into an existing project, safely.

Each file is re-rendered from the stored answers and compared three ways — the file on disk, the
hash recorded when fdl last wrote it, and the new rendering:

=================  ===================================================================
``create``         new in the template: written
``update``         you never edited it, the template changed: replaced
``unchanged``      already identical to the new rendering
``kept``           you edited it and the template did not change: left alone
``conflict``       you edited it and the template changed too: the new version is written
                   next to it as ``<file>.fdl-new`` for you to merge; yours is untouched
``skipped``        you deleted a file fdl generated: not recreated (except the bundled
                   flodl wheel, which ``constraints.txt`` installs from: ``create``)
``removed``        a file the new rendering no longer has, unedited: deleted (a bundled
                   wheel the new one replaces, or that flodl from a package index makes
                   unneeded; the Docker files of a project switched to ``--native``)
``dropped``        such a file that you edited: kept, but no longer generated (fdl stops
                   tracking it)
=================  ===================================================================
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib.abc import Traversable
from pathlib import Path

from fdl.scaffold import answers as answers_file
from fdl.scaffold.create import project_files
from fdl.scaffold.render import WHEELS_DIR, Answers

CONFLICT_SUFFIX = ".fdl-new"


@dataclass
class Change:
    path: str
    status: str
    old: bytes | None
    new: bytes

    @property
    def binary(self) -> bool:
        """Whether either side is not UTF-8 text (the bundled wheel): no unified diff."""
        try:
            (self.old or b"").decode("utf-8")
            self.new.decode("utf-8")
        except UnicodeDecodeError:
            return True
        return False

    def diff(self) -> str:
        """A unified diff from the file on disk to the new rendering ('' for binary files)."""
        try:
            old = (self.old or b"").decode("utf-8").splitlines(keepends=True)
            new = self.new.decode("utf-8").splitlines(keepends=True)
        except UnicodeDecodeError:
            return ""
        before = f"a/{self.path}" if self.old is not None else "/dev/null"
        return "".join(difflib.unified_diff(old, new, before, f"b/{self.path}"))


def plan(
    root: Path, answers: Answers, recorded: dict[str, str], templates: Traversable | None = None
) -> list[Change]:
    """What updating the project at ``root`` to this fdl's templates would do, file by file."""
    changes = []
    for path, new in project_files(answers, templates).items():
        if path == answers_file.ANSWERS_PATH:
            continue
        target = root / path
        old = target.read_bytes() if target.is_file() else None
        base = recorded.get(path)
        if old is None:
            # The wheel constraints.txt installs flodl from is needed, not a file you chose to
            # delete (a clone under a global *.whl gitignore lacks it): made again.
            needed = path.startswith(f"{WHEELS_DIR}/")
            status = "skipped" if base is not None and not needed else "create"
        elif old == new:
            status = "unchanged"
        elif base == answers_file.digest(old):
            status = "update"
        elif base == answers_file.digest(new):
            status = "kept"
        else:
            status = "conflict"
        changes.append(Change(path, status, old, new))
    rendered = {change.path for change in changes}
    constraints = next((c for c in changes if c.path == "constraints.txt"), None)
    for path, base in sorted(recorded.items()):
        target = root / path
        # What the new rendering no longer has: gone already, it is just no longer recorded
        if path in rendered or path == answers_file.ANSWERS_PATH or not target.is_file():
            continue
        old = target.read_bytes()
        if answers_file.digest(old) != base:
            changes.append(Change(path, "dropped", old, old))  # your edits: never deleted
        elif _still_installed(path, constraints):
            changes.append(Change(path, "unchanged", old, old))  # still tracked, removable later
        else:
            changes.append(Change(path, "removed", old, b""))
    return changes


def _still_installed(path: str, constraints: Change | None) -> bool:
    """Whether ``path`` is a bundled wheel that ``constraints.txt`` keeps installing from after
    the update: yours (edited, or a conflict) stays on disk and may still pin its version."""
    if not path.startswith(f"{WHEELS_DIR}/") or constraints is None or constraints.old is None:
        return False
    if constraints.status not in ("kept", "conflict"):
        return False
    version = path.rsplit("/", 1)[-1].split("-")[1]
    lines = constraints.old.decode("utf-8", "replace").split()
    return f"flodl=={version}" in lines


def apply(root: Path, answers: Answers, changes: list[Change]) -> None:
    """Write the changes (each file atomically), then the refreshed answers file."""
    for change in changes:
        if change.status in ("create", "update"):
            _write_atomic(root / change.path, change.new)
        elif change.status == "removed":
            (root / change.path).unlink(missing_ok=True)
        elif change.status == "conflict":
            _write_atomic(root / (change.path + CONFLICT_SUFFIX), change.new)
    rendered = {
        change.path: change.new
        for change in changes
        if change.status not in ("removed", "dropped")  # no longer generated: not tracked
    }
    _write_atomic(root / answers_file.ANSWERS_PATH, answers_file.dump(answers, rendered))


def _write_atomic(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.fdl-tmp")
    partial.write_bytes(content)
    if path.exists():
        partial.chmod(path.stat().st_mode & 0o7777)
    partial.replace(path)
