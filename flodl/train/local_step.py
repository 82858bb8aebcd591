"""The local optimizer step every training path runs: one device, Builder ranks and Graph mode.

One rule for learning rates, wherever the loop runs:

- With a scheduler (an object with ``.lr(step)`` or a plain ``step -> lr`` function), optimizer
  step ``k`` (0-based) of param group ``g`` trains at
  ``scheduler.lr(k) × lr_scale × g.get("lr_scale", 1)``, exactly what ``fl.optim.apply`` sets.
- Without a scheduler, every group keeps the rate the optimizer was built with, times
  ``lr_scale``; a group's ``"lr_scale"`` entry scales only what a scheduler (or ``set_lr``) sets,
  as with ``fl.optim.apply``.

``lr_scale`` is the run's multiplier: ``Trainer.setup(..., lr_scale=...)`` in Graph mode, and
``1 + (world - 1) × lr_scale_ratio`` in Builder mode.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from flodl.optim.lr import scheduled_lr, write_scheduled_lr
from flodl.train.errors import TrainerConfigError


def check_scheduler(scheduler: Any, where: str) -> Any:
    """``scheduler`` if it is None, has ``.lr(step)`` or is a ``step -> lr`` function."""
    if scheduler is None or callable(getattr(scheduler, "lr", None)) or callable(scheduler):
        return scheduler
    raise TrainerConfigError(
        f"{where}: expected an object with .lr(step) (e.g. fl.optim.CosineScheduler) or a "
        f"function step -> lr, got {type(scheduler).__name__}"
    )


def check_lr_scale(lr_scale: Any) -> float:
    real = isinstance(lr_scale, numbers.Real) and not isinstance(lr_scale, bool)
    value = float(lr_scale) if real else float("nan")
    if not 0 < value < float("inf"):
        raise TrainerConfigError(f"lr_scale must be a finite number > 0, got {lr_scale!r}")
    return value


class LocalStep:
    """Backward, clip, learning rate, optimizer step and zero-grad of one replica.

    >>> import torch
    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = torch.optim.SGD([{"params": [w], "lr_scale": 0.1}], lr=1.0)
    >>> step = LocalStep(opt, scheduler=lambda k: 0.5, lr_scale=2.0)
    >>> step.run([w], step=0, loss=(w * 3).sum())
    True
    >>> round(opt.param_groups[0]["lr"], 6), round(float(w.detach()), 6)  # 0.5 x 2 x 0.1, 1 - 0.1 x 3
    (0.1, 0.7)
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer | None,
        *,
        scheduler: Any = None,
        lr_scale: float = 1.0,
        max_grad_norm: float | None = None,
    ) -> None:
        self.optimizer = optimizer
        self.max_grad_norm = max_grad_norm
        self.scheduler: Any = None
        self.lr_scale = 1.0
        self._prepared: int | None = None  # the step whose rates are in the optimizer
        self.configure(scheduler, lr_scale)

    def configure(self, scheduler: Any, lr_scale: float | None) -> None:
        """Set the scheduler (None: none) and, unless None, the run's ``lr_scale``.

        Without a scheduler a new ``lr_scale`` rescales the groups' current rates at once."""
        self.scheduler = check_scheduler(scheduler, "scheduler")
        self._prepared = None
        if lr_scale is None:
            return
        scale = check_lr_scale(lr_scale)
        if self.scheduler is None and self.optimizer is not None and scale != self.lr_scale:
            ratio = scale / self.lr_scale
            for group in self.optimizer.param_groups:
                _write(group, float(group["lr"]) * ratio)
        self.lr_scale = scale

    def lr(self, step: int) -> float:
        """The base rate of optimizer step ``step`` (group 0's, before its ``lr_scale``)."""
        if self.scheduler is not None:
            return scheduled_lr(self.scheduler, step) * self.lr_scale
        if self.optimizer is None:
            return 0.0
        return float(self.optimizer.param_groups[0]["lr"])

    def set_lr(self, lr: float) -> None:
        """Set every group to ``lr`` × its ``"lr_scale"`` (as ``fl.optim.apply`` would)."""
        if self.optimizer is not None:
            write_scheduled_lr(self.optimizer, lr)

    def prepare(self, step: int) -> float:
        """Write step ``step``'s rates into the optimizer (before the forward pass, so the
        training context can show them); returns group 0's rate."""
        if self.optimizer is None:
            return 0.0
        if self.scheduler is not None:
            self.set_lr(self.lr(step))
        self._prepared = step
        return float(self.optimizer.param_groups[0]["lr"])

    def run(
        self,
        params: Iterable[nn.Parameter],
        *,
        step: int,
        loss: torch.Tensor | None = None,
    ) -> bool:
        """``loss.backward()`` (when given), clip, rates of step ``step``, ``optimizer.step()``,
        ``zero_grad``. Returns whether the optimizer stepped (False without an optimizer: the
        gradients are clipped and left in place)."""
        if loss is not None:
            loss.backward()
        if self.max_grad_norm is not None:
            nn.utils.clip_grad_norm_([p for p in params if p.requires_grad], self.max_grad_norm)
        if self.optimizer is None:
            return False
        if self._prepared != step:  # each step queries the scheduler once
            self.prepare(step)
        self._prepared = None
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return True


def _write(group: dict[str, Any], lr: float) -> None:
    if isinstance(group["lr"], torch.Tensor):
        group["lr"].fill_(lr)
    else:
        group["lr"] = lr
