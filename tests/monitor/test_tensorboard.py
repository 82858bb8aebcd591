"""TensorBoard export: valid TFRecord framing and Event protobufs, readable by TensorBoard itself."""

from __future__ import annotations

import math
import struct

import pytest

import flodl as fl
from flodl.monitor.tensorboard import crc32c
from tests.conftest import require


def masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(data: bytes) -> list[bytes]:
    records, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        (length_crc,) = struct.unpack_from("<I", data, pos + 8)
        assert length_crc == masked(crc32c(data[pos : pos + 8]))
        body = data[pos + 12 : pos + 12 + length]
        (body_crc,) = struct.unpack_from("<I", data, pos + 12 + length)
        assert body_crc == masked(crc32c(body))
        records.append(body)
        pos += 16 + length
    return records


def fields(buf: bytes) -> list[tuple[int, object]]:
    """A small protobuf wire-format decoder (varint, fixed64, length-delimited, fixed32)."""
    out, pos = [], 0

    def varint() -> int:
        nonlocal pos
        shift = value = 0
        while True:
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while pos < len(buf):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, varint()))
        elif wire == 1:
            out.append((number, struct.unpack_from("<d", buf, pos)[0]))
            pos += 8
        elif wire == 2:
            n = varint()
            out.append((number, buf[pos : pos + n]))
            pos += n
        elif wire == 5:
            out.append((number, struct.unpack_from("<f", buf, pos)[0]))
            pos += 4
        else:
            raise AssertionError(f"unexpected wire type {wire}")
    return out


def test_crc32c_known_vectors():
    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4


def test_event_file_holds_every_metric_per_epoch(tmp_path):
    mon = fl.Monitor(2, stream=None)
    mon.log(0, 0.5, {"loss": 1.0, "enc.acc": 0.25})
    mon.log(1, 0.5, {"loss": float("nan"), "huge": 1e300})
    path = mon.export_tensorboard(tmp_path / "tb")
    assert path.parent == tmp_path / "tb" and path.name.startswith("events.out.tfevents.")
    events = [dict(fields(r)) for r in read_records(path.read_bytes())]
    assert events[0][3] == b"brain.Event:2"  # file_version first
    assert [e[2] for e in events[1:]] == [1, 2]  # steps are 1-based epochs
    assert events[1][1] == pytest.approx(events[2][1], abs=60)  # wall times, seconds
    per_step = []
    for event in events[1:]:
        values = [dict(fields(v)) for n, v in fields(event[5]) if n == 1]
        per_step.append({v[1].decode(): v[2] for v in values})
    assert per_step[0]["loss"] == 1.0 and per_step[0]["enc.acc"] == 0.25
    assert per_step[0]["epoch_time_s"] == 0.5 and "resources/rss_bytes" in per_step[0]
    assert math.isnan(per_step[1]["loss"]) and per_step[1]["huge"] == math.inf


def test_tensorboard_reads_it(tmp_path):
    try:
        from tensorboard.backend.event_processing import event_accumulator as accumulator
    except ImportError as err:
        require("tensorboard", f"the tensorboard package is not installed ({err}); dev extra")
    mon = fl.Monitor(3, stream=None)
    for epoch in range(3):
        mon.log(epoch, 0.1, {"loss": 1.0 / (epoch + 1)})
    mon.export_tensorboard(tmp_path)
    acc = accumulator.EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"loss", "epoch_time_s", "resources/cpu_pct", "resources/rss_bytes"} <= set(tags)
    assert [(e.step, round(e.value, 4)) for e in acc.Scalars("loss")] == [
        (1, 1.0),
        (2, 0.5),
        (3, 0.3333),
    ]
