"""FLODL_SMOKE: a hand-written training loop logged by a Monitor ends after 2 epochs, cleanly."""

from __future__ import annotations

import doctest
import io
import subprocess
import sys
import threading

import pytest

import flodl as fl
from flodl.monitor import SmokeBudgetReached
from tests.conftest import clean_env

STOP_LINE = "FLODL_SMOKE: stopping after 2 epochs (smoke budget)"


def test_docstring_examples():
    from flodl import smoke

    result = doctest.testmod(smoke)
    assert result.attempted > 0 and result.failed == 0


@pytest.fixture
def smoke(monkeypatch):
    monkeypatch.setenv("FLODL_SMOKE", "1")


def train(mon: fl.Monitor, epochs: int) -> list[int]:
    """A user's loop: train an epoch, then log it. Returns the epochs that were trained."""
    trained = []
    for epoch in range(epochs):
        trained.append(epoch)
        mon.log(epoch, 0.01, {"loss": 1.0 / (epoch + 1)})
    return trained


def test_the_second_epoch_ends_the_run_with_exit_code_0(smoke, tmp_path, capsys):
    out = io.StringIO()
    mon = fl.Monitor(50, stream=out, color=False, gpu=False)
    archive = mon.save_html(tmp_path / "run.html")
    trained: list[int] = []
    with pytest.raises(SmokeBudgetReached) as stop:
        for epoch in range(50):
            trained.append(epoch)
            mon.log(epoch, 0.01, {"loss": 1.0 / (epoch + 1)})
    assert isinstance(stop.value, SystemExit) and stop.value.code == 0
    assert trained == [0, 1]
    assert [r.epoch for r in mon.history] == [0, 1]
    # finished on the way out: the summary is printed and the archive holds the complete run
    assert "training complete in" in out.getvalue()
    page = archive.read_text(encoding="utf-8")
    assert '"complete":{' in page.replace(" ", "") and page.count('"epoch":') >= 2
    assert capsys.readouterr().err.splitlines() == [STOP_LINE]
    assert mon.url is None  # closed: no dashboard left serving


def test_except_exception_does_not_swallow_the_stop(smoke):
    mon = fl.Monitor(10, stream=None, gpu=False)
    with pytest.raises(SystemExit):
        try:
            train(mon, 10)
        except Exception:  # a user's broad handler around the loop
            pytest.fail("SmokeBudgetReached must not be an Exception")


@pytest.mark.parametrize("planned", [1, 2])
def test_a_loop_within_the_budget_runs_to_its_end(smoke, planned):
    mon = fl.Monitor(planned, stream=None, gpu=False)
    assert train(mon, planned) == list(range(planned))


@pytest.mark.parametrize("value", ["", "0"])
def test_without_smoke_every_epoch_runs(monkeypatch, value):
    monkeypatch.setenv("FLODL_SMOKE", value)
    mon = fl.Monitor(5, stream=None, gpu=False)
    assert train(mon, 5) == [0, 1, 2, 3, 4]


def test_other_ranks_stop_too_but_only_rank_0_says_so(smoke, capsys):
    mon = fl.Monitor(5, stream=None, rank=1, gpu=False)
    with pytest.raises(SmokeBudgetReached):
        train(mon, 5)
    assert capsys.readouterr().err == ""


def test_a_loop_on_another_thread_is_not_stopped(smoke):
    # SystemExit on a thread would end only that thread (silently), not the run.
    mon = fl.Monitor(5, stream=None, gpu=False)
    result: list[list[int]] = []
    worker = threading.Thread(target=lambda: result.append(train(mon, 5)))
    worker.start()
    worker.join(timeout=60)
    assert result == [[0, 1, 2, 3, 4]]


def test_a_monitor_whose_loop_is_owned_elsewhere_is_left_alone(smoke):
    # fl.Trainer runs exactly the smoke budget and must still run its callbacks and checkpoints,
    # so it turns ends_smoke_runs off and the Monitor does not cut its loop short.
    mon = fl.Monitor(5, stream=None, gpu=False)
    mon.ends_smoke_runs = False
    for epoch in range(5):
        mon.log(epoch, 0.01, {"loss": 1.0})
    assert len(mon.history) == 5


SCRIPT = """
import flodl as fl

mon = fl.Monitor(50, color=False, gpu=False)
mon.save_html("run.html")
for epoch in range(50):
    print(f"training epoch {epoch}", flush=True)
    mon.log(epoch, 0.01, {"loss": 1.0 / (epoch + 1)})
print("after the loop")
"""


@pytest.mark.slow
def test_a_script_asking_for_50_epochs_exits_0_after_2(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(FLODL_SMOKE="1"),
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stdout.splitlines() if line.startswith("training epoch")] == [
        "training epoch 0",
        "training epoch 1",
    ]
    assert "training complete in" in result.stdout
    assert "after the loop" not in result.stdout
    assert result.stderr.strip().splitlines()[-1] == STOP_LINE
    assert (tmp_path / "run.html").is_file()
