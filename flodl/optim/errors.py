"""The error raised for invalid optimizer and scheduler settings::

FlodlError
 └── OptimError (ValueError)   a scheduler, optimizer or clipping helper got bad settings
"""

from __future__ import annotations

from flodl.errors import FlodlError

__all__ = ["OptimError"]


class OptimError(FlodlError, ValueError):
    """A scheduler, optimizer or clipping helper was given settings it cannot use.

    It is also a :class:`ValueError`, so code written for torch's argument checks still catches it.
    """
