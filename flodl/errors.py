"""The root of flodl's exception hierarchy.

Every exception flodl raises on purpose derives from :class:`FlodlError`, so callers can catch
the library's errors without catching unrelated ones::

    >>> import flodl as fl
    >>> try:
    ...     raise fl.FlodlError("something went wrong — do this instead")
    ... except fl.FlodlError as err:
    ...     print(err)
    something went wrong — do this instead
"""

from __future__ import annotations


class FlodlError(Exception):
    """Base class of every error raised by flodl.

    Messages say what was wrong, where, and what to do about it.
    """
