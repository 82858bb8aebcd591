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
    ):
        super().__init__(message + (f"\n{details}" if details else ""))
        self.rank = rank
        self.details = details
        self.partial = partial


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
