"""Errors raised by :mod:`flodl.nn`; each is also a ``ValueError``, what torch raises for bad
arguments, so code written for torch still catches it::

    FlodlError
     ├── InitError (ValueError)         an initialiser got a shape or fan it cannot use
     └── FunctionalError (ValueError)   a functional got inputs of the wrong shape or type
"""

from __future__ import annotations

from flodl.errors import FlodlError

__all__ = ["FunctionalError", "InitError"]


class InitError(FlodlError, ValueError):
    """An initialiser got a shape or fan it cannot use."""


class FunctionalError(FlodlError, ValueError):
    """A functional was called with inputs of the wrong shape or type."""
