"""The exceptions and the warning of the checkpoint subsystem::

FlodlError
 └── CheckpointError        a checkpoint could not be read, written or applied
      ├── RustMappingError  a graph step has no counterpart in the Rust checkpoint layout
      └── HashRefusedError  internal: the header's structural hash was refused; the loader
                            turns it into a CheckpointError that explains the mismatch

UserWarning
 └── CheckpointWarning      a checkpoint written in a way another reader may not expect
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flodl.errors import FlodlError

if TYPE_CHECKING:
    from flodl.checkpoint.codec import Header

__all__ = ["CheckpointError", "CheckpointWarning", "RustMappingError"]


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


class RustMappingError(CheckpointError):
    """A graph step has no counterpart in the Rust original (the message names the node)."""


class HashRefusedError(CheckpointError):
    """Internal: the header's hash was refused; the entry names are read to explain why.

    Raised from a header callback and caught by the loader that installed it, which raises a
    :class:`CheckpointError` naming the mismatch instead; it never reaches the caller.
    """

    def __init__(self, header: Header):
        super().__init__("the checkpoint's structural hash does not match the model")
        self.header = header
