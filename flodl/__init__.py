"""flodl — describe networks, don't assemble them.

A framework on top of PyTorch: declarative graphs (``FlowBuilder``), graph trees addressed by
label paths, observation and trends, a training monitor with a live dashboard, a safe checkpoint
format, and a Trainer that runs one training loop on CPU, one GPU, many GPUs and many machines.

Usage::

    import flodl as fl

Each subsystem lives in its own subpackage (see docs/index.md); the names a user reaches for
every day are re-exported here through each subpackage's ``__all__``.
"""

from flodl import checkpoint, data, device, graph, log, monitor, nn, optim, random, train
from flodl._version import __version__
from flodl.checkpoint import *  # noqa: F403  (re-export: each subpackage's __all__ is its public face)
from flodl.device import *  # noqa: F403
from flodl.errors import FlodlError
from flodl.graph import *  # noqa: F403
from flodl.log import set_verbosity, verbosity
from flodl.monitor import *  # noqa: F403
from flodl.random import *  # noqa: F403
from flodl.smoke import smoke_enabled
from flodl.train import *  # noqa: F403

__all__ = [
    "FlodlError",
    "__version__",
    "checkpoint",
    "data",
    "device",
    "graph",
    "log",
    "monitor",
    "nn",
    "optim",
    "random",
    "set_verbosity",
    "smoke_enabled",
    "train",
    "verbosity",
    *checkpoint.__all__,
    *device.__all__,
    *graph.__all__,
    *monitor.__all__,
    *random.__all__,
    *train.__all__,
]

log.configure_from_env()  # FLODL_VERBOSITY (set by ``fdl -q/-v/-vv/-vvv``)
