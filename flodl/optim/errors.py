"""The error raised for invalid optimizer and scheduler settings."""

from __future__ import annotations

from flodl.errors import FlodlError


class OptimError(FlodlError, ValueError):
    """A scheduler, optimizer or clipping helper was given settings it cannot use.

    It is also a :class:`ValueError`, so code written for torch's argument checks still catches it.
    """
