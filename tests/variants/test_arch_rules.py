"""Numeric arch compatibility (the original's substring match said sm_50 ran on a '7.5' build)."""

from __future__ import annotations

import pytest

from fdl.variants.archs import coverage, parse_cc, sm_name

CU126 = [(5, 0), (6, 0), (7, 0), (7, 5), (8, 0), (8, 6), (9, 0)]
CU130 = [(7, 5), (8, 0), (8, 6), (9, 0), (10, 0), (12, 0)]


@pytest.mark.parametrize(
    ("gpu", "sass", "ptx", "expected"),
    [
        ((6, 1), CU126, [], ("sass", (6, 0))),  # GTX 1060 runs sm_60 kernels (same major)
        ((8, 9), CU126, [], ("sass", (8, 6))),  # RTX 4090: sm_86, not "missing" (Inline-Studio bug)
        ((8, 0), CU126, [], ("sass", (8, 0))),  # exact
        ((5, 0), [(7, 5)], [], ("none", None)),  # substring bug: "5" in "7.5" is not a match
        ((6, 1), [(8, 6)], [], ("none", None)),  # "6" in "8.6" neither
        ((12, 0), CU126, [], ("none", None)),  # Blackwell: no sm_12x, no PTX
        ((6, 0), [(6, 1)], [], ("none", None)),  # a higher minor never runs on a lower one
        ((12, 1), CU130, [(12, 0)], ("sass", (12, 0))),
        ((10, 3), [(9, 0)], [(9, 0)], ("ptx", (9, 0))),  # PTX JIT forward to a newer major
        ((8, 6), [(9, 0)], [(9, 0)], ("none", None)),  # PTX never runs backwards
    ],
)
def test_coverage(gpu, sass, ptx, expected):
    assert coverage(gpu, sass, ptx) == expected


def test_parse_cc_forms_and_rejections():
    assert parse_cc("8.6") == parse_cc("sm_86") == (8, 6)
    assert parse_cc("compute_120") == (12, 0)
    assert sm_name((12, 0)) == "sm_120"
    for bad in ("", "sm_Failed", "8", "abc", "1.2.3"):
        with pytest.raises(ValueError):
            parse_cc(bad)
