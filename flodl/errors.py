"""The root of flodl's exception hierarchy, and its errors that belong to no subpackage.

Every exception flodl raises on purpose derives from :class:`FlodlError`, so callers can catch
the library's errors without catching unrelated ones::

    >>> import flodl as fl
    >>> try:
    ...     raise fl.FlodlError("something went wrong — do this instead")
    ... except fl.FlodlError as err:
    ...     print(err)
    something went wrong — do this instead

Each package keeps its exceptions in its own ``errors.py``; this is the whole tree (a builtin in
parentheses is a second base, so code written against plain Python or torch still catches it)::

    Exception
     └── FlodlError                                 flodl.errors
          ├── DeviceError (RuntimeError)            flodl.errors
          ├── CudaGraphError (RuntimeError)         flodl.errors
          ├── RngError (ValueError)                 flodl.errors
          ├── InitError (ValueError)                flodl.nn.errors
          ├── FunctionalError (ValueError)          flodl.nn.errors
          ├── OptimError (ValueError)               flodl.optim.errors
          ├── DataError                             flodl.data.errors
          │    ├── EmptyDatasetError (ValueError)
          │    ├── BatchSizeError (ValueError)
          │    ├── DatasetShapeError (ValueError)
          │    ├── LoaderConfigError (ValueError)
          │    ├── DatasetFormatError (ValueError)
          │    ├── UnknownFieldError (KeyError)
          │    ├── ResidentMemoryError (MemoryError)
          │    └── PrefetchError (RuntimeError)
          ├── CheckpointError                       flodl.checkpoint.errors
          │    ├── RustMappingError
          │    └── HashRefusedError                 (internal: becomes a CheckpointError)
          ├── GraphBuildError                       flodl.graph.errors
          ├── GraphInputError (TypeError)
          ├── GraphStateError (RuntimeError)
          ├── NotBuiltError (TypeError, AttributeError)
          ├── TraceError (KeyError)
          ├── PathError (KeyError)
          ├── UnknownTagError (KeyError)
          ├── GraphPickleError (pickle.PicklingError)
          ├── GraphvizError
          ├── TrainingNotSetUpError (RuntimeError)
          ├── MonitorError                          flodl.monitor.errors
          │    └── MonitorServerError
          ├── HfError                               flodl.hf.errors
          │    ├── HfConfigError (ValueError)
          │    ├── HfHubError (FileNotFoundError)
          │    ├── WeightsError
          │    ├── TokenizerError
          │    └── ConvertError
          ├── TrainerConfigError (ValueError)       flodl.train.errors
          ├── TrainingError
          │    └── CoordinatorGoneError
          ├── CollectiveError (RuntimeError)
          └── CoordinatorLostError (RuntimeError)

    UserWarning
     ├── CheckpointWarning                          flodl.checkpoint.errors
     └── ResidentFallbackWarning                    flodl.data.errors

    SystemExit
     └── SmokeBudgetReached                         flodl.smoke (an exit, not an error)

Renamed classes keep their old name, where it was importable, as a deprecated alias:
``CollectiveFailed`` (``flodl.train.worker``), ``CoordinatorLost`` (``flodl.train.transport``)
and ``Mismatched`` (``flodl.checkpoint.api``) still work and warn with a ``DeprecationWarning``
(``CoordinatorGone`` went with its module, ``flodl.train.runtime``, now ``builder_runtime``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping

__all__ = ["DeviceError", "FlodlError", "RngError"]


class FlodlError(Exception):
    """Base class of every error raised by flodl.

    Messages say what was wrong, where, and what to do about it.
    """


class DeviceError(FlodlError, RuntimeError):
    """A CUDA query was made where no usable CUDA device exists."""


class RngError(FlodlError, ValueError):
    """A seed or a sampling argument was out of range."""


class CudaGraphError(FlodlError, RuntimeError):
    """A CUDA graph cannot be captured or replayed as asked (no GPU, a CPU tensor, a shape change,
    an optimizer that is not capturable)."""


def _renamed(module: str, renamed: Mapping[str, type[BaseException]]) -> Callable[[str], type]:
    """A module ``__getattr__`` that answers each old name in ``renamed`` with the class it is
    now, warning with a ``DeprecationWarning`` so callers move to the new name.

    Used by flodl's own modules (``__getattr__ = _renamed(__name__, {"Old": NewError})``); any
    other missing name is an ``AttributeError`` as usual.
    """

    def __getattr__(name: str) -> type:
        new = renamed.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} is deprecated: it is now {new.__module__}.{new.__qualname__}",
            DeprecationWarning,
            stacklevel=2,
        )
        return new

    return __getattr__
