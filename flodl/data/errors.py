"""Errors and warnings raised by :mod:`flodl.data`.

Every error derives from :class:`DataError` (itself a :class:`flodl.FlodlError`), so
``except fl.FlodlError`` catches them; the ones that replace a builtin a caller might already
catch (``ValueError``, ``KeyError``, ``MemoryError``, ``RuntimeError``) also derive from it::

    FlodlError
     └── DataError
          ├── EmptyDatasetError (ValueError)     the dataset has no samples
          ├── BatchSizeError (ValueError)        batch_size missing, not an integer, or < 1
          ├── DatasetShapeError (ValueError)     the dataset's tensors disagree
          ├── LoaderConfigError (ValueError)     an invalid builder setting
          ├── DatasetFormatError (ValueError)    a file not in the format its reader expects
          ├── UnknownFieldError (KeyError)       a Batch asked for a field it does not have
          ├── ResidentMemoryError (MemoryError)  mode("resident") forced, the data does not fit
          └── PrefetchError (RuntimeError)       the prefetch thread stopped without a batch

    UserWarning
     └── ResidentFallbackWarning   mode("auto") ran out of device memory and now streams
"""

from __future__ import annotations

from flodl.errors import FlodlError

__all__ = [
    "BatchSizeError",
    "DataError",
    "DatasetFormatError",
    "DatasetShapeError",
    "EmptyDatasetError",
    "LoaderConfigError",
    "PrefetchError",
    "ResidentFallbackWarning",
    "ResidentMemoryError",
    "UnknownFieldError",
]


class DataError(FlodlError):
    """Base class of every error raised by :mod:`flodl.data`."""


class EmptyDatasetError(DataError, ValueError):
    """The dataset has no samples, so there is nothing to load."""


class BatchSizeError(DataError, ValueError):
    """``batch_size`` is missing, not an integer, or smaller than 1."""


class DatasetShapeError(DataError, ValueError):
    """The dataset's tensors disagree: different lengths, sample structures or trailing shapes."""


class LoaderConfigError(DataError, ValueError):
    """A builder setting is invalid (mode, prefetch depth, seed, names, partition...)."""


class UnknownFieldError(DataError, KeyError):
    """A :class:`~flodl.data.Batch` was asked for a field name it does not have."""

    def __str__(self) -> str:  # KeyError would repr() the message and add quotes
        return str(self.args[0]) if self.args else ""


class DatasetFormatError(DataError, ValueError):
    """A dataset file on disk is not in the format its reader expects (or is truncated)."""


class ResidentMemoryError(DataError, MemoryError):
    """``mode("resident")`` was forced but the dataset does not fit on the device."""


class PrefetchError(DataError, RuntimeError):
    """The streaming prefetch thread stopped without delivering a batch or an error."""


class ResidentFallbackWarning(UserWarning):
    """``mode("auto")`` tried to keep the dataset on the device, ran out of memory, and now streams."""
