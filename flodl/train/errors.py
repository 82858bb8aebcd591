"""Errors raised by the training runtime."""

from __future__ import annotations

from flodl.errors import FlodlError


class TrainerConfigError(FlodlError, ValueError):
    """A Trainer, El Che or coordinator setting is out of range or inconsistent."""
