"""Errors raised by the training runtime::

    FlodlError
     ├── TrainerConfigError (ValueError)    a setting out of range or inconsistent
     ├── TrainingError                      a rank failed (``rank``, ``details``, ``partial``)
     │    └── CoordinatorGoneError          under a launcher: rank 0 stopped answering
     ├── CollectiveError (RuntimeError)     an averaging collective failed (a peer died)
     └── CoordinatorLostError (RuntimeError)  rank 0's control store went silent

``CollectiveError`` and ``CoordinatorLostError`` are raised inside a rank and reported through
:class:`TrainingError`; they keep ``RuntimeError`` as a second base, what torch's collectives
raise. Their old names (``CollectiveFailed``, ``CoordinatorLost``, ``CoordinatorGone``) still
resolve in the modules that defined them, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from flodl.errors import FlodlError

if TYPE_CHECKING:
    from flodl.train.trained_state import TrainedState

__all__ = [
    "CollectiveError",
    "CoordinatorGoneError",
    "CoordinatorLostError",
    "TrainerConfigError",
    "TrainingError",
]


class TrainerConfigError(FlodlError, ValueError):
    """A Trainer, El Che or coordinator setting is out of range or inconsistent."""


class TrainingError(FlodlError):
    """A rank failed. ``rank``, ``details`` (its traceback) and any partial state are attached."""

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        details: str = "",
        partial: TrainedState | None = None,
        step: int | None = None,
        epoch: int | None = None,
    ):
        super().__init__(message + (f"\n{details}" if details else ""))
        self.rank = rank
        self.details = details
        self.partial = partial
        self.step = step  # the failing rank's local step, when it failed in training
        self.epoch = epoch


def failed_at(rank: int, step: int, epoch: int | None) -> str:
    """The note a rank adds to what it raised in training (read back by :func:`rank_failure`)."""
    return f"rank {rank} failed at local step {step} (epoch {epoch})"


_FAILED_AT = re.compile(r"rank \d+ failed at local step (\d+) \(epoch (\d+|None)\)")


def error_line(details: str) -> str | None:
    r"""The exception a formatted traceback ends with, its first line and without the module
    path (``ValueError: boom``); None when ``details`` is not a traceback.

    >>> error_line("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
    ...            "    g()\nflodl.errors.Oops: it broke\nsecond line\n")
    'Oops: it broke'
    """
    lines = details.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if not starts:
        return None
    for line in lines[starts[-1] + 1 :]:
        if line and not line.startswith(" "):
            return re.sub(r"^(?:\w+\.)+(?=\w+(?::|$))", "", line)
    return None


def rank_failure(
    rank: int, details: str, *, how: str = "", note: str = "", partial: TrainedState | None = None
) -> TrainingError:
    """The :class:`TrainingError` for ``rank``, which reported ``details`` (its traceback): led
    by what it raised and where (``training failed on rank 1 at local step 2 (epoch 0):
    ValueError: ...``), then ``how`` it ended in parentheses, then ``note``."""
    found = _FAILED_AT.search(details)
    step = int(found[1]) if found else None
    epoch = int(found[2]) if found and found[2] != "None" else None
    at = f" at local step {step} (epoch {epoch})" if found else ""
    error = error_line(details)
    if error is None and details.strip():  # a one-line verdict (killed, stuck): lead with it
        error = details.strip().splitlines()[0]
    head = f"training failed on rank {rank}{at}" + (f": {error}" if error else "")
    return TrainingError(
        head + (f" ({how})" if how else "") + note,
        rank=rank,
        details=details,
        partial=partial,
        step=step,
        epoch=epoch,
    )


def rank_list(ranks: list[int]) -> str:
    """``rank 2``, ``rank 1, 2``, or ``a rank`` for none."""
    return "rank " + ", ".join(map(str, ranks)) if ranks else "a rank"


def naming_ranks(ranks: list[int], message: str) -> TrainingError:
    """The :class:`TrainingError` for ``ranks``: ``{ranks}`` in ``message`` reads as
    :func:`rank_list` does; its ``rank`` is set when there is one."""
    placeholder = "{ranks}"  # noqa: RUF027 (filled below, not an f-string)
    return TrainingError(
        message.replace(placeholder, rank_list(ranks)), rank=ranks[0] if len(ranks) == 1 else None
    )


class CollectiveError(FlodlError, RuntimeError):
    """The averaging collective failed — a peer died or timed out. This rank's replica is
    intact (it was not overwritten), so it still counts towards the survivors' average."""


class CoordinatorLostError(FlodlError, RuntimeError):
    """Rank 0's control store stopped answering while this rank waited for its next message."""


class CoordinatorGoneError(TrainingError):
    """Under a launcher: rank 0 (coordinator and control store) stopped answering."""
