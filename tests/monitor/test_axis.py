"""Dashboard y-axis labels: distinct and readable at every scale (the page's JS runs the same
algorithm; test_browser.py checks the two agree)."""

from __future__ import annotations

import re

import pytest

from flodl.monitor.axis import axis_ticks, nice_step
from tests.monitor.axis_cases import ranges

_CLOCK = re.compile(r"(-?)(?:(\d+)h )?(\d+)m(?: (\d+)s)?$|(-?)(\d+)h (\d+)m(?: (\d+)s)?$")


def seconds(label: str) -> float:
    """A duration label back to seconds."""
    for unit, scale in (("µs", 1e-6), ("ms", 1e-3)):
        if label.endswith(unit):
            return float(label[: -len(unit)]) * scale
    parts = label.split()
    if len(parts) == 1:
        return float(label.removesuffix("s"))
    total, sign = 0.0, -1.0 if label.startswith("-") else 1.0
    for part in parts:
        number, unit = float(part[:-1].lstrip("-")), part[-1]
        total += number * {"h": 3600, "m": 60, "s": 1}[unit]
    return sign * total


def value_of(label: str, kind: str) -> float:
    if kind == "percent":
        return float(label.removesuffix("%"))
    if kind == "duration":
        return seconds(label)
    return float(label)


def problems(lo: float, hi: float, kind: str) -> list[str]:
    """What is wrong with the ticks of one range (nothing, hopefully)."""
    ticks = axis_ticks(lo, hi, kind)
    labels = [label for _, label in ticks]
    if not 2 <= len(ticks) <= 11:
        return [f"{len(ticks)} ticks"]
    found = []
    if len(set(labels)) != len(labels):
        found.append(f"repeated labels {labels}")  # never "1s / 1s / 1s"
    span, step = hi - lo, ticks[1][0] - ticks[0][0]
    for value, label in ticks:
        if not lo - span * 1e-6 <= value <= hi + span * 1e-6:
            found.append(f"{value} off the chart")
        if len(label) > 14:
            found.append(f"{label!r} too long for the axis gutter")
        # the label says the value: within half a step (it shows the step's decimals)
        if abs(value_of(label, kind) - value) > step / 2 + abs(value) * 1e-12:
            found.append(f"{label!r} does not read as {value}")
    return found


def test_labels_are_distinct_readable_and_say_the_tick_value_over_3000_ranges():
    cases = ranges()
    assert {kind for *_, kind in cases} == {"value", "duration", "percent"}
    bad = [(case, p) for case in cases if (p := problems(*case))]
    assert bad == [], f"{len(bad)} ranges, e.g. {bad[:5]}"


@pytest.mark.parametrize(
    ("lo", "hi", "kind", "labels"),
    [  # the ranges where the old axis repeated itself
        (1.0, 1.06, "duration", ["1.00s", "1.02s", "1.04s", "1.06s"]),
        (0.3, 1.2, "percent", ["0.5%", "1.0%"]),
        (0.0, 1.2, "percent", ["0.0%", "0.5%", "1.0%"]),
        (0.0123, 0.0125, "duration", ["12.3ms", "12.4ms", "12.5ms"]),
        (98.1, 99.9, "percent", ["98.5%", "99.0%", "99.5%"]),
        (2.5e-5, 4.0e-5, "value", ["2.5e-5", "3.0e-5", "3.5e-5", "4.0e-5"]),
        (0.0, 0.0004, "duration", ["0µs", "100µs", "200µs", "300µs", "400µs"]),
        (0.0, 7200.0, "duration", ["0s", "30m 00s", "1h 00m", "1h 30m", "2h 00m"]),
        (1.2e7, 1.6e7, "value", ["1.2e7", "1.3e7", "1.4e7", "1.5e7", "1.6e7"]),
    ],
)
def test_known_ranges(lo, hi, kind, labels):
    assert [label for _, label in axis_ticks(lo, hi, kind)] == labels


def test_degenerate_ranges_and_bad_kinds():
    assert axis_ticks(1.0, 1.0) == [] and axis_ticks(2.0, 1.0) == []
    assert axis_ticks(0.0, float("inf")) == [] and axis_ticks(float("nan"), 1.0) == []
    with pytest.raises(ValueError, match="axis kind 'bytes'"):
        axis_ticks(0.0, 1.0, "bytes")
    assert nice_step(7200, 4, "duration") == (1800.0, 0)


@pytest.mark.parametrize(
    ("lo", "hi", "labels"),
    [
        (1e-310, 3e-310, ["1e-310", "2e-310", "3e-310"]),  # subnormal: used to raise / hang
        (-1e308, 1e308, ["-1.0e308", "-5.0e307", "0", "5.0e307", "1.0e308"]),  # hi - lo = inf
        (5e-324, 1e-323, []),  # no step fits between the two smallest floats: no ticks
    ],
)
def test_extreme_finite_ranges_get_a_sane_axis_or_none(lo, hi, labels):
    for kind in ("value", "percent", "duration"):
        ticks = axis_ticks(lo, hi, kind)
        assert len(ticks) <= 65
        if kind == "value":
            assert [label for _, label in ticks] == labels
