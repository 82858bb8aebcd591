"""Setting an optimizer's learning rate, and driving it from a flodl scheduler.

Two ways to connect a scheduler (any object with ``.lr(step)``) to a ``torch.optim`` optimizer:

- :func:`apply` — explicit: ``fl.optim.apply(sched, opt, step)`` sets the rate for ``step``.
- :class:`ScheduledLR` — a ``torch.optim.lr_scheduler.LRScheduler``, for code (or libraries such as
  Lightning) that expects torch's protocol: ``sched.step()`` after ``opt.step()``,
  ``get_last_lr()``, ``state_dict()``.

Both set every param group to the scheduler's value, times the group's optional ``"lr_scale"``
entry (torch keeps unknown keys in param groups), so a backbone can follow the same curve at a
tenth of the rate: ``{"params": ..., "lr_scale": 0.1}``.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from flodl.optim.errors import OptimError

__all__ = ["ScheduledLR", "apply", "get_lr", "set_group_lr", "set_lr"]


class LRSource(Protocol):
    def lr(self, step: int) -> float: ...


def _check_optimizer(optimizer: object) -> Optimizer:
    if not isinstance(optimizer, Optimizer):
        raise OptimError(
            f"expected a torch.optim.Optimizer, got {type(optimizer).__name__}; "
            "pass the optimizer, not its parameters"
        )
    return optimizer


def _check_lr(lr: float) -> float:
    lr = float(lr)
    if not lr >= 0.0:  # also rejects NaN
        raise OptimError(f"learning rate must be a number >= 0, got {lr}")
    return lr


def _write(group: dict[str, Any], lr: float) -> None:
    # Fused/capturable optimizers may hold lr as a tensor: update it in place, never rebind.
    if isinstance(group["lr"], torch.Tensor):
        group["lr"].fill_(lr)
    else:
        group["lr"] = lr


def set_lr(optimizer: Optimizer, lr: float) -> None:
    """Set the learning rate of every param group of ``optimizer`` to ``lr``.

    >>> import torch, flodl as fl
    >>> opt = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.1)
    >>> fl.optim.set_lr(opt, 0.01); fl.optim.get_lr(opt)
    0.01
    """
    lr = _check_lr(lr)
    for group in _check_optimizer(optimizer).param_groups:
        _write(group, lr)


def set_group_lr(optimizer: Optimizer, group: int, lr: float) -> None:
    """Set the learning rate of param group number ``group`` (0-based) only."""
    groups = _check_optimizer(optimizer).param_groups
    index = operator.index(group)
    if not 0 <= index < len(groups):
        raise OptimError(
            f"param group {index} does not exist: the optimizer has {len(groups)} group(s), "
            f"numbered 0..{len(groups) - 1}"
        )
    _write(groups[index], _check_lr(lr))


def get_lr(optimizer: Optimizer, group: int = 0) -> float:
    """The current learning rate of param group ``group`` as a float."""
    groups = _check_optimizer(optimizer).param_groups
    if not 0 <= group < len(groups):
        raise OptimError(f"param group {group} does not exist (the optimizer has {len(groups)})")
    return float(groups[group]["lr"])


def apply(scheduler: LRSource | Callable[[int], float], optimizer: Optimizer, step: int) -> float:
    """Set ``optimizer``'s learning rate to ``scheduler.lr(step)``; returns that value.

    ``scheduler`` is an object with ``.lr(step)`` or a plain ``step -> lr`` function (as both
    Trainer modes accept). Each group gets ``lr * group.get("lr_scale", 1.0)``. Call it before ``optimizer.step()``::

        for step, batch in enumerate(loader):
            fl.optim.apply(sched, opt, step)
            ...
            opt.step()
    """
    lr = scheduled_lr(scheduler, step)
    write_scheduled_lr(optimizer, lr)
    return lr


def scheduled_lr(scheduler: LRSource | Callable[[int], float], step: int) -> float:
    """``scheduler.lr(step)``, or ``scheduler(step)`` for a plain ``step -> lr`` function.

    >>> import flodl as fl
    >>> fl.optim.lr.scheduled_lr(lambda step: 0.1 / (step + 1), 1)
    0.05
    """
    method = getattr(scheduler, "lr", None)
    if callable(method):
        return float(method(step))
    if callable(scheduler):
        return float(scheduler(step))
    raise OptimError(
        "expected a scheduler with .lr(step) (e.g. fl.optim.CosineScheduler) or a function "
        f"step -> lr, got {type(scheduler).__name__}"
    )


def write_scheduled_lr(optimizer: Optimizer, lr: float) -> None:
    """Set every group of ``optimizer`` to ``lr`` times the group's ``"lr_scale"`` (default 1).

    Every group's value is checked before any is written: a bad ``lr_scale`` in group 1 must not
    leave group 0 already changed."""
    groups = _check_optimizer(optimizer).param_groups
    values = [_group_lr(lr, group, index) for index, group in enumerate(groups)]
    for group, value in zip(groups, values, strict=True):
        _write(group, value)


def _group_lr(lr: float, group: dict[str, Any], index: int) -> float:
    """The learning rate for one group (``lr`` times its ``lr_scale``), checked."""
    if "lr_scale" not in group:
        return _check_lr(lr)
    scale = group["lr_scale"]
    try:
        return _check_lr(lr * scale)
    except (OptimError, TypeError) as exc:
        raise OptimError(
            f"param group {index}: lr {lr} x lr_scale {scale!r} is not a learning rate ({exc}) "
            "— lr_scale must be a number >= 0; no group was changed"
        ) from None


class ScheduledLR(LRScheduler):
    """A torch ``LRScheduler`` whose values come from a flodl scheduler, exactly.

    The optimizer holds ``scheduler.lr(0)`` as soon as this is built; each ``step()`` (called after
    ``optimizer.step()``, as in torch) moves to the next step. Values are the flodl scheduler's own
    floats (times a group's ``"lr_scale"``), not ratios to an initial lr, so nothing drifts.

    >>> import torch, flodl as fl
    >>> opt = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=1.0)
    >>> sched = fl.optim.ScheduledLR(opt, fl.optim.StepDecay(0.1, 2, 0.5))
    >>> lrs = []
    >>> for _ in range(4):
    ...     lrs.append(fl.optim.get_lr(opt))
    ...     opt.step()
    ...     sched.step()
    >>> lrs
    [0.1, 0.1, 0.05, 0.05]
    """

    def __init__(self, optimizer: Optimizer, scheduler: LRSource, last_epoch: int = -1) -> None:
        if not callable(getattr(scheduler, "lr", None)):
            raise OptimError(f"ScheduledLR needs a scheduler with .lr(step), got {scheduler!r}")
        self.scheduler = scheduler
        super().__init__(_check_optimizer(optimizer), last_epoch)

    def get_lr(self) -> list[float]:  # type: ignore[override]
        lr = float(self.scheduler.lr(self.last_epoch))
        return [_group_lr(lr, g, i) for i, g in enumerate(self.optimizer.param_groups)]

    def _get_closed_form_lr(self) -> list[float]:
        return self.get_lr()

    def state_dict(self) -> dict[str, Any]:
        # The step count is the state; the scheduler itself is configuration, rebuilt by the
        # caller. What identifies it is kept, so a resume with another schedule is refused.
        state = super().state_dict()
        state.pop("scheduler", None)
        state["schedule"] = schedule_identity(self.scheduler)
        if hasattr(self.scheduler, "state_dict"):
            state["scheduler_state"] = self.scheduler.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume the step count (and a stateful inner scheduler's state). A state saved while
        following another schedule is an :class:`OptimError`, with nothing changed: the
        learning rate would jump to the other curve."""
        state = dict(state_dict)
        check_same_schedule(state.pop("schedule", None), self.scheduler)
        inner = state.pop("scheduler_state", None)
        if inner is not None and hasattr(self.scheduler, "load_state_dict"):
            self.scheduler.load_state_dict(inner)
        super().load_state_dict(state)


def schedule_identity(scheduler: object) -> str:
    """What identifies a schedule: for flodl's (frozen dataclasses) their repr, which is exact
    (floats round-trip) and the same in every process; for others, the class.

    >>> import flodl as fl
    >>> schedule_identity(fl.optim.StepDecay(0.1, 2, 0.5))
    'StepDecay(base_lr=0.1, step_size=2, gamma=0.5)'
    """
    if dataclasses.is_dataclass(scheduler) and not isinstance(scheduler, type):
        return repr(scheduler)
    return type(scheduler).__qualname__


def check_same_schedule(saved: object, scheduler: object) -> None:
    """Refuse a ScheduledLR state saved while following another schedule (``saved`` is its
    :func:`schedule_identity`; None, from a state saved before it was kept, is accepted)."""
    mine = schedule_identity(scheduler)
    if saved is not None and saved != mine:
        raise OptimError(
            f"the ScheduledLR state was saved following {saved}, but this ScheduledLR follows "
            f"{mine} — build it with the same schedule to resume, or keep the new schedule "
            "and start it from a fresh ScheduledLR (no state loaded)"
        )
