"""Learning-rate schedulers as pure calculators: ``lr(step) -> float``, no optimizer inside.

The formulas are the Rust original's, operation for operation, so a curve ported from flodl is the
same curve to the last bit (see docs/training.md for where they differ from
``torch.optim.lr_scheduler``). Steps are zero-based. Settings the original would panic on (a zero
step size, a zero-length cycle), silently turn into NaN (a zero-length cosine) or into a negative
learning rate (a negative, infinite or NaN rate or gamma) raise
:class:`~flodl.optim.OptimError` when the scheduler is built, not in the middle of a run.

Drive an optimizer with :func:`flodl.optim.apply` or :class:`flodl.optim.ScheduledLR`.
"""

from __future__ import annotations

import math
import operator
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field

from flodl.optim.errors import OptimError

__all__ = [
    "CosineScheduler",
    "CyclicLR",
    "ExponentialLR",
    "MultiStepLR",
    "OneCycleLR",
    "PlateauScheduler",
    "Scheduler",
    "StepDecay",
    "WarmupScheduler",
]


def powi(base: float, exponent: int) -> float:
    """``base ** exponent`` rounded exactly as Rust's ``f64::powi`` (binary exponentiation).

    Python's ``**`` calls libm ``pow``, which can differ from ``powi`` in the last bit; a decayed
    learning rate must not.
    """
    result = 1.0
    n = abs(exponent)
    while True:
        if n & 1:
            result *= base
        n >>= 1
        if n == 0:
            break
        base *= base
    return 1.0 / result if exponent < 0 else result


def round_half_away(x: float) -> int:
    """Rust's ``f64::round``: halves round away from zero (Python's ``round`` rounds to even)."""
    if x < 0:
        return -round_half_away(-x)
    whole = math.floor(x)  # x - whole is exact, so no `x + 0.5` rounding surprise
    return whole + 1 if x - whole >= 0.5 else whole


def _step(step: int) -> int:
    try:
        value = operator.index(step)
    except TypeError:
        raise OptimError(
            f"scheduler step must be an integer, got {type(step).__name__} {step!r}"
        ) from None
    if value < 0:
        raise OptimError(f"scheduler step must be >= 0 (steps are zero-based), got {value}")
    return value


def _count(name: str, value: int, *, minimum: int) -> int:
    try:
        value = operator.index(value)
    except TypeError:
        raise OptimError(f"{name} must be an integer, got {type(value).__name__}") from None
    if value < minimum:
        raise OptimError(f"{name} must be >= {minimum}, got {value}")
    return value


