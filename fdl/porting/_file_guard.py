"""Keep what a smoke run overwrites, deletes or renames over, and put it back afterwards.

``fdl check`` runs the script for real in the user's directory, so a script saving to a fixed
path (``torch.save(model.state_dict(), "model.pt")``) would replace a trained model with a
two-step one. Inside the run, :func:`install` watches the script's file operations (Python's
audit events ``open``, ``os.remove``, ``os.rename``, ``os.truncate``, ``shutil.rmtree``,
``sqlite3.connect``, plus the writers that open files from C: ``torch.save``'s,
safetensors' and h5py's) and, the first time one is about to change an existing file under the watched
folders, keeps that file in a backup folder beside it (on the same file system, so keeping is a
rename or a hard link, not a copy):

* about to be truncated (``open(p, "w")``): the file is moved aside, the script writes a new one;
* about to be deleted or replaced by a rename: a hard link keeps its data;
* about to be written in place (append, ``r+``, ``os.truncate``): a copy.

Each kept file is one line of a manifest written before the change, so a run killed at any point
still leaves a complete record. After the run, :func:`restore` (in fdl) moves every kept file
back. Files the run created are left alone (a downloaded dataset is not junk); writes this cannot
see (a process the script starts that is not Python, or runs with ``-S``/``-I``; a C library
opening files itself) are not kept, and fdl check
still lists them by comparing the folders before and after.

Stdlib only: the smoke runner imports it by path, and the child never imports fdl.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import json
import os
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from stat import S_ISREG
from typing import Any

ENV = "FDL_CHECK_GUARD"  # JSON: {"manifest": path, "folders": [[root, backup folder], ...]}
# (the manifest lies in a backup folder, which is never watched)
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC
# the audit events that can change a file (the hook sees every event: the rest return at once)
_EVENTS = frozenset(
    {"open", "os.remove", "os.rename", "os.truncate", "shutil.rmtree", "sqlite3.connect"}
)
# the files SQLite keeps beside a database while writing it: a write-ahead log left by the run
# would be replayed into the database put back, so one the run made is removed with it
_SQLITE_COMPANIONS = ("-journal", "-wal", "-shm")


class _Guard:
    def __init__(self, manifest: str, folders: list[list[str]]) -> None:
        self.manifest = manifest
        self.folders = [(str(Path(r).resolve()), str(Path(b).resolve())) for r, b in folders]
        self.kept: set[str] = set()
        self.created: set[str] = set()  # files the run made: never kept
        self.lock = threading.Lock()
        self.active = True

    # -- which paths ----------------------------------------------------------------------
    def _backup_for(self, path: str) -> str | None:
        """The backup folder for ``path`` (absolute), None when it is not watched (Python's
        own ``__pycache__`` is not)."""
        if "__pycache__" in Path(path).parts:
            return None
        for root, backup in self.folders:
            if _inside(path, backup):
                return None
            if _inside(path, root):
                return backup
        return None

    @staticmethod
    def _absolute(path: Any, follow: bool) -> str | None:
        if isinstance(path, int):
            return None  # a file descriptor: its file was opened, and seen, before
        try:
            text = os.fsdecode(os.fspath(path))
        except TypeError:
            return None
        if follow:
            return str(Path(text).resolve())
        entry = Path(text).absolute()
        return str(entry.parent.resolve() / entry.name)  # the entry itself, not its target

    # -- keeping ----------------------------------------------------------------------------
    def keep(self, raw: Any, how: str, follow: bool = True) -> None:
        """Keep the existing file at ``raw`` before it changes (``how``: move, link, copy)."""
        if not self.active:
            return
        path = self._absolute(raw, follow)
        if path is None or path in self.kept or path in self.created:
            return
        backup = self._backup_for(path)
        if backup is None:
            return
        with self.lock:
            if path in self.kept:
                return
            try:
                stat = Path(path).lstat()
            except OSError:
                if how in ("move", "copy"):  # about to be written: the run's own file from now
                    self.created.add(path)
                return
            if not S_ISREG(stat.st_mode) or (how == "move" and not os.access(path, os.W_OK)):
                return  # a read-only file: the script's own open fails, as it would unwatched
            self.kept.add(path)
            kept = str(Path(backup) / f"{os.getpid()}-{len(self.kept)}")  # forks and children too
            record = {"path": path, "kept": kept, "mtime_ns": stat.st_mtime_ns,
                      "size": stat.st_size}  # fmt: skip
            try:
                with open(self.manifest, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(record) + "\n")
                _put_aside(path, kept, how)
            except OSError:  # a full disk: the file is not kept (fdl check lists it changed)
                with contextlib.suppress(OSError):
                    Path(kept).unlink()  # never a partial copy, which would be put back

    def forget_if_made(self, raw: str) -> None:
        """``raw`` does not exist yet: should the run make it, it goes when the run's files
        come back (a record without a kept file)."""
        path = self._absolute(raw, follow=True)
        if path is None or path in self.kept or self._backup_for(path) is None:
            return
        with self.lock:
            if path in self.kept:
                return
            self.kept.add(path)
            with contextlib.suppress(OSError), open(self.manifest, "a", encoding="utf-8") as out:
                out.write(json.dumps({"path": path, "kept": None}) + "\n")

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        """The audit hook. It never raises: an exception here would fail the script's own
        operation."""
        if event not in _EVENTS:
            return
        with contextlib.suppress(Exception):  # keeping is best effort: the script runs as it would
            self._audit(event, args)

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = args
            if isinstance(mode, str):
                if "w" in mode:
                    self.keep(path, "move")
                elif any(c in mode for c in "ax+"):  # "x" only ever creates: made by the run
                    self.keep(path, "copy")
            elif isinstance(flags, int) and flags & _WRITES:
                self.keep(path, "move" if flags & os.O_TRUNC else "copy")
        elif event == "os.remove":
            path, dir_fd = args
            if dir_fd in (None, -1):
                self.keep(path, "link", follow=False)
        elif event == "os.rename":
            src, dst, src_fd, dst_fd = args
            if src_fd in (None, -1):
                self.keep(src, "link", follow=False)
            if dst_fd in (None, -1):
                self.keep(dst, "link", follow=False)
        elif event == "os.truncate":
            self.keep(args[0], "copy")
        elif event == "sqlite3.connect":  # SQLite writes from C: keep the database first
            database = _sqlite_file(args[0])
            if database is not None and Path(database).is_file():
                self.keep(database, "copy")
                for suffix in _SQLITE_COMPANIONS:
                    if Path(database + suffix).exists():
                        self.keep(database + suffix, "copy")
                    else:
                        self.forget_if_made(database + suffix)
        elif event == "shutil.rmtree":
            path, dir_fd = args
            if dir_fd is None:
                for file in _files_under(path):
                    self.keep(file, "link", follow=False)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _sqlite_file(database: Any) -> str | None:
    """The file a ``sqlite3.connect(database)`` opens (None: in memory, or not a path)."""
    try:
        text = os.fsdecode(os.fspath(database))
    except TypeError:
        return None
    if text.startswith("file:"):  # a URI (uri=True): file:path?mode=ro
        text = text[len("file:") :].split("?", 1)[0]
    return None if text in ("", ":memory:") else text


def _files_under(path: Any) -> list[str]:
    try:
        top = os.fsdecode(os.fspath(path))
    except TypeError:
        return []
    found = []
    for folder, _, names in os.walk(top):
        found += [str(Path(folder) / name) for name in names]
    return found


def _put_aside(path: str, kept: str, how: str) -> None:
    """Keep ``path`` as ``kept``: moved (the run writes a new file), linked or copied."""
    if how == "move":
        try:
            Path(path).rename(kept)
            return
        except OSError:
            pass  # another file system (a mount inside the folder): a copy keeps it
    elif how == "link":
        try:
            os.link(path, kept)
            return
        except OSError:
            pass
    shutil.copy2(path, kept)


# -- writers that open their file from C --------------------------------------------------------
def _h5py_change(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """How ``h5py.File(name, mode)`` changes an existing file: ``w`` truncates it (kept by
    moving it aside), ``a`` and ``r+`` write into it (kept by a copy); ``r``, ``w-`` and ``x``
    leave it as it is."""
    mode = args[2] if len(args) > 2 else kwargs.get("mode", "r")
    return {"w": "move", "a": "copy", "r+": "copy"}.get(mode)


# (module, attribute path, the index of the path argument, how the file changes: a way to keep
# it, or a function of the call's arguments giving one or None): wrapped when the module is
# imported
_C_WRITERS: tuple[tuple[str, str, int, Any], ...] = (
    ("torch.serialization", "_open_zipfile_writer_file.__init__", 1, "move"),
    ("safetensors.torch", "serialize_file", 1, "move"),
    ("safetensors.numpy", "serialize_file", 1, "move"),
    ("h5py._hl.files", "File.__init__", 1, _h5py_change),  # HDF5 opens its file itself
)


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Wraps the C writers' entry points as their modules finish importing."""

    def __init__(self, guard: _Guard) -> None:
        self.guard = guard
        self.wanted = {module for module, _, _, _ in _C_WRITERS}

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.wanted:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, name, self.guard)
                return spec
        return None


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any, name: str, guard: _Guard) -> None:
        self.inner, self.name, self.guard = inner, name, guard

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.inner.exec_module(module)
        for name, attribute, index, how in _C_WRITERS:
            if name == self.name:
                _wrap(module, attribute, index, how, self.guard)


