"""Every script in examples/ runs as a user runs it, in smoke mode (``FLODL_SMOKE=1``: 2 epochs),
and does what it says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, clean_env

pytestmark = pytest.mark.slow

# script -> lines its output must contain (what the example shows)
EXPECTED = {
    "quickstart": ["epoch 2/2", "final loss"],
    "sine_wave": ["sin(x)", "identical output: True"],
    "mixed_precision": ["autocast ran the block in torch.bfloat16", "cast 8 parameters"],
    "transfer_learning": ["loaded 6 encoder tensors", "head mismatches", "froze 6"],
    "schedulers": ["the planned schedule", "the plateau scheduler lowered"],
    "observation": ["improving over the run", "curves:"],
    "showcase": ["freeze('block')", "profile:", "checkpoint round-trip identical: True"],
}
TAKES_OUT = {"sine_wave", "mixed_precision", "transfer_learning", "observation", "showcase"}


def test_every_example_script_is_tested():
    scripts = {p.stem for p in (REPO_ROOT / "examples").glob("*.py")}
    assert set(EXPECTED) <= scripts
    # the end-to-end scripts have their own tests (hf_finetune: tests/hf/test_finetune.py)
    assert scripts - set(EXPECTED) <= {"demo", "ddp_regression", "graph_ddp", "hf_finetune"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_in_smoke_mode(name, tmp_path):
    args = ["--out", str(tmp_path / name)] if name in TAKES_OUT else []
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / f"{name}.py"), *args],
        cwd=tmp_path,
        env=clean_env(FLODL_SMOKE="1", OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for line in EXPECTED[name]:
        assert line in result.stdout, f"{line!r} missing:\n{result.stdout[-3000:]}"
    assert "epoch 2/2" in result.stdout and "epoch 3/" not in result.stdout  # smoke: 2 epochs
    if name in TAKES_OUT:
        assert any((tmp_path / name).iterdir())  # its artifacts went where it was told
    else:
        assert [p.name for p in tmp_path.iterdir()] == []  # and nowhere else


def test_showcase_writes_its_artifacts(tmp_path):
    out = tmp_path / "show"
    subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "showcase.py"), "--out", str(out)],
        cwd=tmp_path,
        env=clean_env(FLODL_SMOKE="1", OMP_NUM_THREADS="1"),
        capture_output=True,
        timeout=300,
        check=True,
    )
    assert {"training.html", "showcase.dot", "showcase.fdl"} <= {p.name for p in out.iterdir()}
    assert Path(out / "showcase.dot").read_text().startswith("digraph")
