"""The ``.fdl`` byte layout: magic, header, entries, dtype tags and flodl's integrity trailer.

Every integer is little-endian. The header and entry layout are the Rust original's v1/v2
(identical bytes; only the naming of entries changed between them). Files written with
``checksum=True`` (the default) carry a trailer *after* the last entry, which the original's
reader never looks at, so they stay readable by it. See docs/checkpoints.md for the full spec.
"""

from __future__ import annotations

import struct

import torch

MAGIC = b"FDLC"
SUPPORTED_VERSIONS = (1, 2)
WRITE_VERSION = 2
HASH_BYTES = 32
ZERO_HASH = bytes(HASH_BYTES)

HEADER = struct.Struct("<4sI32sI")  # magic, version, structural hash, entry count
U8 = struct.Struct("<B")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
DTYPE_AND_BYTES = struct.Struct("<BQ")

# The smallest possible entry: empty name, 0-d shape, tag and byte count, no payload.
MIN_ENTRY_BYTES = U32.size + U32.size + DTYPE_AND_BYTES.size

# Sanity limits on lengths read from a file (on top of the remaining-bytes bound).
MAX_NAME_BYTES = 64 * 1024
MAX_NDIM = 64
# torch sizes are int64: a shape whose element count does not fit cannot even describe an empty
# tensor (torch raises "numel: integer multiplication overflow" from reshape).
MAX_NUMEL = (1 << 63) - 1

TRAILER_MAGIC = b"FDLS"
TRAILER_VERSION = 1
TRAILER_HEAD = struct.Struct("<4sIIQ")  # magic, trailer version, entry count, header digest
TRAILER_TAIL = struct.Struct("<QQ")  # body length (offset of the trailer), trailer digest
DIGEST_BYTES = 8  # trailer version 1: XXH3-64 (seed 0) of the covered bytes

# Tags 1-6 are the Rust flodl's too, so a file using only them stays readable by it; 7-10 are
# flodl additions it cannot read.
DTYPE_TAGS: dict[int, torch.dtype] = {
    1: torch.float16,
    2: torch.bfloat16,
    3: torch.float32,
    4: torch.float64,
    5: torch.int32,
    6: torch.int64,
    7: torch.bool,
    8: torch.uint8,
    9: torch.int8,
    10: torch.int16,
}
TAG_OF_DTYPE: dict[torch.dtype, int] = {dtype: tag for tag, dtype in DTYPE_TAGS.items()}
ORIGINAL_TAGS = frozenset(range(1, 7))


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


ELEMENT_SIZE: dict[int, int] = {tag: element_size(dtype) for tag, dtype in DTYPE_TAGS.items()}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def shape_str(shape: tuple[int, ...] | list[int]) -> str:
    """``[4, 8]`` — Python's list repr, the notation error messages use for shapes."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def encode_hash(structural_hash: str | bytes | None) -> bytes:
    """The 32 raw bytes stored in the header for a 64-hex-character hash (or bytes, or None)."""
    from flodl.checkpoint.errors import CheckpointError

    if structural_hash is None:
        return ZERO_HASH
    if isinstance(structural_hash, bytes | bytearray):
        if len(structural_hash) != HASH_BYTES:
            raise CheckpointError(
                f"structural hash must be {HASH_BYTES} bytes, got {len(structural_hash)}"
            )
        return bytes(structural_hash)
    text = str(structural_hash).strip()
    if len(text) != 2 * HASH_BYTES:
        raise CheckpointError(
            f"expected 64 hex chars, got {len(text)} — a structural hash is a SHA-256 hex digest"
        )
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise CheckpointError(
            f"invalid hex in structural hash {text!r} — a structural hash is a SHA-256 hex digest"
        ) from None
