"""Errors raised by :mod:`flodl.hf`; all derive from :class:`HfError`, a :class:`flodl.FlodlError`::

FlodlError
 └── HfError
      ├── HfConfigError (ValueError)        config.json missing, unreadable or unsupported
      ├── HfHubError (FileNotFoundError)    a model id or directory that resolves to no files
      ├── WeightsError                      a checkpoint that does not fit the graph
      ├── TokenizerError                    a task needs a tokenizer the model lacks
      └── ConvertError                      a pytorch_model.bin that cannot be converted
"""

from __future__ import annotations

from flodl.errors import FlodlError

__all__ = [
    "ConvertError",
    "HfConfigError",
    "HfError",
    "HfHubError",
    "TokenizerError",
    "WeightsError",
]


class HfError(FlodlError):
    """Base class of every error raised by ``flodl.hf``."""


class HfConfigError(HfError, ValueError):
    """``config.json`` is missing, unreadable, or describes something ``flodl.hf`` cannot build."""


class HfHubError(HfError, FileNotFoundError):
    """A model id or directory could not be resolved to local files (offline, not cached...)."""


class WeightsError(HfError):
    """A checkpoint does not fit the graph: missing keys or shape mismatches. Nothing was loaded."""

    def __init__(self, message: str, *, missing: list[str], mismatched: list[str]) -> None:
        super().__init__(message)
        self.missing = missing
        self.mismatched = mismatched


class TokenizerError(HfError):
    """A task needs a tokenizer (``tokenizer.json``) the model was loaded without."""


class ConvertError(HfError):
    """A ``pytorch_model.bin`` that cannot be converted (not a state dict, or unsafe)."""
