"""Y-axis ranges for the label tests: every kind, magnitudes from 1e-8 to 1e8, offsets and spans
from a millionth of the value to several times it (the same list for Python and the browser)."""

from __future__ import annotations

import random

KINDS = ("value", "duration", "percent")


def ranges(n: int = 3000, seed: int = 0) -> list[tuple[float, float, str]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = KINDS[i % 3]
        mag = 10 ** rng.uniform(-8, 8)
        lo = rng.choice([0.0, rng.uniform(-1, 1) * mag, rng.uniform(0, 1) * mag, mag])
        if kind != "value":
            lo = abs(lo)
        out.append((lo, lo + mag * 10 ** rng.uniform(-6, 0.5), kind))
    return out