def _wrap(module: Any, attribute: str, index: int, how: Any, guard: _Guard) -> None:
    *owners, last = attribute.split(".")
    owner = module
    for part in owners:
        owner = getattr(owner, part, None)
        if owner is None:
            return
    original: Callable[..., Any] | None = getattr(owner, last, None)
    if original is None:
        return

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if len(args) > index:
            with contextlib.suppress(Exception):  # as the audit hook: never the script's failure
                change = how(args, kwargs) if callable(how) else how
                if change is not None and isinstance(args[index], (str, bytes, os.PathLike)):
                    guard.keep(args[index], change)
        return original(*args, **kwargs)

    setattr(owner, last, wrapped)


def install() -> _Guard | None:
    """Start keeping files for the run described by ``$FDL_CHECK_GUARD`` (None: not asked), once
    per process. The variable stays set, so the Python processes the script starts keep files
    too (:func:`child_site` makes them call this)."""
    existing = getattr(sys, "_fdl_file_guard", None)
    if existing is not None:
        return existing
    config = os.environ.get(ENV, "")
    if not config:
        return None
    settings = json.loads(config)
    guard = _Guard(settings["manifest"], settings["folders"])
    sys.addaudithook(guard.audit)
    sys.meta_path.insert(0, _WrapOnImport(guard))
    sys._fdl_file_guard = guard  # type: ignore[attr-defined]
    return guard


