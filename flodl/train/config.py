"""The El Che / multi-device knobs: each default defined once, every value checked one way.

:class:`ElCheConfig` is the immutable, validated set of El Che knobs that Builder mode
(``fl.Trainer.builder(...).anchor(...)`` and friends), Graph mode (:class:`flodl.DdpConfig`, a
subclass) and the coordinator all read. The checks below are the only ones the Trainer uses:
a bad value raises :class:`~flodl.train.errors.TrainerConfigError` naming the knob, at the
setter or constructor, never later in a rank.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flodl.train.errors import TrainerConfigError

if TYPE_CHECKING:
    from flodl.train.el_che import ElChe

ANCHOR = 10  # batches the slowest rank runs per El Che window at the start
MAX_ANCHOR = 200  # cap of the anchor (how stale a replica may get)
OVERHEAD_TARGET = 0.10  # tolerated averaging cost, as a fraction of compute time
TIMEOUT = 60.0  # seconds a collective or a silent rank may stall before the run fails


def integer(knob: str, value: Any, *, least: int | None = None) -> int:
    """``value`` as an int (an int or an integer-like object such as ``numpy.int64``; not a
    bool, a float or a string), at least ``least``."""
    bound = f" >= {least}" if least is not None else ""
    try:
        if isinstance(value, bool):
            raise TypeError
        n = operator.index(value)
    except TypeError:
        raise TrainerConfigError(f"{knob} must be an integer{bound}, got {value!r}") from None
    if least is not None and n < least:
        raise TrainerConfigError(f"{knob} must be an integer{bound}, got {value!r}")
    return n


def number(
    knob: str, value: Any, *, above: float | None = None, least: float | None = None
) -> float:
    """``value`` as a finite float (an int or a float; not a bool or a string), greater than
    ``above`` or at least ``least``."""
    bound = f" > {above:g}" if above is not None else f" >= {least:g}" if least is not None else ""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TrainerConfigError(f"{knob} must be a finite number{bound}, got {value!r}")
    v = float(value)
    if (
        not math.isfinite(v)
        or (above is not None and v <= above)
        or (least is not None and v < least)
    ):
        raise TrainerConfigError(f"{knob} must be a finite number{bound}, got {value!r}")
    return v


def flag(knob: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TrainerConfigError(f"{knob} must be True or False, got {value!r}")
    return value


def function(knob: str, value: Any, *, signature: str) -> Callable:
    """``value`` if callable; else an error saying what the knob expects."""
    if not callable(value):
        raise TrainerConfigError(
            f"{knob} must be a function {signature}, got {type(value).__name__} {value!r}"
        )
    return value


def factory(knob: str, value: Any, *, signature: str, product: str, attribute: str) -> Callable:
    """A factory ``value`` (callable); an instance of what it should build (it has
    ``attribute``) is refused with the fix, since calling it would fail mid-training."""
    made = callable(getattr(value, attribute, None)) and not isinstance(value, type)
    if made:
        raise TrainerConfigError(
            f"{knob} takes a factory {signature} that builds the {product}, got a "
            f"{type(value).__name__} instance — pass a function returning it, e.g. "
            f"def make(world): return {type(value).__name__}(...) (module level, so that spawned "
            "ranks can import it)"
        )
    return function(knob, value, signature=signature)


def speed_hint(knob: str, value: Any) -> tuple[int, float] | None:
    """``(slow_rank, ratio)`` checked, or None."""
    if value is None:
        return None
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise TrainerConfigError(f"{knob} must be (slow_rank, ratio), got {value!r}")
    rank = integer(f"{knob} slow_rank", value[0], least=0)
    return rank, number(f"{knob} ratio", value[1], above=0.0)


@dataclass(frozen=True)
class ElCheConfig:
    """El Che's knobs, validated and immutable (``dataclasses.replace`` makes a changed copy).

    Args:
        anchor: batches the slowest rank runs per window at the start (and the floor the anchor
            decays back to), >= 1.
        max_anchor: cap of the anchor, >= 1 (Graph mode's :class:`flodl.DdpConfig` also takes 0:
            El Che off).
        overhead_target: tolerated averaging cost as a fraction of compute time, > 0 (clamped
            to [0.01, 0.50] when used).
        speed_hint: ``(slow_rank, ratio)``: seed the counts before any timing.
        max_batch_diff: how far a per-rank count may move per calibration (None: unbounded).

    >>> from flodl.train.config import ElCheConfig
    >>> ElCheConfig(max_anchor=50).build(2).batch_counts
    [10, 10]
    >>> ElCheConfig(anchor=2.7)
    Traceback (most recent call last):
    ...
    flodl.train.errors.TrainerConfigError: anchor must be an integer >= 1, got 2.7
    """

    anchor: int = ANCHOR
    max_anchor: int = MAX_ANCHOR
    overhead_target: float = OVERHEAD_TARGET
    speed_hint: tuple[int, float] | None = None
    max_batch_diff: int | None = None

    _least_max_anchor = 1

    def __post_init__(self) -> None:
        checked = {
            "anchor": integer("anchor", self.anchor, least=1),
            "max_anchor": integer("max_anchor", self.max_anchor, least=self._least_max_anchor),
            "overhead_target": number("overhead_target", self.overhead_target, above=0.0),
            "speed_hint": speed_hint("speed_hint", self.speed_hint),
            "max_batch_diff": None
            if self.max_batch_diff is None
            else integer("max_batch_diff", self.max_batch_diff, least=0),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def build(self, world: int, *, anchor: int | None = None) -> ElChe:
        """The El Che state these knobs describe for ``world`` ranks."""
        from flodl.train.el_che import ElChe  # el_che reads this module's defaults

        el = ElChe(
            world,
            min(self.anchor if anchor is None else anchor, max(self.max_anchor, 1)),
            overhead_target=self.overhead_target,
            max_anchor=max(self.max_anchor, 1),
            max_batch_diff=self.max_batch_diff,
        )
        if self.speed_hint is not None:
            el.with_speed_ratio(*self.speed_hint)
        return el
