"""The backup folders an interrupted ``fdl check`` left behind: finding them, putting them back.

A smoke run keeps the files it overwrites in a ``.fdl-check-*`` folder and ``fdl check`` moves
them back when the run ends. When ``fdl check`` itself is killed (SIGKILL, the OOM killer, a
power cut), nothing moves them back: the folder still holds the originals, listed in its
manifest, and the files in their place are what the smoke run wrote. Each backup folder records
its owner (``owner.json``: fdl's process and the smoke run's process group), so a later
``fdl check`` can tell a folder whose owner is gone from one a check running right now is using,
warn about it, and with ``--recover`` put its files back.

Putting back loses nothing: the file in an original's place (what the smoke run wrote, or
anything written since) moves into the folder's ``replaced/``, which is kept for the user to
delete.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fdl.porting import _file_guard

PREFIX = ".fdl-check-"
OWNER = "owner.json"
MANIFEST = "manifest.jsonl"
REPLACED = "replaced"


def write_owner(folder: str, manifest: str, run_group: int | None = None) -> None:
    """Record this fdl process (and, once started, the smoke run's process group) as the owner
    of the backup ``folder``."""
    owner = {"pid": os.getpid(), "started": _started(os.getpid()), "manifest": manifest}
    if run_group is not None:
        owner["run_group"] = run_group
    target = Path(folder) / OWNER
    partial = target.with_suffix(".tmp")
    partial.write_text(json.dumps(owner), encoding="utf-8")
    partial.replace(target)  # never a half-written owner, which would read as no owner


@dataclass
class Leftover:
    """One interrupted check: its backup folders and the files they still hold."""

    folders: list[Path]
    manifest: Path
    pid: int | None  # the fdl that made it (None: an fdl too old to record it)
    files: list[str] = field(default_factory=list)  # the originals' paths, absolute

    def to_dict(self, cwd: Path) -> dict[str, Any]:
        return {
            "folders": [shown_path(str(f), cwd) for f in self.folders],
            "pid": self.pid,
            "files": [shown_path(f, cwd) for f in self.files],
        }


def find(roots: list[Path]) -> list[Leftover]:
    """The backup folders directly under ``roots`` whose check is over (its fdl gone, and its
    smoke run's process group too) but whose files were never put back."""
    found: dict[Path, Leftover] = {}
    for root in roots:
        try:
            folders = sorted(p for p in Path(root).iterdir() if p.name.startswith(PREFIX))
        except OSError:
            continue
        for folder in folders:
            if not folder.is_dir():
                continue
            owner = _read_owner(folder)
            if owner is None:
                if not (folder / MANIFEST).is_file():
                    continue  # being set up right now, or empty: nothing to put back
                owner = {"manifest": str(folder / MANIFEST)}
            elif _running(owner):
                continue
            manifest = Path(owner.get("manifest") or folder / MANIFEST)
            leftover = found.setdefault(
                manifest, Leftover([], manifest, owner.get("pid"), _kept_files(manifest))
            )
            leftover.folders.append(folder)
    return [leftover for leftover in found.values() if leftover.files]


@dataclass
class Recovered:
    path: str  # absolute
    restored: bool
    replaced: str | None = None  # where the file that was in its place went


def recover(leftover: Leftover) -> list[Recovered]:
    """Put back every original ``leftover`` holds. The file in an original's place moves into
    the backup folder's ``replaced/`` first (its relative path kept); the folders go once they
    hold nothing but the check's bookkeeping."""
    records = _file_guard.kept_records(str(leftover.manifest))
    firsts: dict[str, dict[str, Any]] = {}
    for record in records:
        firsts.setdefault(record["path"], record)
    moved: dict[str, str] = {}
    blocked: set[str] = set()  # its current file could not move aside: not overwritten
    for path, record in firsts.items():
        current = Path(path)
        if not current.is_file() or (record["kept"] is not None and _same(current, record)):
            continue  # gone, or still the original (a hard link kept before a delete)
        # (a file that did not exist then, a database's log, goes aside too: it may be yours)
        folder = Path(record["kept"]).parent if record["kept"] else leftover.manifest.parent
        aside = _free(folder / REPLACED / _relative(current, folder.parent))
        try:
            aside.parent.mkdir(parents=True, exist_ok=True)
            current.replace(aside)
            moved[path] = str(aside)
        except OSError:
            blocked.add(path)
    failed = blocked | _file_guard.put_back(records, skip=frozenset(blocked))
    if not failed:
        _tidy(leftover)
    originals = [path for path, record in firsts.items() if record["kept"] is not None]
    return [Recovered(path, path not in failed, moved.get(path)) for path in originals]


def _free(path: Path) -> Path:
    """``path``, or ``path.1``, ``path.2``... when taken (an earlier recovery's)."""
    candidate, n = path, 0
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{n}")
    return candidate


def _tidy(leftover: Leftover) -> None:
    """Remove what the check kept for itself; a folder holding replaced files stays."""
    for folder in leftover.folders:
        for name in (OWNER, MANIFEST, "site"):
            entry = folder / name
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty: replaced/ keeps it


# -- helpers ------------------------------------------------------------------------------------
def _kept_files(manifest: Path) -> list[str]:
    records = _file_guard.kept_records(str(manifest))
    firsts: dict[str, dict[str, Any]] = {}
    for record in records:
        firsts.setdefault(record["path"], record)
    return sorted(path for path, record in firsts.items() if record["kept"] is not None)


def _same(path: Path, record: dict[str, Any]) -> bool:
    stat = path.stat()
    return (stat.st_mtime_ns, stat.st_size) == (record.get("mtime_ns"), record.get("size"))


def _relative(path: Path, root: Path) -> Path:
    try:
        return path.relative_to(root.resolve())
    except ValueError:
        return Path(path.name)


def _read_owner(folder: Path) -> dict[str, Any] | None:
    try:
        owner = json.loads((folder / OWNER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def _running(owner: dict[str, Any]) -> bool:
    """Whether the check that owns a folder may still be using it: its fdl is alive (the same
    process, not a reused pid), or its smoke run's process group still has a member."""
    pid, group, started = owner.get("pid"), owner.get("run_group"), owner.get("started")
    if isinstance(pid, int) and started is not None and _started(pid) == started:
        return True  # (a zombie's start time is None: it is over)
    return isinstance(group, int) and _group_alive(group)


def _group_alive(group: int) -> bool:
    """Whether process group ``group`` has a member that is not a zombie (an orphan's exit
    status waits for a reaper that may never come, as in a container without an init)."""
    import psutil

    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's: alive, as far as we can tell
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == group and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False


def _started(pid: int) -> float | None:
    import psutil

    try:
        proc = psutil.Process(pid)
        return None if proc.status() == psutil.STATUS_ZOMBIE else proc.create_time()
    except psutil.Error:
        return None


def shown_path(path: str, cwd: Path) -> str:
    """``path`` relative to ``cwd`` when under it."""
    try:
        return str(Path(path).relative_to(cwd.resolve()))
    except ValueError:
        return path
