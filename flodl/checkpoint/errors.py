"""The one exception the checkpoint subsystem raises on purpose."""

from __future__ import annotations

from flodl.errors import FlodlError


class CheckpointError(FlodlError):
    """A checkpoint could not be read, written or applied.

    ``source`` names the file (or ``<stream>``) and ``offset`` the byte position where the
    problem was found, when that is known. The message always says what to do next.

    >>> import io, flodl as fl
    >>> try:
    ...     fl.checkpoint_version(io.BytesIO(b"JUNK" + bytes(40)))
    ... except fl.CheckpointError as err:
    ...     print(err.offset)
    0
    """

    def __init__(self, message: str, *, source: str | None = None, offset: int | None = None):
        self.source = source
        self.offset = offset
        where = []
        if source is not None:
            where.append(source)
        if offset is not None:
            where.append(f"offset {offset}")
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(prefix + message)


class CheckpointWarning(UserWarning):
    """A checkpoint was written in a way another reader may not expect (see the message)."""
