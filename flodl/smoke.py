"""The ``FLODL_SMOKE`` contract, in one place.

Under ``FLODL_SMOKE=1`` (what ``fdl check`` sets) a training script runs at most
:data:`SMOKE_EPOCHS` epochs of at most :data:`SMOKE_BATCHES` batches each (per rank):
``fl.data.DataLoader`` caps the batches and ``fl.Trainer`` caps its own loop. ``fdl check``
also shortens the script's own training loops, so the script runs to its end (evaluation and
saving included). Run by hand (``FLODL_SMOKE=1 python train.py``), a loop you wrote yourself is
ended by the :class:`~flodl.Monitor` that logs it instead.
"""

from __future__ import annotations

import os

__all__ = ["SMOKE_BATCHES", "SMOKE_EPOCHS", "SmokeBudgetReached", "smoke_enabled"]

#: Set by ``fdl check``'s runner, which shortens the script's loops itself.
_LOOPS_CAPPED_ENV = "FLODL_SMOKE_LOOPS_CAPPED"

#: Epochs a training script runs when ``FLODL_SMOKE`` is set.
SMOKE_EPOCHS = 2
#: Batches per epoch (per rank) when ``FLODL_SMOKE`` is set.
SMOKE_BATCHES = 2


def smoke_enabled() -> bool:
    """Whether this is a smoke run: ``FLODL_SMOKE`` is set (``fdl check`` sets it).

    Unset, empty or ``0`` means no. Use it to shrink what flodl cannot shorten for you, e.g. a
    dataset you download or generate, or a loop whose shape the check does not recognise:

    >>> import flodl as fl
    >>> samples = 64 if fl.smoke_enabled() else 60_000
    """
    return os.environ.get("FLODL_SMOKE", "").strip() not in ("", "0")


def loops_capped() -> bool:
    """Whether ``fdl check`` shortens the script's loops (the Monitor then never ends the run)."""
    return smoke_enabled() and os.environ.get(_LOOPS_CAPPED_ENV, "") == "1"


class SmokeBudgetReached(SystemExit):
    """The smoke budget is spent: the run ends here, successfully (exit code 0).

    :meth:`flodl.Monitor.log` raises it under ``FLODL_SMOKE=1`` set by hand once it has logged
    :data:`SMOKE_EPOCHS` epochs of a run that planned more, after finishing the monitor (summary,
    HTML archive). It is a :class:`SystemExit`, so it passes through ``except Exception`` and the
    interpreter exits with code 0; code after the training loop does not run then. Under
    ``fdl check``, which shortens the loops itself, it is never raised and the script runs on.

    >>> issubclass(SmokeBudgetReached, SystemExit), SmokeBudgetReached(2).code
    (True, 0)
    """

    def __init__(self, epochs: int) -> None:
        super().__init__(0)
        self.epochs = epochs

    def __str__(self) -> str:
        return f"FLODL_SMOKE: stopping after {self.epochs} epochs (smoke budget)"
