"""Training utilities: learning-rate schedulers as pure calculators, optimizer helpers, clipping.

The scheduler formulas are the Rust original's, so a run ported from it follows the same
learning-rate curve (docs/training.md lists every difference from ``torch.optim.lr_scheduler``). ``fl.optim`` is a namespace: use ``fl.optim.CosineScheduler``,
``fl.optim.apply(sched, opt, step)``, ``fl.optim.Adam(...)``.
"""

from flodl.optim.clip import clip_grad_norm, clip_grad_value
from flodl.optim.errors import OptimError
from flodl.optim.factories import SGD, Adam, AdamW, kernel_choice
from flodl.optim.lr import ScheduledLR, apply, get_lr, set_group_lr, set_lr
from flodl.optim.param_groups import param_groups
from flodl.optim.schedulers import (
    CosineScheduler,
    CyclicLR,
    ExponentialLR,
    MultiStepLR,
    OneCycleLR,
    PlateauScheduler,
    Scheduler,
    StepDecay,
    WarmupScheduler,
)

__all__ = [
    "SGD",
    "Adam",
    "AdamW",
    "CosineScheduler",
    "CyclicLR",
    "ExponentialLR",
    "MultiStepLR",
    "OneCycleLR",
    "OptimError",
    "PlateauScheduler",
    "ScheduledLR",
    "Scheduler",
    "StepDecay",
    "WarmupScheduler",
    "apply",
    "clip_grad_norm",
    "clip_grad_value",
    "get_lr",
    "kernel_choice",
    "param_groups",
    "set_group_lr",
    "set_lr",
]
