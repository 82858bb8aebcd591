"""Graph mode training methods: ``model.step()``, ``model.epoch(e)`` and friends.

``fl.Trainer.setup(model, ...)`` attaches a training session to a :class:`~flodl.graph.Graph`;
these methods delegate to it. The graph layer does not import ``flodl.train``: a session is any
object with the :class:`TrainingSession` methods, kept in a weak side table (not in the module's
``__dict__``), so a ``deepcopy``, a pickle or a checkpoint of the graph never carries optimizer or
process-group state, and a copy starts out not set up.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Protocol

import torch

from flodl.graph.errors import TrainingNotSetUpError

if TYPE_CHECKING:
    from torch import nn

_SESSIONS: weakref.WeakKeyDictionary[Any, TrainingSession] = weakref.WeakKeyDictionary()


class TrainingSession(Protocol):
    """What ``fl.Trainer.setup`` attaches to a graph (implemented in ``flodl.train.graph_mode``)."""

    training_step: int
    rank: int
    world_size: int
    is_distributed: bool
    device: torch.device

    @property
    def optimizer(self) -> torch.optim.Optimizer | None: ...
    @property
    def el_che(self) -> Any: ...
    @property
    def chunk_ratios(self) -> list[float]: ...
    @property
    def throughput(self) -> list[float]: ...

    def step(self, graph: nn.Module) -> None: ...
    def set_scheduler(self, scheduler: Any, lr_scale: float | None) -> None: ...
    def set_lr(self, lr: float) -> None: ...
    def set_data_loader(self, graph: nn.Module, loader: Any) -> None: ...
    def epoch(self, epoch: int) -> Any: ...
    def epochs(
        self, graph: nn.Module, num_epochs: int, checkpoint_every: int | None, directory: str
    ) -> Any: ...
    def finish(self) -> None: ...


def attach(graph: nn.Module, session: TrainingSession) -> None:
    """Make ``session`` the one behind ``graph.step()`` etc. (replaces a previous one)."""
    _SESSIONS[graph] = session


def session_of(graph: nn.Module) -> TrainingSession | None:
    return _SESSIONS.get(graph)


class TrainingMethods:
    """Mixed into :class:`~flodl.graph.Graph`: "your loop, then ``model.step()``".

    >>> import torch, flodl as fl
    >>> from torch import nn
    >>> model = fl.FlowBuilder(nn.Linear(2, 1)).build()
    >>> model.is_distributed, model.world_size, model.training_step
    (False, 1, 0)
    """

    def _session(self, what: str) -> TrainingSession:
        session = _SESSIONS.get(self)
        if session is None:
            raise TrainingNotSetUpError(
                f"Graph.{what}: this graph has no training session — call "
                "fl.Trainer.setup(model, replica_factory, optim_factory) first (it creates the "
                "optimizer and, under torchrun, joins the process group)"
            )
        return session

    def _attached(self, name: str, default: Any) -> Any:
        session = _SESSIONS.get(self)
        return default if session is None else getattr(session, name)

    def step(self) -> None:
        """After ``loss.backward()``: average gradients across ranks (when distributed), sync
        buffers from rank 0, set the scheduler's LR, ``optimizer.step()``, ``zero_grad()``, and
        count the step in :attr:`training_step`."""
        self._session("step()").step(self)  # type: ignore[arg-type]

    def set_scheduler(self, scheduler: Any, lr_scale: float | None = None) -> None:
        """Drive the LR from ``scheduler.lr(training_step)`` (× ``lr_scale``) at every step."""
        self._session("set_scheduler()").set_scheduler(scheduler, lr_scale)

    def set_lr(self, lr: float) -> None:
        """Set every param group's LR now (an attached scheduler overrides it at the next step)."""
        self._session("set_lr()").set_lr(lr)

    def set_data_loader(self, loader: Any) -> None:
        """Attach an ``fl.data`` DataLoader (or its builder) for :meth:`epoch`; partitioned per rank."""
        self._session("set_data_loader()").set_data_loader(self, loader)  # type: ignore[arg-type]

    def epoch(self, epoch: int) -> Any:
        """The batches of ``epoch`` for this rank: its shard of the attached loader."""
        return self._session("epoch()").epoch(epoch)

    def epochs(
        self,
        num_epochs: int,
        *,
        checkpoint_every: int | None = None,
        directory: str = "checkpoints",
    ) -> Any:
        """The epochs to train, ``for epoch in model.epochs(n): for batch in model.epoch(epoch)``.

        ``checkpoint_every=k``: rank 0 saves ``<directory>/checkpoint-<epochs done>.fdl`` after
        every ``k``-th epoch's loop body. Under ``torchrun --max-restarts`` it also saves the
        optimizer state and training step, and a restarted job starts from the next epoch of
        the newest checkpoint, its model and optimizer restored on every rank; restarted at
        another world size (an elastic job that lost a node), the training step is rescaled to
        the new world's steps per epoch (``len`` of the loader set before this call)."""
        return self._session("epochs()").epochs(
            self,  # type: ignore[arg-type]
            num_epochs,
            checkpoint_every,
            directory,
        )

    def finish(self) -> None:
        """After the loop: wait for this process's background checkpoint saves (raising the
        first failure, as ``fl.checkpoint.flush()``), then for every rank, and release the
        process group setup joined. Training methods that talk to other ranks stop working."""
        self._session("finish()").finish()

    def _checkpoint_tags(self) -> dict[str, Any]:
        """Labels for this graph's checkpoint saves: its ``step`` once set up for training."""
        session = _SESSIONS.get(self)
        return {} if session is None else {"step": session.training_step}

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        return self._attached("optimizer", None)

    @property
    def training_step(self) -> int:
        """Calls of :meth:`step` so far (0 before setup)."""
        return self._attached("training_step", 0)

    @property
    def rank(self) -> int:
        """This process's rank (0 when not distributed)."""
        return self._attached("rank", 0)

    @property
    def world_size(self) -> int:
        """Ranks training this model (1 when not distributed)."""
        return self._attached("world_size", 1)

    @property
    def is_distributed(self) -> bool:
        return self._attached("is_distributed", False)

    @property
    def device(self) -> torch.device:
        """The training device (after setup), else where the first parameter lives (CPU if none)."""
        session = _SESSIONS.get(self)
        if session is not None:
            return session.device
        first = next(self.parameters(), None)  # type: ignore[attr-defined]
        return first.device if first is not None else torch.device("cpu")

    @property
    def has_el_che(self) -> bool:
        """Whether ranks run El Che's per-rank batch counts (see ``fl.DdpConfig``)."""
        return self._attached("el_che", None) is not None

    @property
    def el_che(self) -> Any:
        """The El Che state (``batch_counts``, ``anchor``) while it runs, else None."""
        return self._attached("el_che", None)

    @property
    def chunk_ratios(self) -> list[float]:
        """Each rank's share of a batch in lockstep: the auto-balancer's current ratios (mixed
        devices, ``fl.DdpConfig(max_anchor=0)``), else equal shares (``[1.0]`` alone)."""
        return self._attached("chunk_ratios", [1.0])

    @property
    def throughput(self) -> list[float]:
        """Each rank's measured samples per ms as of the auto-balancer's last rebalance."""
        return self._attached("throughput", [0.0])
