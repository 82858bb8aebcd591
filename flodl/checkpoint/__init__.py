"""The safe ``.fdl`` checkpoint format: no pickle, bounded parsing, atomic writes, partial loads.

Format spec and examples: docs/checkpoints.md. Names listed in
``__all__`` are re-exported as ``flodl.<name>``. ``flodl.checkpoint.methods.CheckpointMethods``
is the mixin that gives ``fl.Graph`` its checkpoint methods. Background saves:
``fl.checkpoint.CpuWorker``, ``fl.checkpoint.ModelSnapshot`` and ``fl.checkpoint.flush()``.
"""

from flodl.checkpoint.api import (
    CheckpointInfo,
    LoadReport,
    Mismatch,
    checkpoint_info,
    checkpoint_keys,
    checkpoint_version,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from flodl.checkpoint.background import CpuWorker as CpuWorker
from flodl.checkpoint.background import ModelSnapshot as ModelSnapshot
from flodl.checkpoint.background import flush as flush
from flodl.checkpoint.errors import CheckpointError, CheckpointWarning
from flodl.checkpoint.interop import fdl_to_safetensors, safetensors_to_fdl
from flodl.checkpoint.methods import CheckpointMethods as CheckpointMethods
from flodl.checkpoint.migrate import MigrateReport, migrate_checkpoint_file
from flodl.checkpoint.optimizer import load_optimizer_state, save_optimizer_state
from flodl.checkpoint.rust_graph import RustMappingError
from flodl.checkpoint.sidecar import read_source_config, sidecar_config_path
from flodl.checkpoint.training import TrainingState, load_training_state, save_training_state

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointWarning",
    "LoadReport",
    "MigrateReport",
    "Mismatch",
    "RustMappingError",
    "TrainingState",
    "checkpoint_info",
    "checkpoint_keys",
    "checkpoint_version",
    "fdl_to_safetensors",
    "load_checkpoint",
    "load_optimizer_state",
    "load_training_state",
    "migrate_checkpoint_file",
    "read_checkpoint",
    "read_source_config",
    "safetensors_to_fdl",
    "save_checkpoint",
    "save_optimizer_state",
    "save_training_state",
    "sidecar_config_path",
]
