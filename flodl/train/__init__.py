"""The Trainer: one training loop on CPU, one GPU, N heterogeneous GPUs (El Che) and N machines.

Its design decisions, and where it differs from the Rust flodl's training, are in docs/ddp.md.
"""

from flodl.train.config import ElCheConfig
from flodl.train.el_che import ElChe
from flodl.train.errors import TrainerConfigError
from flodl.train.graph_el_che import DdpConfig
from flodl.train.graph_mode import GraphSession
from flodl.train.messages import ApplyPolicy, AverageBackend
from flodl.train.metrics import EpochMetrics
from flodl.train.step_context import current as current  # fl.train.current(): not top level
from flodl.train.step_context import record_scalar as record_scalar
from flodl.train.trained_state import TrainedState, TrainingError
from flodl.train.trainer import Trainer, TrainerBuilder, TrainingHandle

__all__ = [
    "ApplyPolicy",
    "AverageBackend",
    "DdpConfig",
    "ElChe",
    "ElCheConfig",
    "EpochMetrics",
    "GraphSession",
    "TrainedState",
    "Trainer",
    "TrainerBuilder",
    "TrainerConfigError",
    "TrainingError",
    "TrainingHandle",
]
