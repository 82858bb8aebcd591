"""Terminal formats: the helpers, the per-epoch line and the finish line."""

from __future__ import annotations

import pytest

from flodl.monitor.format import (
    epoch_line,
    finish_line,
    format_bytes,
    format_eta,
    format_metric,
    printable,
)
from flodl.monitor.resources import GpuSnapshot, ResourceSample

GiB, MiB = 1024**3, 1024**2


@pytest.mark.parametrize(
    ("secs", "text"),
    [
        (0.042, "42ms"),
        (0.0, "0ms"),
        (1.0, "1s"),
        (1.5, "1.5s"),
        (4.8, "4.8s"),  # not 4.7s: 4.8 - 4 is 0.7999... in binary
        (59.99, "59.9s"),
        (90, "1m 30s"),
        (3599, "59m 59s"),
        (3661, "1h 01m"),
        (-1, "—"),
        (float("nan"), "—"),
        (float("inf"), "∞"),
    ],
)
def test_format_eta(secs, text):
    assert format_eta(secs) == text


@pytest.mark.parametrize(
    ("n", "text"),
    [(512, "512 B"), (500 * 1024, "500 KB"), (100 * MiB, "100 MB"), (2_254_857_830, "2.1 GB")],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


@pytest.mark.parametrize(
    ("v", "text"),
    [
        (0.0, "0"),
        (0.0001, "1.00e-4"),  # the Rust exponent: no padding, no plus sign
        (-0.00012, "-1.20e-4"),
        (1e-12, "1.00e-12"),
        (1.2345, "1.2345"),
        (99.99999, "100.0000"),
        (12345.67, "12345.67"),
        (float("nan"), "nan"),
        (float("-inf"), "-inf"),
    ],
)
def test_format_metric(v, text):
    assert format_metric(v) == text


def test_epoch_line_matches_the_original_layout():
    assert (
        epoch_line(0, 100, 0.049, {"loss": 1.5264}, 4.8)
        == "  epoch   1/100  loss=1.5264  [49ms  ETA 4.8s]"
    )
    # the last epoch has no ETA, whatever the estimate
    assert (
        epoch_line(99, 100, 0.023, {"loss": 0.0012}, 3.0) == "  epoch 100/100  loss=0.0012  [23ms]"
    )
    assert epoch_line(4, 10, 1.2, {}, None) == "  epoch  5/10  [1.2s]"


def test_epoch_line_with_resources_on_cpu_and_gpu():
    cpu = ResourceSample(cpu_percent=42.4, ram_used=GiB, ram_total=8 * GiB, rss=812 * MiB)
    assert epoch_line(0, 3, 0.5, {"loss": 1.0}, 1.0, cpu).endswith(
        "[500ms  ETA 1s]  CPU: 42%  RSS: 812 MB"
    )
    gpu = ResourceSample(
        cpu_percent=10.0,
        rss=GiB,
        gpus=(
            GpuSnapshot(0, "L4", 81.6, vram_reserved=int(2.1 * GiB), vram_total=8 * GiB),
            GpuSnapshot(1, "L4", 78.4, vram_reserved=GiB, vram_total=8 * GiB),
        ),
    )
    line = epoch_line(2, 3, 0.5, {"loss": 1.0}, None, gpu)
    assert line.endswith("[500ms]  VRAM: 2.1 GB / 8.0 GB (80%)  CPU: 10%  RSS: 1.0 GB")
    spill = ResourceSample(gpus=(GpuSnapshot(0, vram_reserved=9 * GiB, vram_total=8 * GiB),))
    assert "VRAM: 9.0 GB / 8.0 GB  spill: 1.0 GB" in epoch_line(0, 1, 1, {}, None, spill)
    util_only = ResourceSample(gpus=(GpuSnapshot(0, util_percent=55.0),))
    assert epoch_line(0, 1, 1, {}, None, util_only).endswith("[1s]  GPU: 55%")


def test_color_only_when_asked_and_names_cannot_drive_the_terminal():
    plain = epoch_line(0, 2, 0.1, {"loss": 1.0}, 1.0, ResourceSample(cpu_percent=1.0))
    assert "\x1b" not in plain
    colored = epoch_line(0, 2, 0.1, {"loss": 1.0}, 1.0, color=True)
    assert "\x1b[1m1/2\x1b[0m" in colored and "\x1b[36m[100ms  ETA 1s]\x1b[0m" in colored
    hostile = epoch_line(0, 1, 0.1, {"x\x1b[2J\x07\n": 1.0}, None)
    assert "\x1b" not in hostile and "\n" not in hostile
    assert "x\\x1b[2J\\x07\\x0a=1.0000" in hostile
    assert printable("ok.name") == "ok.name"


def test_finish_line():
    assert (
        finish_line(2.8, {"loss": 0.0012, "acc": 0.97})
        == "  training complete in 2.8s  | loss: 0.0012  | acc: 0.9700"
    )
    assert finish_line(0.5, {}) == "  training complete in 500ms"


def test_resource_summary_and_json_round_trip():
    sample = ResourceSample(
        cpu_percent=12.0,
        ram_used=3 * GiB,
        ram_total=16 * GiB,
        rss=GiB,
        gpus=(GpuSnapshot(0, "L4", 80.0, vram_reserved=2 * GiB, vram_total=8 * GiB),),
    )
    assert (
        sample.summary() == "CPU: 12% | RAM: 3.0 GB/16.0 GB | RSS: 1.0 GB | GPU: 80% 2.0 GB/8.0 GB"
    )
    again = ResourceSample.from_json(sample.to_json())
    assert again.to_json() == sample.to_json()
    assert ResourceSample().to_json() == {}  # unknown values are left out
