"""benchmarks/hf_forward.py still runs end to end (tiny model, one round). Nothing is timed."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, clean_env


@pytest.mark.slow
def test_hf_forward_smoke_run_writes_a_report(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "hf_forward.py"), "--smoke", "--out",
         str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, env=clean_env(OMP_NUM_THREADS="1"),
        timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "hf_forward.json").read_text())
    (row,) = report["rows"]
    assert math.isfinite(row["ratio"]) and row["ratio"] > 0 and row["a_a_ratio"] > 0
    assert row["max_abs_diff"] < 1e-5  # the two sides computed the same thing
    assert "SMOKE RUN" in (tmp_path / "hf_forward.md").read_text()
