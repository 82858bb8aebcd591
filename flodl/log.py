"""flodl's logging: standard :mod:`logging` under the ``flodl`` logger, silent by default.

Loggers: ``flodl.graph`` (graph builds), ``flodl.train`` (trainer start/stop, ranks,
synchronisation, checkpoints), ``flodl.data`` (datasets and loaders), ``flodl.checkpoint``
(background saves), ``flodl.monitor`` (dashboard). They are ordinary loggers: configure them as
you configure any library's.

Verbosity (the ``FLODL_VERBOSITY`` environment variable, read when flodl is imported, which
``fdl -q/-v/-vv/-vvv`` sets for the programs it runs; or :func:`set_verbosity`):

=====  =========  ==============================================================================
level  name       what reaches stderr
=====  =========  ==============================================================================
unset  (default)  warnings and errors only, through your own logging setup if you made one
0      quiet      errors only
1      info       + milestones: graph built, trainer start/stop, rank joins, checkpoints saved,
                  datasets loaded
2      debug      + per-epoch detail: synchronisations and their duration, El Che anchor changes,
                  snapshot copies, epoch plans
3      trace      + per-batch detail (very verbose)
=====  =========  ==============================================================================

With a verbosity set, flodl writes its records to stderr through its own handler (and does not
pass them on to the root logger, so nothing is printed twice). The ranks Builder mode spawns take
the level in effect when it starts them, however it was set. In a multi-rank run every record
carries a ``rank`` attribute (None in a single-process run) and its line starts with
``[rank N]``. ``fl.Monitor`` also keeps the records it sees and adds them to the file
``Monitor.write_log`` writes.

>>> import flodl as fl
>>> fl.set_verbosity("debug"); fl.verbosity()
2
>>> fl.set_verbosity(None)  # back to the default: silent below WARNING
"""

from __future__ import annotations

import logging
import os
import sys
from typing import IO

__all__ = ["TRACE", "get_logger", "set_rank", "set_verbosity", "verbosity"]

_ENV_VAR = "FLODL_VERBOSITY"
#: A level below DEBUG for per-batch detail (``logger.log(TRACE, ...)``).
TRACE = 5
logging.addLevelName(TRACE, "TRACE")

_NAMES = {"quiet": 0, "info": 1, "debug": 2, "trace": 3}
_LEVELS = {0: logging.ERROR, 1: logging.INFO, 2: logging.DEBUG, 3: TRACE}

_root = logging.getLogger("flodl")
_state: dict[str, object] = {"verbosity": None, "handler": None, "rank": None}


class _RankFilter(logging.Filter):
    """Gives every flodl record a ``rank`` attribute (None outside a multi-rank run)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "rank"):
            record.rank = current_rank()
        return True


_RANK_FILTER = _RankFilter()
_root.addFilter(_RANK_FILTER)


class _RankFormatter(logging.Formatter):
    """``[rank N] flodl.train: message`` in a multi-rank run, ``flodl.train: message`` otherwise."""

    def __init__(self) -> None:
        super().__init__("%(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.WARNING:
            text = f"{record.levelname.lower()}: {text}"
        rank = getattr(record, "rank", None)
        return text if rank is None else f"[rank {rank}] {text}"


def get_logger(name: str) -> logging.Logger:
    """The logger ``name`` (under ``flodl``) with the rank filter: use it in library modules."""
    if name != "flodl" and not name.startswith("flodl."):
        raise ValueError(f"flodl loggers live under 'flodl', got {name!r}")
    logger = logging.getLogger(name)
    if _RANK_FILTER not in logger.filters:
        logger.addFilter(_RANK_FILTER)
    return logger


def current_rank() -> int | None:
    """This process's rank in a multi-rank run (:func:`set_rank`, else ``RANK`` when
    ``WORLD_SIZE`` > 1), None otherwise."""
    rank = _state["rank"]
    if rank is not None:
        return rank  # type: ignore[return-value]
    try:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ:
            return int(os.environ["RANK"])
    except ValueError:
        pass
    return None


def set_rank(rank: int | None) -> None:
    """Mark this process as rank ``rank`` of a multi-rank run (None: a single process)."""
    _state["rank"] = rank


def _parse_verbosity(level: int | str | None) -> int | None:
    """0..3 from an int, a digit string or a name (``quiet``, ``info``, ``debug``, ``trace``)."""
    if level is None:
        return None
    if isinstance(level, str):
        text = level.strip().lower()
        if text in _NAMES:
            return _NAMES[text]
        if text.isdigit():
            level = int(text)
    if isinstance(level, int) and not isinstance(level, bool) and level in _LEVELS:
        return level
    raise ValueError(
        f"verbosity must be 0..3 or one of {', '.join(repr(n) for n in _NAMES)}, got {level!r}"
    )


def set_verbosity(level: int | str | None, *, stream: IO[str] | None = None) -> None:
    """Set how much flodl logs to stderr: 0..3 or ``"quiet"|"info"|"debug"|"trace"``.

    None restores the default (no handler of flodl's own; WARNING and above reach stderr through
    Python's default handling or your logging configuration). ``stream`` replaces stderr.
    Overrides ``FLODL_VERBOSITY``.
    """
    value = _parse_verbosity(level)
    if stream is not None and not callable(getattr(stream, "write", None)):
        raise TypeError(
            f"set_verbosity(stream=...) takes an open text stream (sys.stdout, "
            f"open('train.log', 'a')), got {type(stream).__name__} {stream!r}"
        )
    old = _state["handler"]
    if isinstance(old, logging.Handler):
        _root.removeHandler(old)
        _state["handler"] = None
    _state["verbosity"] = value
    if value is None:
        _root.setLevel(logging.NOTSET)
        _root.propagate = True
        return
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(_RankFormatter())
    _root.addHandler(handler)
    _root.setLevel(_LEVELS[value])
    _root.propagate = False
    _state["handler"] = handler


def verbosity() -> int | None:
    """The verbosity set (0..3), or None for the default."""
    return _state["verbosity"]  # type: ignore[return-value]


def configure_from_env() -> None:
    """Apply ``FLODL_VERBOSITY`` (called once when flodl is imported); a bad value is a warning."""
    raw = os.environ.get(_ENV_VAR, "").strip()
    if not raw:
        return
    try:
        set_verbosity(raw)
    except ValueError as err:
        get_logger("flodl").warning("ignoring %s=%r: %s", _ENV_VAR, raw, err)