def _number(name: str, value: float, *, need: str) -> float:
    """``value`` as a float, refusing what cannot be one (a string would only fail in ``lr``)."""
    if isinstance(value, str | bytes):
        raise OptimError(f"{name} must be {need}, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise OptimError(f"{name} must be {need}, got {type(value).__name__} {value!r}") from None


def _check_non_negative(name: str, value: float) -> None:
    """A learning rate or a decay factor: finite and >= 0.

    A negative (or NaN) one gives a negative rate mid-run, which :func:`flodl.optim.set_lr`
    refuses; a gamma above 1 (a growing rate) is allowed, as in torch. Only checked: the stored
    value stays as given, so the schedule's repr (its identity in a checkpoint) does not change.
    """
    x = _number(name, value, need="a finite number >= 0")
    if not (math.isfinite(x) and x >= 0.0):
        raise OptimError(f"{name} must be a finite number >= 0, got {value!r}")


class Scheduler(ABC):
    """A learning rate as a function of the zero-based step. Subclass and define :meth:`lr`."""

    __slots__ = ()

    @abstractmethod
    def lr(self, step: int) -> float:
        """The learning rate at ``step`` (zero-based)."""

    def __call__(self, step: int) -> float:
        return self.lr(step)

    def curve(self, steps: int) -> list[float]:
        """``[lr(0), ..., lr(steps - 1)]`` — handy for plots and tests."""
        return [self.lr(s) for s in range(steps)]


@dataclass(frozen=True, slots=True)
class StepDecay(Scheduler):
    """Staircase decay: ``base_lr * gamma ** (step // step_size)``.

    >>> s = StepDecay(0.1, step_size=10, gamma=0.5)
    >>> s.lr(9), s.lr(10), s.lr(20)
    (0.1, 0.05, 0.025)
    """

    base_lr: float
    step_size: int
    gamma: float

    def __post_init__(self) -> None:
        _check_non_negative("StepDecay base_lr", self.base_lr)
        object.__setattr__(
            self, "step_size", _count("StepDecay step_size", self.step_size, minimum=1)
        )
        _check_non_negative("StepDecay gamma", self.gamma)

    def lr(self, step: int) -> float:
        return self.base_lr * powi(self.gamma, _step(step) // self.step_size)


@dataclass(frozen=True, slots=True)
class CosineScheduler(Scheduler):
    """Cosine annealing from ``base_lr`` to ``min_lr`` over ``total_steps``, then flat at ``min_lr``.

    ``t = min(step, total) / total``; ``lr = min + 0.5 * (base - min) * (1 + cos(pi * t))``.

    >>> s = CosineScheduler(0.1, 0.001, total_steps=100)
    >>> s.lr(0), s.lr(100), s.lr(500)
    (0.1, 0.001, 0.001)
    """

    base_lr: float
    min_lr: float
    total_steps: int

    def __post_init__(self) -> None:
        _check_non_negative("CosineScheduler base_lr", self.base_lr)
        _check_non_negative("CosineScheduler min_lr", self.min_lr)
        # lr() divides by total_steps: 0 would give NaN at every step, so refuse it here.
        object.__setattr__(
            self, "total_steps", _count("CosineScheduler total_steps", self.total_steps, minimum=1)
        )

    def lr(self, step: int) -> float:
        t = float(min(_step(step), self.total_steps)) / float(self.total_steps)
        return self.min_lr + 0.5 * (self.base_lr - self.min_lr) * (1.0 + math.cos(t * math.pi))


@dataclass(frozen=True, slots=True)
class ExponentialLR(Scheduler):
    """Exponential decay: ``base_lr * gamma ** step`` (an integer power, rounded like Rust's powi).

    >>> ExponentialLR(0.1, 0.9).lr(1)
    0.09000000000000001
    """

    base_lr: float
    gamma: float

    def __post_init__(self) -> None:
        _check_non_negative("ExponentialLR base_lr", self.base_lr)
        _check_non_negative("ExponentialLR gamma", self.gamma)

    def lr(self, step: int) -> float:
        return self.base_lr * powi(self.gamma, _step(step))


@dataclass(frozen=True, slots=True)
class MultiStepLR(Scheduler):
    """Decay by ``gamma`` at each milestone: ``base_lr * gamma ** passed``.

    ``passed`` counts milestones ``m`` with ``step >= m``; milestones are sorted, and a repeated
    milestone decays once per repetition (as in torch).

    >>> s = MultiStepLR(0.1, [60, 30, 90], 0.5)
    >>> s.lr(29), s.lr(30), s.milestones
    (0.1, 0.05, (30, 60, 90))
    """

    base_lr: float
    milestones: tuple[int, ...]
    gamma: float

    def __init__(self, base_lr: float, milestones: Iterable[int], gamma: float) -> None:
        _check_non_negative("MultiStepLR base_lr", base_lr)
        _check_non_negative("MultiStepLR gamma", gamma)
        if not isinstance(milestones, Iterable) or isinstance(milestones, str | bytes):
            raise OptimError(
                "MultiStepLR milestones must be a list of step numbers, "
                f"got {type(milestones).__name__} {milestones!r}"
            )
        ms = tuple(sorted(_count("MultiStepLR milestone", m, minimum=0) for m in milestones))
        object.__setattr__(self, "base_lr", base_lr)
        object.__setattr__(self, "milestones", ms)
        object.__setattr__(self, "gamma", gamma)

    def lr(self, step: int) -> float:
        step = _step(step)
        passed = sum(1 for m in self.milestones if step >= m)
        return self.base_lr * powi(self.gamma, passed)


@dataclass(frozen=True, slots=True)
class OneCycleLR(Scheduler):
    """One-cycle policy: linear warmup from ``max_lr/25`` to ``max_lr``, cosine back to ``max_lr/25``.

    ``warmup_steps = round(total_steps * warmup_frac)`` with halves rounded away from zero (Rust
    ``f64::round``), ``warmup_frac`` clamped to [0, 1]. Steps past ``total_steps`` stay at the end
    value. Unlike torch's OneCycleLR the warmup is linear and the end value is ``max_lr/25``.

    >>> s = OneCycleLR(0.01, total_steps=100)
    >>> s.warmup_steps, s.lr(30), s.lr(100) == 0.01 / 25
    (30, 0.01, True)
    """

    max_lr: float
    total_steps: int
    warmup_frac: float = 0.3
    warmup_steps: int = field(init=False)

    def __post_init__(self) -> None:
        _check_non_negative("OneCycleLR max_lr", self.max_lr)
        total = _count("OneCycleLR total_steps", self.total_steps, minimum=0)
        need = "a number in [0, 1]"
        frac = min(max(_number("OneCycleLR warmup_frac", self.warmup_frac, need=need), 0.0), 1.0)
        if math.isnan(frac):
            raise OptimError("OneCycleLR warmup_frac must be a number in [0, 1], got NaN")
        object.__setattr__(self, "total_steps", total)
        object.__setattr__(self, "warmup_frac", frac)
        object.__setattr__(self, "warmup_steps", round_half_away(float(total) * frac))

    @classmethod
    def with_warmup_frac(cls, max_lr: float, total_steps: int, warmup_frac: float) -> OneCycleLR:
        """Same as ``OneCycleLR(max_lr, total_steps, warmup_frac)``, under the Rust flodl's name."""
        return cls(max_lr, total_steps, warmup_frac)

    def lr(self, step: int) -> float:
        step = min(_step(step), self.total_steps)
        min_lr = self.max_lr / 25.0
        if step < self.warmup_steps:
            frac = float(step) / float(max(self.warmup_steps, 1))
            return min_lr + frac * (self.max_lr - min_lr)
        decay_steps = max(self.total_steps - self.warmup_steps, 1)
        t = float(step - self.warmup_steps) / float(decay_steps)
        return min_lr + 0.5 * (self.max_lr - min_lr) * (1.0 + math.cos(t * math.pi))


@dataclass(frozen=True, slots=True)
class CyclicLR(Scheduler):
    """Triangular cycles between ``base_lr`` and ``max_lr`` (no amplitude decay).

    ``pos = step % (up + down)``; rising for ``pos <= up`` (peak exactly at ``pos == up``), then
    falling. ``step_size_down`` defaults to ``step_size_up``: a symmetric triangle.

    >>> s = CyclicLR(0.001, 0.01, step_size_up=10)
    >>> s.lr(0), s.lr(10), s.lr(20)  # 0.001 + 0.009 * 1.0 in float64: the last bit shows
    (0.001, 0.010000000000000002, 0.001)
    """

    base_lr: float
    max_lr: float
    step_size_up: int
    step_size_down: int | None = None

    def __post_init__(self) -> None:
        _check_non_negative("CyclicLR base_lr", self.base_lr)
        _check_non_negative("CyclicLR max_lr", self.max_lr)
        up = _count("CyclicLR step_size_up", self.step_size_up, minimum=1)
        down = up if self.step_size_down is None else self.step_size_down
        down = _count("CyclicLR step_size_down", down, minimum=0)
        object.__setattr__(self, "step_size_up", up)
        object.__setattr__(self, "step_size_down", down)

    @classmethod
    def asymmetric(
        cls, base_lr: float, max_lr: float, step_size_up: int, step_size_down: int
    ) -> CyclicLR:
        """Same as ``CyclicLR(base_lr, max_lr, up, down)``, under the Rust flodl's name."""
        return cls(base_lr, max_lr, step_size_up, step_size_down)

    def lr(self, step: int) -> float:
        up, down = self.step_size_up, self.step_size_down
        assert down is not None  # set in __post_init__
        pos = _step(step) % (up + down)
        if pos <= up:
            scale = float(pos) / float(up)
        else:
            scale = 1.0 - float(pos - up) / float(down)
        return self.base_lr + (self.max_lr - self.base_lr) * scale


@dataclass(frozen=True, slots=True)
class WarmupScheduler(Scheduler):
    """Linear warmup to ``target_lr`` over ``warmup_steps``, then ``inner`` restarted from step 0.

    During warmup ``lr = target_lr * (step + 1) / warmup_steps``: step 0 is already
    ``target_lr / warmup_steps`` and step ``warmup_steps - 1`` reaches ``target_lr``. After it,
    ``lr(step) = inner.lr(step - warmup_steps)``. ``warmup_steps = 0`` always delegates.

    >>> s = WarmupScheduler(CosineScheduler(0.1, 0.001, 90), target_lr=0.1, warmup_steps=10)
    >>> s.lr(0), s.lr(9), s.lr(10)
    (0.01, 0.1, 0.1)
    """

    inner: Scheduler
    target_lr: float
    warmup_steps: int

    def __post_init__(self) -> None:
        if not callable(getattr(self.inner, "lr", None)):
            raise OptimError(
                f"WarmupScheduler needs an inner scheduler with .lr(step), got {self.inner!r}"
            )
        _check_non_negative("WarmupScheduler target_lr", self.target_lr)
        object.__setattr__(
            self,
            "warmup_steps",
            _count("WarmupScheduler warmup_steps", self.warmup_steps, minimum=0),
        )

    def lr(self, step: int) -> float:
        step = _step(step)
        if step < self.warmup_steps:
            return self.target_lr * (float(step) + 1.0) / float(self.warmup_steps)
        return self.inner.lr(step - self.warmup_steps)


class PlateauScheduler:
    """Reactive decay: multiply the lr by ``factor`` after ``patience`` observations without improvement.

    Lower is better; an observation improves only if strictly below the best so far (NaN never
    does). After ``patience`` non-improving observations in a row the lr becomes
    ``max(lr * factor, min_lr)`` and the count restarts. ``patience = 0`` reduces on every
    non-improving observation. Not a step function: feed it with :meth:`observe`.

    >>> s = PlateauScheduler(0.1, patience=3, factor=0.5, min_lr=1e-6)
    >>> [s.observe(m) for m in (1.0, 1.1, 1.2, 1.3)]
    [0.1, 0.1, 0.1, 0.05]
    """

    __slots__ = ("best", "current", "factor", "min_lr", "patience", "wait")

    def __init__(self, base_lr: float, patience: int, factor: float, min_lr: float) -> None:
        self.patience = _count("PlateauScheduler patience", patience, minimum=0)
        _check_non_negative("PlateauScheduler base_lr", base_lr)
        _check_non_negative("PlateauScheduler factor", factor)
        _check_non_negative("PlateauScheduler min_lr", min_lr)
        self.factor = float(factor)
        self.min_lr = float(min_lr)
        self.current = float(base_lr)
        self.best = math.inf
        self.wait = 0

    def observe(self, metric: float) -> float:
        """Record one metric value (e.g. the epoch's validation loss); returns the current lr."""
        metric = float(metric)
        if metric < self.best:
            self.best = metric
            self.wait = 0
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.current = max(self.current * self.factor, self.min_lr)
                self.wait = 0
        return self.current

    def lr(self, step: int | None = None) -> float:
        """The current lr. ``step`` is accepted (and ignored) so :func:`apply` works uniformly."""
        return self.current

    def state_dict(self) -> dict[str, float | int]:
        return {"current": self.current, "best": self.best, "wait": self.wait}

    def load_state_dict(self, state: dict[str, float | int]) -> None:
        """Restore :meth:`state_dict`'s output; checked whole first, so a bad one changes nothing.

        >>> s = PlateauScheduler(0.1, patience=2, factor=0.5, min_lr=0.0)
        >>> s.load_state_dict({"current": 0.05, "best": 0.7, "wait": 1})
        >>> s.observe(0.8)
        0.025
        """
        if not isinstance(state, dict):
            raise OptimError(
                "PlateauScheduler.load_state_dict takes the dict state_dict() returns, got "
                f"{type(state).__name__}"
            )
        keys = {"current", "best", "wait"}
        if set(state) != keys:
            missing, unknown = sorted(keys - set(state)), sorted(set(state) - keys, key=str)
            raise OptimError(
                "PlateauScheduler.load_state_dict: not a PlateauScheduler state"
                + (f"; missing {missing}" if missing else "")
                + (f"; unknown {unknown}" if unknown else "")
            )
        _check_non_negative("PlateauScheduler state 'current'", state["current"])
        best = _number("PlateauScheduler state 'best'", state["best"], need="a number")
        if math.isnan(best):  # an observation never stores NaN: the state is damaged
            raise OptimError("PlateauScheduler state 'best' must be a number, got nan")
        wait = _count("PlateauScheduler state 'wait'", state["wait"], minimum=0)  # type: ignore[arg-type]
        self.current, self.best, self.wait = float(state["current"]), best, wait

    def __repr__(self) -> str:
        return (
            f"PlateauScheduler(lr={self.current!r}, patience={self.patience}, "
            f"factor={self.factor!r}, min_lr={self.min_lr!r}, best={self.best!r}, wait={self.wait})"
        )