_SITECUSTOMIZE = """\
# Written by fdl check for its smoke run: every Python process the script starts keeps the files
# it overwrites too, then Python's own sitecustomize (if any) runs as usual.
import importlib.util as _util
import sys as _sys

_spec = _util.spec_from_file_location("_fdl_file_guard", {guard!r})
_module = _util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
_module.install()
_here = {here!r}
_self = _sys.modules.pop("sitecustomize")
_path, _sys.path[:] = list(_sys.path), [p for p in _sys.path if p != _here]
try:
    import sitecustomize  # noqa: F401  (the environment's own, when there is one)
except ImportError:
    _sys.modules["sitecustomize"] = _self  # none: the import that runs this one ends with it
finally:
    _sys.path[:] = _path
"""


def child_site(folder: str) -> str:
    """Write a ``sitecustomize.py`` into ``folder`` that installs the guard; returns ``folder``,
    for the front of ``PYTHONPATH``."""
    site = Path(folder)
    site.mkdir(parents=True, exist_ok=True)
    text = _SITECUSTOMIZE.format(guard=str(Path(__file__).resolve()), here=str(site))
    (site / "sitecustomize.py").write_text(text, encoding="utf-8")
    return str(site)


# -- after the run (in fdl) ---------------------------------------------------------------------
def restore(manifest: str) -> list[dict[str, Any]]:
    """Put back every file the run kept; returns one entry per file the run had changed:
    ``{"path", "change": "modified" | "deleted", "restored": bool}``.

    Several processes may have kept one path (the script, then a worker it started, each
    keeping what it found): every kept file goes back, latest first, so the earliest, the file
    as it was before the run, is the one left in place."""
    records = kept_records(manifest)
    first: dict[str, dict[str, Any]] = {}
    for record in records:
        first.setdefault(record["path"], record)
    changes = {
        path: _change(path, record)
        for path, record in first.items()
        if record["kept"] is not None  # (a file the run made beside one: not the user's)
    }
    failed = put_back(records)
    return [
        {"path": path, "change": change or "modified", "restored": path not in failed}
        for path, change in changes.items()
        if change is not None or path in failed
    ]


def kept_records(manifest: str) -> list[dict[str, Any]]:
    """The manifest's records whose kept file is there (the rest were never put aside: the run
    ended, or failed to keep it, before the change), in the order they were kept, and those
    with no kept file (``"kept": None``): a file that did not exist then, to remove should the
    run have made it (a SQLite write-ahead log beside a database put back)."""
    return [
        r
        for r in _records(manifest)
        if isinstance(r.get("path"), str)
        and (r.get("kept") is None or Path(str(r["kept"])).is_file())
    ]


def _records(manifest: str) -> list[dict[str, Any]]:
    try:
        with open(manifest, encoding="utf-8") as handle:
            records = [json.loads(line) for line in handle if line.strip()]
    except (OSError, ValueError):
        return []
    return [r for r in records if isinstance(r, dict)]


def put_back(records: list[dict[str, Any]], skip: frozenset[str] = frozenset()) -> set[str]:
    """Move each kept file of ``records`` (a manifest's, in order) back to its path, latest
    first, so the earliest is the one left; paths in ``skip`` stay as they are. Returns the
    paths whose earliest kept file could not go back."""
    first: dict[str, dict[str, Any]] = {}
    for record in records:
        first.setdefault(record["path"], record)
    failed: set[str] = set()
    for record in reversed(records):
        path, kept = record["path"], record["kept"]
        if path in skip:
            continue
        if kept is None:  # it did not exist then
            with contextlib.suppress(OSError):
                Path(path).unlink()
            continue
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(kept).replace(path)
        except OSError:
            try:
                shutil.copy2(kept, path)
            except OSError:
                if record is first[path]:
                    failed.add(path)
    return failed


def _change(path: str, record: dict[str, Any]) -> str | None:
    """What the run did to ``path``, kept as ``record`` describes: None when it is as it was."""
    try:
        stat = Path(path).lstat()
    except OSError:
        return "deleted"
    same = (stat.st_mtime_ns, stat.st_size) == (record["mtime_ns"], record["size"])
    return None if same else "modified"
