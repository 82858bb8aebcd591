"""Everything a rank needs to train, in one picklable object (sent to spawned processes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flodl.data.loader import smoke_cap
from flodl.smoke import SMOKE_EPOCHS
from flodl.train.config import TIMEOUT, ElCheConfig
from flodl.train.messages import ApplyPolicy, AverageBackend


@dataclass
class TrainSpec:
    model_factory: Callable[[Any], Any]
    optim_factory: Callable[[Any], Any]
    train_step: Callable[[Any, Any], Any]  # (model, fl.data.Batch) -> loss
    dataset: Any = None
    batch_size: int | None = None
    num_epochs: int | None = None
    policy: ApplyPolicy = ApplyPolicy.CADENCE
    backend: AverageBackend = AverageBackend.NCCL
    devices: list[str] | None = None
    seed: int = 42
    el_che: ElCheConfig = field(default_factory=ElCheConfig)  # anchor, max_anchor, ...
    divergence_threshold: float = 0.05
    divergence_guard: bool = True
    max_overshoot: int | None = None
    progressive: bool | None = None
    partition_ratios: list[float] | None = None
    checkpoint_every: int | None = None
    checkpoint_fn: Callable[[int, Any], None] | None = None
    epoch_fn: Callable[[int, Any], None] | None = None
    scheduler_factory: Callable[[int], Any] | None = None
    lr_scale_ratio: float = 0.0
    max_grad_norm: float | None = None
    snapshot_timeout: float = 5.0  # CPU averaging: how long to wait for every snapshot
    timeout: float = TIMEOUT  # process-group and no-progress timeout, seconds
    threads_per_rank: int | None = None
    monitor_resources: bool = False  # ranks sample their resources for the monitor
    timeline_events: bool = False  # ranks forward timeline events (a Timeline runs in the caller)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def smoke(self) -> bool:
        """``FLODL_SMOKE=1`` (as ``fdl check`` sets): prove the script runs, fast."""
        return smoke_cap() is not None

    def epochs(self) -> int:
        """Epochs to run: at most :data:`SMOKE_EPOCHS` under ``FLODL_SMOKE``."""
        assert self.num_epochs is not None
        return min(self.num_epochs, SMOKE_EPOCHS) if self.smoke else self.num_epochs

    def max_batches(self) -> int | None:
        """Batches per epoch *per rank*: at most ``fl.data.SMOKE_BATCHES`` under ``FLODL_SMOKE``."""
        return smoke_cap()

    @property
    def dataset_is_factory(self) -> bool:
        """A callable that is not itself a dataset: each process calls it to build its copy."""
        data = self.dataset
        return (
            callable(data) and not hasattr(data, "__getitem__") and not hasattr(data, "get_batch")
        )

    def resolve_dataset(self) -> Any:
        """The dataset, building it if a factory was given."""
        return self.dataset() if self.dataset_is_factory else self.dataset
