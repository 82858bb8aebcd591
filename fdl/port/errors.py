"""Errors of ``fdl port``::

FdlError
 ├── PortError         ``fdl port`` cannot go on: a user error shown without a traceback;
 │                     nothing is written
 └── UnsupportedError  the traced forward uses something the translation cannot write as
      │                builder calls; ``fdl port`` keeps that model as one opaque step
      ├── ModeUnsupportedError  an operation run in one mode only cannot be written by
      │                         mode; ``fdl port`` keeps the module running it whole instead
      └── ShapesDisagreeError   internal: example inputs of different shapes decide a test
                                on shapes differently; the module deciding it is kept whole
"""

from __future__ import annotations

from typing import Any

from fdl.errors import FdlError

__all__ = ["ModeUnsupportedError", "PortError", "ShapesDisagreeError", "UnsupportedError"]


class PortError(FdlError):
    """``fdl port`` cannot go on: a user error, shown without a traceback; nothing is written."""


class UnsupportedError(FdlError):
    """The traced forward uses something the translation cannot write as builder calls."""


class ModeUnsupportedError(UnsupportedError):
    """An operation the forward runs in one mode only cannot be written out by mode (a call
    returning a tuple): ``node`` is that operation, whose module is kept whole instead."""

    def __init__(self, message: str, node: Any) -> None:
        super().__init__(message)
        self.node = node


class ShapesDisagreeError(UnsupportedError):
    """Example inputs of different shapes decide a test on shapes differently (a branch, or a
    split's number of pieces): one port follows one decision, so the module deciding it is kept
    whole (its forward runs as written for every shape). Internal: the tracer keeps the module
    whole and the report names this class with the reason."""
