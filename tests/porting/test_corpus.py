"""The corpus: real-world-shaped PyTorch scripts and their flodl ports.

Every original runs; every port passes `fdl check` (static + smoke run). Deliberately wrong ports fail with the expected messages (checked against the
miniature flodl in tests/apiref/fixtures, so the expectations do not move with the real API).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import clean_env
from tests.porting.support import CORPUS

CASES = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())
WRONG = Path(__file__).resolve().parent / "wrong"
MINI = Path(__file__).resolve().parents[1] / "apiref" / "fixtures" / "mini"


def test_the_corpus_covers_the_required_shapes():
    assert set(CASES) == {
        "mlp",
        "cnn_batchnorm",
        "resnet_downsample",
        "seq2seq_attention",
        "moe",
        "ddp_torchrun",
        "custom_loop_scheduler",
        "cnn_argparse",
        "lstm_classifier",
        "vae",
        "gan",
        "lstmcell_lbfgs",
        "transformer_block",
        "ddp_snapshots",
        "super_resolution",
    }


# Each script's real command line (the originals and the ports take the same arguments).
ARGS = {
    "cnn_argparse": ["--dataset", "fake", "--epochs", "3", "--save-model"],
    "lstm_classifier": ["--epochs", "3"],
    "vae": ["--epochs", "3"],
    "gan": ["--niter", "3"],
    "lstmcell_lbfgs": ["--steps", "3", "--future", "20"],
    "transformer_block": ["--epochs", "3"],
    "ddp_snapshots": ["4", "1", "--batch_size", "32"],
    "super_resolution": ["--upscale_factor", "3", "--nEpochs", "4"],
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_original_runs(case, tmp_path):
    result = subprocess.run(
        [sys.executable, str(CORPUS / case / "original.py"), *ARGS.get(case, [])],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(),
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_port_passes_fdl_check(case, run_fdl, tmp_path):
    port = CORPUS / case / "port.py"
    args = ["--", *ARGS[case]] if case in ARGS else []
    result = run_fdl("check", "--json", str(port), *args, cwd=tmp_path, timeout=400)
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["ok"], result.stdout
    assert report["smoke"]["status"] == "passed"
    assert report["call_sites"]["unverified"] == []


def check_wrong(run_fdl, name: str, *extra: str):
    return run_fdl("check", "--path", str(MINI), *extra, str(WRONG / name))


def test_invented_names_fail_with_suggestions(run_fdl):
    result = check_wrong(run_fdl, "invented_names.py", "--no-run")
    assert result.returncode == 1
    out = result.stdout
    assert (
        "invented_names.py:6:1: error[unknown-name]: `from flodl.nn import StateAd` does not "
        "exist: fl.nn has no name 'StateAd' — did you mean `fl.nn.StateAdd`?"
    ) in out
    assert (
        "invented_names.py:8:12: error[unknown-name]: `fl.Sequential` does not exist: fl has no "
        "name 'Sequential'; in flodl: fl.FlowBuilder(first).through(...).build() (or keep "
        "torch.nn.Sequential) — did you mean `fl.FlowBuilder(first).through(...).build()`?"
    ) in out
    assert (
        "invented_names.py:9:13: error[unknown-name]: `fl.StateAdd` does not exist: fl has no "
        "name 'StateAdd' — did you mean `fl.nn.StateAdd`?"
    ) in out
    assert "smoke run: skipped (--no-run)" in out
    assert "check failed: 3 error(s), 0 warning(s) (flodl 9.8.7, api sha256:" in out


def test_wrong_builder_method_fails_and_lists_the_real_ones(run_fdl):
    result = check_wrong(run_fdl, "wrong_builder_method.py", "--no-run")
    assert result.returncode == 1
    assert (
        "wrong_builder_method.py:7:60: error[unknown-attribute]: `FlowBuilder(...).residual` "
        "does not exist: FlowBuilder has no attribute 'residual'; its builder methods are "
        ".through(), .also(), .tag(), .build()"
    ) in result.stdout
    assert (
        "wrong_builder_method.py:8:69: error[unknown-attribute]: `_LoopBuilder(...).for_each` "
        "does not exist: _LoopBuilder has no attribute 'for_each' — did you mean `.for_n`?"
    ) in result.stdout


def test_syntax_error_is_located(run_fdl, tmp_path):
    port = tmp_path / "syntax_error.py"  # generated: a file that does not parse can't be linted
    port.write_text(
        '"""A port with a syntax error."""\n\nimport flodl as fl\n\nmodel = fl.FlowBuilder(\n    .through(None)\n'
    )
    result = run_fdl("check", "--path", str(MINI), str(port))
    assert result.returncode == 1
    assert "syntax_error.py:5:23: error[syntax-error]: '(' was never closed" in result.stdout
    assert "smoke run: skipped (fix the errors above first)" in result.stdout


@pytest.mark.slow
def test_runtime_shape_error_is_reported_with_its_line(run_fdl, tmp_path):
    port = WRONG / "shape_error.py"
    result = run_fdl("check", str(port), cwd=tmp_path, timeout=400)
    assert result.returncode == 1
    assert "shape_error.py:11: error[smoke-failed]: RuntimeError: " in result.stdout
    assert "mat1 and mat2 shapes cannot be multiplied" in result.stdout
    assert "\n  note: " in result.stdout  # the graph names the node that raised
