"""Errors the monitor raises::

FlodlError
 └── MonitorError            a monitor call got something it cannot use
      └── MonitorServerError  the dashboard could not start (port in use, bad host)
"""

from __future__ import annotations

from flodl.errors import FlodlError

__all__ = ["MonitorError", "MonitorServerError"]


class MonitorError(FlodlError):
    """A monitor call got something it cannot use (bad epoch, metric or value)."""


class MonitorServerError(MonitorError):
    """The dashboard could not start (port in use, bad host)."""
