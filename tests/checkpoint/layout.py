"""An independent writer of the Rust original's byte layout, and small models for the tests.

``original_bytes`` writes the original's byte layout (described under "The .fdl format" in
docs/checkpoints.md) directly with ``struct``, sharing no code with flodl, so the fixture files
it produced pin the format from outside.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import torch
import xxhash
from torch import nn

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ORIGINAL_TAGS = {
    torch.float16: 1,
    torch.bfloat16: 2,
    torch.float32: 3,
    torch.float64: 4,
    torch.int32: 5,
    torch.int64: 6,
}


def original_bytes(entries, version: int = 2, digest: bytes = bytes(32)) -> bytes:
    """The bytes the Rust original writes for ``entries`` [(name, tensor)] (no trailer)."""
    out = bytearray(b"FDLC" + struct.pack("<I", version) + digest + struct.pack("<I", len(entries)))
    for name, tensor in entries:
        raw_name = name.encode()
        t = tensor.detach().cpu().contiguous()
        payload = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        out += struct.pack("<I", len(raw_name)) + raw_name
        out += struct.pack("<I", t.dim()) + struct.pack(f"<{t.dim()}q", *t.shape)
        out += struct.pack("<BQ", ORIGINAL_TAGS[t.dtype], len(payload)) + payload
    return bytes(out)


def entry(
    name: str | bytes, shape: tuple[int, ...], tag: int, payload: bytes, declared: int | None = None
) -> bytes:
    """One raw entry, for hand-built (possibly hostile) files."""
    raw = name if isinstance(name, bytes) else name.encode()
    return (
        struct.pack("<I", len(raw))
        + raw
        + struct.pack("<I", len(shape))
        + struct.pack(f"<{len(shape)}q", *shape)
        + struct.pack("<BQ", tag, len(payload) if declared is None else declared)
        + payload
    )


def header(count: int, version: int = 2, digest: bytes = bytes(32)) -> bytes:
    return b"FDLC" + struct.pack("<I", version) + digest + struct.pack("<I", count)


def checksummed(entries: list[bytes], version: int = 2) -> bytes:
    """A complete file with flodl's integrity trailer (docs/checkpoints.md) around raw entries,
    so hostile entries get past checksum verification and reach the parser's own checks."""
    head = header(len(entries), version)
    digests = [xxhash.xxh3_64_intdigest(e) for e in entries]
    trailer = (
        b"FDLS"
        + struct.pack("<IIQ", 1, len(entries), xxhash.xxh3_64_intdigest(head))
        + struct.pack(f"<{len(entries)}Q", *digests)
        + struct.pack("<Q", len(head) + sum(map(len, entries)))
    )
    return head + b"".join(entries) + trailer + struct.pack("<Q", xxhash.xxh3_64_intdigest(trailer))


class Tiny(nn.Module):
    """A small model with a parameter, a buffer and a nested child."""

    def __init__(self, hidden: int = 4):
        super().__init__()
        self.encoder = nn.Linear(3, hidden)
        self.norm = nn.BatchNorm1d(hidden)
        self.head = nn.Linear(hidden, 2)


def hash_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def fixture_entries():
    """v1-era names (auto node ids) and every original dtype, with values tests can recompute."""
    return [
        ("linear_0/weight", torch.arange(12, dtype=torch.float32).reshape(3, 4) / 4),
        ("linear_0/bias", torch.tensor([-1.5, 0.0, 2.25], dtype=torch.float64)),
        ("embed_1/weight", torch.arange(6, dtype=torch.float16).reshape(2, 3)),
        ("gate_2/scale", torch.tensor(0.5, dtype=torch.bfloat16)),
        ("counter_3/count", torch.tensor([7, -8], dtype=torch.int32)),
        ("counter_3/steps", torch.tensor([1 << 40], dtype=torch.int64)),
        ("empty_4/weight", torch.zeros(0, 5)),
    ]
