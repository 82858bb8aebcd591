"""flodl's logging: silent by default, FLODL_VERBOSITY / fl.set_verbosity, rank prefixes."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import flodl as fl
from flodl import log as flog

REPO = Path(__file__).resolve().parents[1]

# One line per level, through the loggers the library uses.
_EMIT = textwrap.dedent(
    """
    import logging
    import flodl as fl
    from flodl.log import TRACE, get_logger
    log = get_logger("flodl.train")
    log.log(TRACE, "mark-trace")
    log.debug("mark-debug")
    log.info("mark-info")
    log.warning("mark-warning")
    log.error("mark-error")
    print("verbosity", fl.verbosity())
    """
)
MARKS = ["mark-trace", "mark-debug", "mark-info", "mark-warning", "mark-error"]


def run_child(env_value: str | None, code: str = _EMIT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    env.pop("FLODL_VERBOSITY", None)
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    if env_value is not None:
        env["FLODL_VERBOSITY"] = env_value
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(autouse=True)
def _restore():
    yield
    fl.set_verbosity(None)
    flog.set_rank(None)


@pytest.mark.parametrize(
    ("env_value", "shown"),
    [
        (None, ["mark-warning", "mark-error"]),  # the default: nothing below WARNING
        ("0", ["mark-error"]),
        ("1", ["mark-info", "mark-warning", "mark-error"]),
        ("debug", ["mark-debug", "mark-info", "mark-warning", "mark-error"]),
        ("3", MARKS),
    ],
    ids=["unset", "0-quiet", "1-info", "2-debug", "3-trace"],
)
def test_each_verbosity_shows_exactly_its_levels_on_stderr(env_value, shown):
    child = run_child(env_value)
    assert child.returncode == 0, child.stderr
    assert [m for m in MARKS if m in child.stderr] == shown
    assert "mark" not in child.stdout  # records never go to stdout


def test_a_bad_environment_value_is_a_warning_and_the_default_applies():
    child = run_child("loud")
    assert child.returncode == 0
    assert "ignoring FLODL_VERBOSITY='loud'" in child.stderr
    assert "verbosity None" in child.stdout
    assert "mark-info" not in child.stderr and "mark-warning" in child.stderr


def test_set_verbosity_names_and_numbers():
    for value, level in [("quiet", 0), ("info", 1), ("debug", 2), ("trace", 3), (2, 2), ("1", 1)]:
        fl.set_verbosity(value)
        assert fl.verbosity() == level
    assert logging.getLogger("flodl").level == logging.INFO
    with pytest.raises(ValueError, match=r"0\.\.3"):
        fl.set_verbosity(4)
    with pytest.raises(ValueError, match="'quiet'"):
        fl.set_verbosity("loud")
    assert fl.verbosity() == 1  # a rejected value changes nothing
    fl.set_verbosity(None)
    assert fl.verbosity() is None and logging.getLogger("flodl").propagate


@pytest.mark.parametrize("stream", ["train.log", Path("train.log"), 3])
def test_a_stream_that_cannot_be_written_is_refused_at_the_call(stream, tmp_path, monkeypatch):
    # A path was accepted, then every record failed with "'str' object has no attribute 'write'".
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match=r"takes an open text stream .*open\('train.log', 'a'\)"):
        fl.set_verbosity("info", stream=stream)
    assert fl.verbosity() is None and not list(tmp_path.iterdir())


def test_one_handler_however_often_it_is_set():
    out = io.StringIO()
    for _ in range(3):
        fl.set_verbosity("info", stream=out)
    flog.get_logger("flodl.graph").info("once")
    assert out.getvalue().count("once") == 1


def test_rank_attribute_and_prefix():
    out = io.StringIO()
    fl.set_verbosity("info", stream=out)
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record)

    keep = Keep()
    logging.getLogger("flodl").addHandler(keep)
    try:
        flog.get_logger("flodl.train").info("single process")
        flog.set_rank(1)
        flog.get_logger("flodl.train").warning("from a rank")
    finally:
        logging.getLogger("flodl").removeHandler(keep)
    assert [r.rank for r in seen] == [None, 1]
    assert out.getvalue().splitlines() == [
        "flodl.train: single process",
        "[rank 1] warning: flodl.train: from a rank",
    ]


def test_rank_comes_from_the_launcher_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    assert flog.current_rank() == 3
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert flog.current_rank() is None


def test_the_library_logs_graph_builds_trainer_runs_and_loaders():
    out = io.StringIO()
    fl.set_verbosity("info", stream=out)
    fl.FlowBuilder(nn.Linear(2, 3)).label("enc").build()
    fl.data.DataLoader.from_tensors(torch.zeros(8, 2)).batch_size(4).build()
    text = out.getvalue()
    assert "flodl.graph: built graph 'enc' [" in text and "9 parameters" in text
    assert "flodl.data: DataLoader: 8 samples" in text


def test_monitor_write_log_includes_the_records_of_the_run(tmp_path):
    fl.set_verbosity("info", stream=io.StringIO())
    mon = fl.Monitor(1, stream=None, gpu=False)
    fl.FlowBuilder(nn.Linear(2, 2)).label("probe").build()
    mon.log(0, 0.5, {"loss": 1.0})
    path = mon.write_log(tmp_path / "run.log")
    mon.close()
    fl.FlowBuilder(nn.Linear(2, 2)).label("after").build()  # the closed monitor keeps nothing
    text = path.read_text()
    assert "epoch 1/1" in text and "# messages" in text
    assert "INFO flodl.graph: built graph 'probe'" in text and "'after'" not in text


_WHILE_A_MONITOR_RUNS = textwrap.dedent(
    """
    import logging, sys
    import flodl as fl
    {setup}
    log = logging.getLogger("flodl.train")
    mons = [fl.Monitor(3, stream=None, gpu=False) for _ in range({monitors})]
    log.warning("mark-warning")
    log.error("mark-error")
    log.info("mark-info")
    for mon in mons:  # every monitor keeps them for its write_log
        assert any("mark-error" in line for line in mon._messages.lines())
        mon.close()
    """
)


@pytest.mark.parametrize(
    ("setup", "env_value", "info_shown"),
    [
        ("", None, False),  # nobody configured logging: Python's last resort prints them
        ("logging.basicConfig(stream=sys.stderr)", None, False),  # the user's own handler
        ("", "info", True),  # flodl's handler
    ],
    ids=["default", "basicConfig", "verbosity-info"],
)
@pytest.mark.parametrize("monitors", [1, 2, 3], ids=lambda n: f"{n}-monitors")
def test_warnings_and_errors_reach_stderr_once_while_a_monitor_runs(
    setup, env_value, info_shown, monitors
):
    # The Monitor keeps the records for write_log with a handler of its own; a handler anywhere
    # stops Python's last-resort printing, which once hid every error (a failed checkpoint too)
    # for as long as a Monitor was open. With several monitors open, each one's handler once
    # counted the others' as the one that prints, and none did.
    done = run_child(env_value, _WHILE_A_MONITOR_RUNS.format(setup=setup, monitors=monitors))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("mark-warning") == 1 and done.stderr.count("mark-error") == 1
    assert ("mark-info" in done.stderr) is info_shown


def test_a_failed_checkpoint_is_reported_while_a_monitor_runs(tmp_path):
    (tmp_path / "a_file").write_text("")
    code = textwrap.dedent(
        f"""
        import torch
        from torch import nn
        import flodl as fl
        torch.manual_seed(0)
        def step(m, batch):
            x, y = batch
            return nn.functional.mse_loss(m(x), y)
        (fl.Trainer.builder(lambda device: nn.Linear(2, 1),
                            lambda params: torch.optim.SGD(params, lr=0.1), step).dataset((torch.randn(8, 2), torch.randn(8, 1)))
            .batch_size(4).num_epochs(1).monitor(fl.Monitor(1, stream=None, gpu=False))
            .checkpoint_every(1, directory={str(tmp_path / "a_file" / "ckpts")!r}).run())
        """
    )
    done = run_child(None, code)
    assert done.returncode == 0, done.stderr
    assert "checkpoint 1 failed" in done.stderr and "a_file" in done.stderr


@pytest.mark.parametrize(
    ("flag", "exported"), [("-q", "0"), ("-v", "1"), ("-vv", "2"), ("-vvv", "3")]
)
def test_fdl_flags_export_flodl_verbosity(monkeypatch, flag, exported):
    from fdl import console
    from fdl.argv import split_global_flags

    monkeypatch.delenv("FLODL_VERBOSITY", raising=False)
    verbosity = split_global_flags([flag, "diagnose"]).verbosity
    console.configure(verbosity=verbosity, no_color=False, env=None)
    try:
        assert os.environ["FLODL_VERBOSITY"] == exported
        assert flog._parse_verbosity(os.environ["FLODL_VERBOSITY"]) == int(exported)
    finally:
        console.configure(verbosity=console.NORMAL, no_color=False, env=None)


def test_library_code_never_prints():
    """Diagnostics go through the ``flodl.*`` loggers (silent by default) and the monitor writes
    to the stream it was given: a ``print`` in the library would bypass both."""
    import ast
    from pathlib import Path

    import flodl

    offenders = []
    for path in Path(flodl.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            func = getattr(node, "func", None)
            if isinstance(node, ast.Call) and isinstance(func, ast.Name) and func.id == "print":
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
