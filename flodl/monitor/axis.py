"""The dashboard's y-axis ticks: where they go and how they read, at every scale.

The page draws its charts in JavaScript (``axisTicks`` in ``assets/dashboard.js``); this is the
same algorithm in Python, step for step, so the rules can be tested over thousands of ranges and
the browser's output compared with it exactly. Rules:

* ticks sit on a "nice" step (1, 2 or 5 times a power of ten; for durations of a second or more,
  also 15 s, 30 s, 1 min, 5 min, 15 min, 30 min, 1 h and whole hours);
* a label shows as many decimals as the step needs, so neighbouring labels always differ
  (``1.02s / 1.04s``, never ``1s / 1s``; ``0.5% / 1.0%``, never ``1% / 1%``); if rounding would
  still make two equal, one more decimal is shown;
* values pick a readable unit: plain numbers switch to exponent form below 0.001 and from one
  million (``2.5e-5``), durations use µs, ms, s, ``1m 30s`` or ``2h 15m``.

>>> [label for _, label in axis_ticks(1.0, 1.1, "duration")]
['1.00s', '1.05s', '1.10s']
>>> [label for _, label in axis_ticks(0.2, 1.3, "percent")]
['0.5%', '1.0%']
>>> [label for _, label in axis_ticks(0.0, 600, "duration")]
['0s', '5m 00s', '10m 00s']
>>> [label for _, label in axis_ticks(3500, 9000, "duration")]
['1h 00m', '1h 30m', '2h 00m', '2h 30m']
"""

from __future__ import annotations

import math

__all__ = ["KINDS", "axis_ticks", "nice_step"]

KINDS = ("value", "duration", "percent")
# steps for durations from a second up (seconds); above the last one: whole hours, 1-2-5 nice
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
_MAX_EXTRA = 4  # decimals added at most to tell two labels apart
_MAX_TICKS = 64  # never more (a degenerate step could ask for millions)


def _pow10(k: int) -> float:
    # exact for |k| <= 22 in both languages (a division, not pow: pow may be off by one ulp);
    # past 1e-300 in two steps, so that subnormal values get a subnormal power, not an error
    if k >= 0:
        return float(10**k)
    if k >= -300:
        return 1.0 / float(10 ** (-k))
    return 1.0 / float(10 ** (-(k + 300))) / 1e300


def _round12(v: float) -> float:
    """``v`` to 12 significant digits (0.30000000000000004 -> 0.3); never -0."""
    r = float(f"{v:.12g}")
    return 0.0 if r == 0 else r


def nice_step(span: float, count: int = 4, kind: str = "value") -> tuple[float, int]:
    """A step that cuts ``span`` into about ``count`` parts, and its power of ten.

    >>> nice_step(1.0, 4)
    (0.5, -1)
    >>> nice_step(600, 4, "duration")
    (300.0, 0)
    """
    return _nice_raw(span / max(1, count), kind)


def _nice_raw(raw: float, kind: str) -> tuple[float, int]:
    """:func:`nice_step` of one part; ``(0.0, 0)`` when none fits (a span that underflows)."""
    if not (raw > 0 and math.isfinite(raw)):
        return 0.0, 0
    e = math.floor(math.log10(raw))
    if kind == "duration" and raw > 1:
        for step in _TIME_STEPS:
            if step >= raw:
                return float(step), 0
        hours, e = _nice_raw(raw / 3600, "value")
        return _round12(hours * 3600), max(0, e)
    n = raw / _pow10(e)  # in [1, 10): the smallest of 1, 2, 5, 10 that covers it
    if n > 5:
        return _round12(_pow10(e + 1)), e + 1
    return _round12((1 if n <= 1 else 2 if n <= 2 else 5) * _pow10(e)), e


def _fixed(v: float, d: int) -> str:
    return f"{v:.{d}f}"


def _exponent(v: float, p: int) -> str:
    mantissa, _, exp = f"{v:.{p}e}".partition("e")
    return f"{mantissa}e{int(exp)}"


def _clock(t: float, step: float) -> str:
    """Whole seconds as ``1m 30s`` / ``2h 05m`` (``2h 05m 10s`` when the step needs seconds)."""
    sign, t = ("-" if t < 0 else ""), abs(round(t))
    h, m, s = t // 3600, (t % 3600) // 60, t % 60
    if h == 0:
        return f"{sign}{m}m {s:02d}s"
    if step % 60 == 0:
        return f"{sign}{h}h {m:02d}m"
    return f"{sign}{h}h {m:02d}m {s:02d}s"


def _numbers(ticks: list[float], e: int, extra: int) -> list[str]:
    """Plain numbers: fixed decimals, or exponent form below 0.001 and from a million."""
    biggest = max(abs(t) for t in ticks)
    if biggest == 0:
        return ["0" for _ in ticks]
    if biggest >= 1e6 or biggest < 1e-3:
        p = max(0, math.floor(math.log10(biggest)) - e) + extra
        return ["0" if t == 0 else _exponent(t, p) for t in ticks]
    return [_fixed(t, max(0, -e) + extra) for t in ticks]


def _labels(ticks: list[float], step: float, e: int, kind: str, extra: int) -> list[str]:
    biggest = max(abs(t) for t in ticks)
    if kind == "percent":
        return [label + "%" for label in _numbers(ticks, e, extra)]
    if kind == "duration":
        if biggest >= 60 and step >= 1:
            return ["0s" if t == 0 else _clock(t, step) for t in ticks]
        if biggest < 1e-6:
            return [label + "s" for label in _numbers(ticks, e, extra)]
        if biggest < 1e-3:
            return [_fixed(t * 1e6, max(0, -(e + 6)) + extra) + "µs" for t in ticks]
        if biggest < 1:
            return [_fixed(t * 1e3, max(0, -(e + 3)) + extra) + "ms" for t in ticks]
        return [_fixed(t, max(0, -e) + extra) + "s" for t in ticks]
    return _numbers(ticks, e, extra)


def axis_ticks(
    lo: float, hi: float, kind: str = "value", count: int = 4
) -> list[tuple[float, str]]:
    """The y-axis ticks between ``lo`` and ``hi``: (value, label) pairs, labels all distinct.

    ``kind``: ``"value"`` (metrics), ``"duration"`` (seconds) or ``"percent"``.

    >>> axis_ticks(0.0, 100.0, "percent")
    [(0.0, '0%'), (50.0, '50%'), (100.0, '100%')]
    >>> [label for _, label in axis_ticks(1.5e-5, 2.5e-5)]
    ['1.5e-5', '2.0e-5', '2.5e-5']
    """
    if kind not in KINDS:
        raise ValueError(f"axis kind {kind!r}: expected one of {', '.join(KINDS)}")
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return []
    for parts in (count, 2 * count, 4 * count):  # a finer step when fewer than two ticks fit
        # (hi - lo) overflows for a range such as ±1e308: divide first then
        span = hi - lo
        step, e = _nice_raw(span / parts if math.isfinite(span) else hi / parts - lo / parts, kind)
        if not (step > 0 and math.isfinite(step)):
            return []
        a, b = lo / step - 1e-9, hi / step + 1e-9
        if not (math.isfinite(a) and math.isfinite(b)) or b - a > _MAX_TICKS + 1:
            return []
        first, last = math.ceil(a), math.floor(b)
        ticks = [_round12(k * step) for k in range(first, last + 1)]
        if len(ticks) >= 2:
            break
    if not ticks:
        return []
    for extra in range(_MAX_EXTRA + 1):
        labels = _labels(ticks, step, e, kind, extra)
        if len(set(labels)) == len(labels):
            break
    return list(zip(ticks, labels, strict=True))
