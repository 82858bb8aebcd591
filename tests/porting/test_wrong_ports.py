"""The catalogue of wrong ports: one script per false pass, false failure, wrong hint, unchecked
value and silent behaviour change that `fdl check` used to get wrong, each now failing (or
passing) as it should, with the script's file:line. Checked against this checkout's flodl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

WRONG = Path(__file__).resolve().parent / "wrong"


def check(run_fdl, name: str, *options: str, cwd: Path | None = None):
    """``fdl check OPTIONS wrong/NAME`` (arguments after ``--`` go in ``options``)."""
    before, _, after = list(options), None, []
    if "--" in options:
        split = options.index("--")
        before, after = list(options[:split]), list(options[split:])
    return run_fdl("check", *before, str(WRONG / name), *after, cwd=cwd, timeout=400)


# ------------------------------------------------------------------ false passes
def test_a_bad_keyword_after_the_training_loop_fails_statically(run_fdl):
    result = check(run_fdl, "after_loop_bad_keyword.py", "--no-run")
    assert result.returncode == 1
    assert (
        "after_loop_bad_keyword.py:15:1: error[bad-call]: `model.save_checkpoint(...)`: "
        "save_checkpoint() got an unexpected keyword argument 'compression'"
    ) in result.stdout
    assert "did you mean `compress=`?" in result.stdout


def test_an_invented_method_after_the_loop_is_unverified_without_a_run(run_fdl):
    result = check(run_fdl, "after_loop_invented_method.py", "--no-run")
    assert result.returncode == 1
    assert (
        "after_loop_invented_method.py:16: error[unverified-call]: `model.save_weights(...)` "
        "did not run and cannot be checked statically"
    ) in result.stdout
    assert "check ok" not in result.stdout
    assert "the smoke run checks it" not in result.stdout  # the old, untrue promise


@pytest.mark.slow
def test_an_invented_method_after_the_loop_fails_the_smoke_run_at_its_line(run_fdl, tmp_path):
    result = check(run_fdl, "after_loop_invented_method.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "after_loop_invented_method.py:16: error[smoke-failed]: AttributeError" in result.stdout
    assert "save_weights" in result.stdout


@pytest.mark.slow
def test_an_unreached_branch_fails_unless_allowed(run_fdl, tmp_path):
    result = check(run_fdl, "unreached_branch.py", "--json", cwd=tmp_path)
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["ok"] is False
    assert report["smoke"]["status"] == "passed"
    assert [(c["line"], c["text"]) for c in report["call_sites"]["unverified"]] == [
        (17, "model.save_weights")
    ]
    allowed = check(run_fdl, "unreached_branch.py", "--allow-unverified", cwd=tmp_path)
    assert allowed.returncode == 0
    assert "unreached_branch.py:17: warning[unverified-call]" in allowed.stdout
    assert "check ok: 0 error(s), 1 warning(s), 1 unverified call site(s) allowed" in allowed.stdout
    reached = check(run_fdl, "unreached_branch.py", "--", "--save-model", cwd=tmp_path)
    assert reached.returncode == 1
    assert "unreached_branch.py:17: error[smoke-failed]: AttributeError" in reached.stdout


# ------------------------------------------------------------------ false failures
@pytest.mark.slow
def test_required_arguments_pass_after_double_dash_and_argparse_speaks(run_fdl, tmp_path):
    missing = check(run_fdl, "required_arguments.py", cwd=tmp_path)
    assert missing.returncode == 1
    assert "required_arguments.py:11: error[smoke-failed]: the script exited with code 2" in (
        missing.stdout
    )
    assert "error: the following arguments are required: --dataset" in missing.stdout
    assert "pass the script's arguments after --" in missing.stdout
    given = check(
        run_fdl, "required_arguments.py", "--json", "--", "--dataset", "fake", cwd=tmp_path
    )
    report = json.loads(given.stdout)
    assert given.returncode == 0 and report["ok"], given.stdout
    assert "dataset fake smoke True" in report["smoke"]["output_tail"]


@pytest.mark.slow
def test_waiting_is_not_computing_the_limit_is_cpu_time(run_fdl, tmp_path):
    result = check(run_fdl, "waits_without_computing.py", "--timeout", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert "ran to the end" in result.stdout


def test_smoke_enabled_is_in_the_api_reference(run_fdl):
    result = run_fdl("api-ref", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "### fl.smoke_enabled() -> bool" in result.stdout


# ------------------------------------------------------------------ wrong hints
def test_torch_names_get_their_flodl_or_torch_equivalent(run_fdl):
    result = check(run_fdl, "wrong_hints.py", "--no-run")
    out = result.stdout
    assert result.returncode == 1
    assert (
        "wrong_hints.py:5:21: error[unknown-name]: `fl.optim.StepLR` does not exist: fl.optim has "
        "no name 'StepLR'; torch's StepLR maps to flodl's pure schedule fl.optim.StepDecay"
    ) in out
    assert "did you mean `fl.optim.StepDecay`?" in out and "MultiStepLR`?" not in out
    assert (
        "wrong_hints.py:6:28: error[unknown-name]: `fl.nn.functional.nll_loss` does not exist: "
        "fl.nn.functional has no name 'nll_loss'; it stays PyTorch: torch.nn.functional.nll_loss "
        "(losses stay PyTorch)"
    ) in out
    assert "focal_loss" not in out
    assert "wrong_hints.py:7:15: error[unknown-name]: `fl.nn.LSTM`" in out
    assert "it stays PyTorch: torch.nn.LSTM (layers stay PyTorch)" in out


def test_rust_try_operator_is_explained(run_fdl):
    result = check(run_fdl, "rust_try_operator.py", "--no-run")
    assert result.returncode == 1
    assert (
        "rust_try_operator.py:7:48: error[syntax-error]: invalid syntax — `?` is Rust's error "
        "propagation"
    ) in result.stdout


def test_misplaced_future_import_is_reported_at_the_scripts_line(run_fdl):
    result = check(run_fdl, "misplaced_future.py", "--no-run")
    assert result.returncode == 1
    assert (
        "misplaced_future.py:5:1: error[syntax-error]: from __future__ imports must occur at the "
        "beginning of the file"
    ) in result.stdout
    assert "runpy" not in result.stdout


# ------------------------------------------------------------------ unchecked values
def test_a_graph_returned_by_the_scripts_function_is_checked(run_fdl):
    result = check(run_fdl, "user_function_graph.py", "--no-run")
    assert result.returncode == 1
    assert (
        "user_function_graph.py:16:5: error[bad-call]: `model.save_checkpoint(...)`: "
        "save_checkpoint() got an unexpected keyword argument 'compresion'"
    ) in result.stdout


def test_a_loop_variable_over_a_flodl_iterable_is_checked(run_fdl):
    result = check(run_fdl, "loop_variable_batch.py", "--no-run")
    assert result.returncode == 1
    assert (
        "loop_variable_batch.py:10:17: error[unknown-attribute]: `batch.gett` does not exist: "
        "Batch has no attribute 'gett' — did you mean `.get`?"
    ) in result.stdout


def test_epoch_metrics_in_a_loop_are_checked(run_fdl):
    result = check(run_fdl, "loop_variable_metrics.py", "--no-run")
    assert result.returncode == 1
    assert (
        "loop_variable_metrics.py:25:19: error[unknown-attribute]: `metrics.loss` does not "
        "exist: EpochMetrics has no attribute 'loss'"
    ) in result.stdout
    assert "did you mean `.avg_loss`?" in result.stdout


# ------------------------------------------------------------------ silent behaviour change
def test_an_evaluation_loader_without_drop_last_warns_at_its_line(run_fdl):
    result = check(run_fdl, "eval_loader_drops_everything.py", "--no-run")
    assert result.returncode == 0  # a warning: the script may mean it
    assert (
        "eval_loader_drops_everything.py:9:15: warning[behaviour-difference]: fl.data.DataLoader "
        "drops the last partial batch by default (torch's DataLoader keeps it)"
    ) in result.stdout
    assert "add `.drop_last(False)`" in result.stdout and "add `.shuffle(False)`" in result.stdout
