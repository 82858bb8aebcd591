"""Every example the repository ships passes `fdl check`'s static half against this flodl."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))


def test_there_are_examples():
    assert EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_passes_the_static_check(run_fdl, example):
    result = run_fdl("check", "--no-run", str(example))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check ok: 0 error(s), 0 warning(s)" in result.stdout
