"""Errors of ``fdl port``::

FdlError
 ├── PortError         ``fdl port`` cannot go on: a user error shown without a traceback;
 │                     nothing is written
 └── UnsupportedError  the traced forward uses something the translation cannot write as
                       builder calls; ``fdl port`` keeps that model as one opaque step
"""

from __future__ import annotations

from fdl.errors import FdlError

__all__ = ["PortError", "UnsupportedError"]


class PortError(FdlError):
    """``fdl port`` cannot go on: a user error, shown without a traceback; nothing is written."""


class UnsupportedError(FdlError):
    """The traced forward uses something the translation cannot write as builder calls."""
