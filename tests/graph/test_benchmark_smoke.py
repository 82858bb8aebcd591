"""The graph benchmark scripts still run end to end (tiny sizes, one round): they cannot rot
silently between the quiet-machine runs that produce real numbers. Nothing here is timed."""

from __future__ import annotations

import json
import math
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.conftest import REPO_ROOT, clean_env


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "stem", "rows", "ratios"),
    [
        ("graph_overhead.py", "graph_overhead", 22, ("ratio", "a_a_ratio", "mem_ratio")),
        ("graph_tree_overhead.py", "graph_tree", 6, ("vs_plain", "vs_graph")),
        ("porting_vocabulary.py", "porting_vocabulary", 4, ("ratio", "a_a_ratio")),
        ("gpu.py", "gpu", 11, ("ratio", "a_a_ratio")),
        ("graph_build.py", "graph_build", 12, ("build_ms", "ms_per_1000")),
        ("encoder_overhead.py", "encoder_overhead", 6, ("ratio", "a_a_ratio")),
        ("straight_line.py", "straight_line", 22, ("floor", "ratio", "replay_ms")),
    ],
)
def test_benchmark_smoke_run_writes_a_complete_report(tmp_path, script, stem, rows, ratios):
    run_smoke(script, tmp_path)
    report = json.loads((tmp_path / f"{stem}.json").read_text())
    assert len(report["rows"]) == rows  # every model x mode (every case) ran
    for row in report["rows"]:
        for key in ratios:
            assert math.isfinite(row[key]) and row[key] > 0, row
    assert "SMOKE RUN" in (tmp_path / f"{stem}.md").read_text()


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc",
    reason="glibc only: elsewhere the allocator is left as it is",
)
@pytest.mark.parametrize(("args", "allocator"), [((), "glibc, mmap threshold 32 MiB"),
                                                  (("--system-allocator",), "system default")])  # fmt: skip
def test_a_timing_suite_fixes_the_allocator_unless_asked_and_its_report_says_which(
    tmp_path, args, allocator
):
    run_script("porting_vocabulary.py", tmp_path, "--smoke", *args)
    report = json.loads((tmp_path / "porting_vocabulary.json").read_text())
    assert report["meta"]["allocator"].startswith(allocator)
    assert f"Allocator: {allocator}" in (tmp_path / "porting_vocabulary.md").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the script measures")
def test_the_gpu_benchmark_without_a_gpu_says_so_and_measures_nothing(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "gpu.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(),
        timeout=300,
    )
    assert proc.returncode == 2 and "no CUDA device here, nothing measured" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the script runs the checks")
def test_the_gpu_check_without_a_gpu_says_so_and_runs_nothing(tmp_path):
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "benchmarks" / "gpu_check.sh"), sys.executable],
        capture_output=True,
        text=True,
        env=clean_env(OUT=str(tmp_path / "gpu")),
        timeout=300,
    )
    assert proc.returncode == 2 and "no CUDA device here, nothing run" in proc.stderr
    assert not (tmp_path / "gpu").exists()


def test_benchmark_rejects_unknown_models(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "graph_overhead.py"), "--models", "nope"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(),
        timeout=300,
    )
    assert proc.returncode == 2 and "unknown model(s) ['nope']" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "stem", "cases"),
    [
        ("timeline_overhead.py", "timeline_overhead", 6),
        ("checkpoint_background.py", "checkpoint_background", 6),
    ],
)
def test_observation_benchmarks_still_run(tmp_path, script, stem, cases):
    run_smoke(script, tmp_path)
    rows = json.loads((tmp_path / f"{stem}.json").read_text())["rows"]
    assert len(rows) == cases
    assert all(math.isfinite(row["ratio"]) and row["ratio"] > 0 for row in rows), rows


def run_smoke(script: str, out: Path) -> None:
    """``benchmarks/<script> --smoke --out <out>``, which must succeed."""
    run_script(script, out, "--smoke")


def run_script(script: str, out: Path, *args: str) -> str:
    """``benchmarks/<script> <args> --out <out>`` (run in ``out``), which must succeed; its
    standard output."""
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / script), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=out,
        env=clean_env(),
        timeout=900,  # a hang guard only: the run takes seconds
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_repeated_graph_overhead_runs_report_each_figure_as_the_median_over_runs(tmp_path):
    args = ("--smoke", "--repeat", "3", "--models", "mlp,gru_seq")
    assert run_script("graph_overhead.py", tmp_path, *args).count("-- run ") == 3
    rows = json.loads((tmp_path / "graph_overhead.json").read_text())["rows"]
    assert [(r["model"], r["mode"]) for r in rows] == [
        ("mlp", "train"),
        ("mlp", "forward_b1"),
        ("gru_seq", "train"),
        ("gru_seq", "forward_b1"),
    ]
    for row in rows:
        runs = [float(v) for v in row["ratio_runs"].split(" / ")]
        assert len(runs) == 3 and row["ratio"] == pytest.approx(sorted(runs)[1], abs=5e-4)


@pytest.mark.slow
def test_the_small_tier_builds_every_model_bit_exact_and_reports_apart(tmp_path):
    # one round: nothing is measured here; main() checks each graph against its plain model
    run_script("graph_overhead.py", tmp_path, "--small", "--rounds", "1", "--inner", "1")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "graph_overhead_small.json",
        "graph_overhead_small.md",
    ]
    report = json.loads((tmp_path / "graph_overhead_small.json").read_text())
    assert len(report["rows"]) == 22
    assert "Small tier" in (tmp_path / "graph_overhead_small.md").read_text()


def straight_line():
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    import straight_line

    return straight_line


def test_a_model_replayed_as_straight_line_calls_makes_its_calls_on_its_own_parameters():
    # The floor's replay: one call per outermost torch call (F.linear, F.gelu, F.layer_norm),
    # on the model's parameters themselves, so an optimizer step moves the replay too.
    sl = straight_line()
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.LayerNorm(8))
    x = torch.randn(2, 4)
    replay = sl.record(model, x)
    assert len(replay.funcs) == 3
    assert torch.equal(replay(x), model(x))
    replay(x).sum().backward()
    torch.optim.SGD(model.parameters(), lr=0.5).step()
    after = replay(torch.ones(2, 4))
    assert torch.equal(after, model(torch.ones(2, 4)))


def test_the_replay_of_attention_in_inference_takes_the_fused_path_the_model_takes():
    # Recording would make MultiheadAttention leave its fused inference path (a torch-function
    # mode counts as an override): the replay must make the calls the unrecorded model makes.
    sl = straight_line()
    attn = nn.MultiheadAttention(8, 2, batch_first=True).eval()

    class SelfAttention(nn.Module):
        def forward(self, x):
            return attn(x, x, x, need_weights=False)[0]

    x = torch.randn(1, 5, 8)
    with torch.no_grad():
        line = sl.replayed(SelfAttention(), x, train=False)
    recorded = [getattr(f, "__name__", "") for f in line.replay.funcs]
    assert "_native_multi_head_attention" in recorded, recorded


def test_a_model_whose_output_no_recorded_call_made_is_refused():
    sl = straight_line()

    class Cached(nn.Module):
        def __init__(self):
            super().__init__()
            self.answer = torch.zeros(3)

        def forward(self, x):
            return self.answer

    with pytest.raises(ValueError, match="not a tensor its recorded calls made"):
        sl.record(Cached(), torch.ones(3))
