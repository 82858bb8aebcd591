"""TensorBoard event files written directly: no tensorboard, protobuf or TensorFlow needed to write.

An event file is a sequence of TFRecords (``length``, masked CRC-32C of the length, the bytes, their
masked CRC-32C); each record is a serialized ``tensorflow.Event`` protobuf. Only the handful of
fields scalars need are encoded here: ``wall_time`` (1, double), ``step`` (2, int64),
``file_version`` (3, string) and ``summary`` (5) holding ``Summary.Value``s with ``tag`` (1) and
``simple_value`` (2, float).
"""

from __future__ import annotations

import math
import os
import socket
import struct
import time
from collections.abc import Iterable
from pathlib import Path

__all__ = ["crc32c", "write_scalars"]


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecord framing uses it.

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= 0xFFFFFFFFFFFFFFFF  # int64 two's complement, as protobuf encodes negatives
    while True:
        bits = n & 0x7F
        n >>= 7
        if n:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field_bytes(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _event(wall_time: float, step: int, *, version: str | None = None, scalars=()) -> bytes:
    body = _varint(1 << 3 | 1) + struct.pack("<d", wall_time) + _varint(2 << 3) + _varint(step)
    if version is not None:
        body += _field_bytes(3, version.encode())
    values = b"".join(
        _field_bytes(1, _field_bytes(1, tag.encode()) + _varint(2 << 3 | 5) + _float32(v))
        for tag, v in scalars
    )
    if values:
        body += _field_bytes(5, values)
    return body


def _float32(v: float) -> bytes:
    try:
        return struct.pack("<f", v)
    except OverflowError:  # beyond float32: TensorBoard shows it as ±inf
        return struct.pack("<f", math.copysign(math.inf, v))


def _record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return (
        length
        + struct.pack("<I", _masked(crc32c(length)))
        + data
        + struct.pack("<I", _masked(crc32c(data)))
    )


def write_scalars(
    logdir: str | os.PathLike[str], steps: Iterable[tuple[int, float, Iterable[tuple[str, float]]]]
) -> Path:
    """Write ``(step, wall_time, [(tag, value), ...])`` rows to a new event file in ``logdir``."""
    directory = Path(logdir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.flodl"
    with open(path, "wb") as f:
        f.write(_record(_event(time.time(), 0, version="brain.Event:2")))
        for step, wall_time, scalars in steps:
            f.write(_record(_event(wall_time, step, scalars=list(scalars))))
    return path
