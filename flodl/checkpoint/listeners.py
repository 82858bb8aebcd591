"""Save listeners: callbacks told when a checkpoint file is completely written.

``add_save_listener(fn)`` registers ``fn(saved)``, called with a :class:`SavedCheckpoint` after
a checkpoint file is written to a path: renamed into place, fsynced. Every checkpoint writer
tells: ``fl.save_checkpoint`` (and so ``graph.save_checkpoint``, ``ModelSnapshot.save``,
``fl.safetensors_to_fdl``), ``fl.save_training_state``, ``fl.save_optimizer_state``,
``fl.migrate_checkpoint_file`` and ``fl.fdl_to_safetensors``. A blocking save calls it in the
saving thread before returning; a ``background=True`` save calls it on the writer thread once
the file is on disk, not when the call returns. A save that fails calls nothing; a save to a
stream (a file object) calls nothing either. ``remove_save_listener(fn)`` unregisters. An
exception in a listener is logged and never fails the save.

Higher layers use this without the checkpoint layer knowing about them: a running
``fl.monitor.Timeline`` records each save as a ``checkpoint_saved`` event.

:func:`save_tags` labels the saves started inside it (in this thread): their
``SavedCheckpoint.tags`` carry its keywords (a background save keeps the labels of the moment it
was submitted), and the scope counts them in :attr:`SaveScope.saves`. The Trainer labels its
saves ``version=``; a Graph set up by ``fl.Trainer.setup`` labels its own ``step=`` (its
``training_step``).

>>> import tempfile, torch, flodl as fl
>>> from pathlib import Path
>>> from flodl.checkpoint import listeners
>>> seen = []
>>> listeners.add_save_listener(seen.append)
>>> path = Path(tempfile.mkdtemp()) / "m.fdl"
>>> with listeners.save_tags(version=3) as scope:
...     fl.save_checkpoint(path, {"w": torch.ones(2)})
>>> listeners.remove_save_listener(seen.append)
>>> seen[0].path == str(path), seen[0].tags, seen[0].background, scope.saves
(True, {'version': 3}, False, 1)
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from flodl.log import get_logger

__all__ = [
    "SaveScope",
    "SavedCheckpoint",
    "add_save_listener",
    "remove_save_listener",
    "save_tags",
]

log = get_logger("flodl.checkpoint")


@dataclass(frozen=True)
class SavedCheckpoint:
    """A checkpoint file that is now completely on disk.

    ``path``: where (as given, made a string). ``background``: written by the background writer.
    ``tags``: the labels of the :func:`save_tags` scopes the save was started in (inner wins).
    """

    path: str
    background: bool = False
    tags: dict[str, Any] = field(default_factory=dict)


@dataclass
class SaveScope:
    """One :func:`save_tags` scope: its labels and how many path saves were started inside it."""

    tags: dict[str, Any]
    saves: int = 0


SaveListener = Callable[[SavedCheckpoint], None]

_listeners: list[SaveListener] = []
_lock = threading.Lock()
_scopes: contextvars.ContextVar[tuple[SaveScope, ...]] = contextvars.ContextVar(
    "flodl_checkpoint_save_scopes", default=()
)


def add_save_listener(fn: SaveListener) -> None:
    """Call ``fn(saved)`` after every checkpoint file written from now on (idempotent)."""
    if not callable(fn):
        raise TypeError(f"add_save_listener: need a callable, got {type(fn).__name__}")
    with _lock:
        if fn not in _listeners:
            _listeners.append(fn)


def remove_save_listener(fn: SaveListener) -> None:
    """Stop calling ``fn`` (nothing happens when it was not registered)."""
    with _lock:
        if fn in _listeners:
            _listeners.remove(fn)


@contextlib.contextmanager
def save_tags(**tags: Any) -> Iterator[SaveScope]:
    """Label the checkpoint saves started inside this block, in this thread (see the module)."""
    scope = SaveScope(dict(tags))
    token = _scopes.set((*_scopes.get(), scope))
    try:
        yield scope
    finally:
        _scopes.reset(token)


def begin(dest: object) -> dict[str, Any] | None:
    """A save to ``dest`` starts: count it in the enclosing scopes and return its labels (None
    for a stream, which listeners are not told about)."""
    if not isinstance(dest, str | os.PathLike):
        return None
    tags: dict[str, Any] = {}
    for scope in _scopes.get():
        scope.saves += 1
        tags.update(scope.tags)
    return tags


@contextlib.contextmanager
def writing(dest: object) -> Iterator[None]:
    """Around a blocking write of a checkpoint file to ``dest``: the save is counted in the
    enclosing scopes, and the listeners are told once the block ends without an exception
    (never for a stream)."""
    tags = begin(dest)
    yield
    if tags is not None:
        notify(dest, tags, background=False)  # type: ignore[arg-type]


def notify(dest: str | os.PathLike[str], tags: dict[str, Any], *, background: bool) -> None:
    """Tell every listener that the file at ``dest`` is written."""
    with _lock:
        listeners = list(_listeners)
    if not listeners:
        return
    saved = SavedCheckpoint(os.fspath(dest), background, dict(tags))
    for fn in listeners:
        try:
            fn(saved)
        except Exception:  # a listener must never fail (or undo) a save that succeeded
            log.exception("checkpoint save listener %r failed", fn)
