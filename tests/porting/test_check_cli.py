"""`fdl check` as a command: exit codes, JSON report, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import clean_env

MINI = Path(__file__).resolve().parents[1] / "apiref" / "fixtures" / "mini"


def test_a_clean_script_passes_static_and_smoke(run_fdl, tmp_path):
    port = tmp_path / "port.py"
    port.write_text(
        "import flodl as fl\nimport torch\nassert issubclass(fl.FlodlError, Exception)\nprint(torch.ones(2).sum().item())\n"
    )
    result = run_fdl("check", str(port), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "smoke run (FLODL_SMOKE=1): ran to the end in" in result.stdout
    assert "check ok: 0 error(s), 0 warning(s) (flodl " in result.stdout


def test_the_smoke_run_says_it_runs_for_real_puts_back_what_it_overwrote_and_lists_the_rest(
    run_fdl, tmp_path
):
    (tmp_path / "model.pt").write_text("the real model")
    port = tmp_path / "port.py"
    port.write_text(
        "open('model.pt', 'w').write('the smoke model')\nopen('run.log', 'w').write('log')\n"
    )
    result = run_fdl("check", "port.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        f"smoke run: running port.py for real (FLODL_SMOKE=1, loops shortened) in {tmp_path}"
        in (result.stderr)
    )
    assert (
        "  note: the smoke run overwrote or deleted 1 existing file(s), put back as they were: "
        "model.pt (modified)" in result.stdout
    )
    assert (tmp_path / "model.pt").read_text() == "the real model"
    assert (
        "port.py: warning[smoke-wrote-files]: the smoke run left 1 file(s) changed: run.log "
        "(created); write elsewhere" in result.stdout
    )
    report = json.loads(run_fdl("check", "--json", "port.py", cwd=tmp_path).stdout)
    # run.log, made by the first run, existed for the second: put back too
    assert report["smoke"]["restored_files"] == [
        {"path": "model.pt", "change": "modified"},
        {"path": "run.log", "change": "modified"},
    ]
    assert report["smoke"]["changed_files"] == []
    assert report["smoke"]["kept_in"] is None
    quiet = tmp_path / "quiet.py"
    quiet.write_text("print(1)\n")
    assert "smoke-wrote-files" not in run_fdl("check", "quiet.py", cwd=tmp_path).stdout


def test_json_report(run_fdl, tmp_path):
    port = tmp_path / "port.py"
    port.write_text("import flodl as fl\nfl.NoSuchThing\n")
    result = run_fdl("check", "--json", "--path", str(MINI), str(port))
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["errors"] == 1 and report["flodl_version"] == "9.8.7"
    [finding] = report["findings"]
    assert finding == {
        "file": str(port),
        "line": 2,
        "col": 4,
        "severity": "error",
        "code": "unknown-name",
        "message": "`fl.NoSuchThing` does not exist: fl has no name 'NoSuchThing'",
        "suggestions": [],
        "target": "flodl.NoSuchThing",
    }
    assert report["smoke"] is None and report["smoke_skipped"] == "fix the errors above first"


def test_runtime_failure_in_json(run_fdl, tmp_path):
    port = tmp_path / "port.py"
    port.write_text("import torch\n\ntorch.nn.Linear(32, 2)(torch.zeros(4, 16))\n")
    report = json.loads(run_fdl("check", "--json", str(port)).stdout)
    smoke = report["smoke"]
    assert smoke["status"] == "failed" and smoke["exception"]["type"] == "RuntimeError"
    assert smoke["location"]["line"] == 3
    assert report["ok"] is False and report["errors"] == 0


def test_a_failed_smoke_run_is_the_verdict_not_zero_errors(run_fdl, tmp_path):
    port = tmp_path / "port.py"
    port.write_text("raise SystemExit(4)\n")
    result = run_fdl("check", str(port))
    assert result.returncode == 1
    assert "check failed: the smoke run failed (0 error(s), 0 warning(s)) (flodl " in result.stdout


def test_one_finding_per_mistake_and_the_verdict_counts_every_error_line(run_fdl, tmp_path):
    port = tmp_path / "port.py"
    port.write_text(
        "import torch\nimport flodl as fl\n\nx = torch.randn(8, 4)\n"
        "loader = fl.data.DataLoader.from_tensors(x=x).batchsize(4).build()\n"
    )
    result = run_fdl("check", "--no-run", str(port))
    lines = [line for line in result.stdout.splitlines() if "error[" in line]
    assert result.returncode == 1
    # the typo is one error, not also an unverified call of the method that does not exist
    assert len(lines) == 1 and "port.py:5:47: error[unknown-attribute]" in lines[0]
    assert "check failed: 1 error(s), 0 warning(s) (flodl " in result.stdout
    port.write_text(
        port.read_text() + "model = fl.FlowBuilder(torch.nn.Linear(4, 4)).build()\n"
        "if x.sum() > 1e9:\n    model.save_weights('model.fdl')\n"
    )
    result = run_fdl("check", "--no-run", str(port))
    assert [line for line in result.stdout.splitlines() if "error[" in line] == [
        *lines,
        f"{port}:8: error[unverified-call]: `model.save_weights(...)` did not run and cannot be "
        "checked statically (Graph defines no 'save_weights': only the smoke run can show it "
        "exists)",
    ]
    assert "check failed: 1 error(s), 1 warning(s), 1 unverified call site(s) (flodl " in (
        result.stdout
    )


def test_the_budget_shortens_the_loop_and_the_code_after_it_runs(run_fdl, tmp_path):
    port = tmp_path / "port.py"
    port.write_text(
        "import flodl as fl\n"
        "mon = fl.Monitor(50, stream=None, gpu=False)\n"
        "for epoch in range(50):\n"
        "    mon.log(epoch, 0.0, {'loss': 1.0})\n"
        "print('logged', len(mon.history))\n"
    )
    text = run_fdl("check", str(port), cwd=tmp_path)
    assert text.returncode == 0, text.stdout + text.stderr
    assert "the budget shortened the loop(s) at line(s) 3" in text.stdout
    assert "check ok: 0 error(s)" in text.stdout
    report = json.loads(run_fdl("check", "--json", str(port), cwd=tmp_path).stdout)
    assert report["ok"] is True and report["smoke"]["status"] == "passed"
    assert report["smoke"]["shortened_loops"] == [3]
    assert "logged 2" in report["smoke"]["output_tail"]
    assert report["call_sites"]["total"] == 2 and report["call_sites"]["ran"] == 2


def test_timeout_option_counts_cpu_time(run_fdl, tmp_path):
    port = tmp_path / "port.py"
    port.write_text("while True:\n    pass\n")
    result = run_fdl("check", "--timeout", "1", str(port))
    assert result.returncode == 1
    assert "error[smoke-timeout]: the smoke run used more than 1s of CPU time" in result.stdout
    assert "check failed: the smoke run timed out (0 error(s), 0 warning(s))" in result.stdout


def test_missing_script_is_a_usage_error(run_fdl, tmp_path):
    result = run_fdl("check", str(tmp_path / "missing.py"))
    assert result.returncode == 2 and "no such file" in result.stderr and result.stdout == ""


def test_a_directory_is_a_usage_error(run_fdl, tmp_path):
    result = run_fdl("check", str(tmp_path))
    assert result.returncode == 2 and result.stdout == ""
    assert (
        result.stderr == f"error: {tmp_path}: is a directory — pass the path of a Python script\n"
    )


def test_an_unreadable_script_is_an_error_not_a_traceback(monkeypatch, tmp_path, capsys):
    from fdl.main import main

    port = tmp_path / "port.py"
    port.write_text("print(1)\n")
    real = Path.read_text

    def refuse(self, *args, **kwargs):
        if self == port:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refuse)
    code = main(["check", "--no-run", "--path", str(MINI), str(port)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"error: cannot read {port}: Permission denied — check the file's permissions" in err


def test_path_that_is_a_file_is_a_clear_error(run_fdl, tmp_path):
    port = tmp_path / "port.py"
    port.write_text("print(1)\n")
    result = run_fdl("check", "--path", str(port), str(port))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"error: --path {port}: not a directory" in result.stderr


def chain_script(steps: int) -> str:
    links = "".join(".through(nn.Linear(4, 4))" for _ in range(steps))
    return (
        "import torch\nfrom torch import nn\nimport flodl as fl\n\n"
        f"model = fl.FlowBuilder(nn.Linear(4, 4)){links}.build()\n"
        "print(model(torch.ones(1, 4)).shape)\n"
    )


def test_a_long_builder_chain_python_runs_is_checked_and_run(run_fdl, tmp_path):
    # 600 chained calls: Python compiles and runs it; walking its syntax tree took more frames
    # than the default recursion limit (a RecursionError traceback before).
    port = tmp_path / "port.py"
    port.write_text(chain_script(600))
    result = run_fdl("check", str(port), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "smoke run (FLODL_SMOKE=1): ran to the end in" in result.stdout
    assert "check ok: 0 error(s)" in result.stdout


def test_a_chain_too_deep_for_python_is_one_clear_error(run_fdl, tmp_path):
    port = tmp_path / "port.py"
    port.write_text(chain_script(1500))  # `python port.py` fails to compile this
    result = run_fdl("check", "--json", str(port))
    assert result.returncode == 1
    [finding] = json.loads(result.stdout)["findings"]
    assert (
        finding["code"] == "syntax-error"
        and "nests deeper than Python can compile" in (finding["message"])
    )
    assert "Traceback" not in result.stderr


# The smoke run overwrites model.pt, starts a grandchild, writes both pids, then waits forever.
HANGING = """
import os, subprocess, sys, time
open("model.pt", "w").write("the smoke model")
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
with open("pids.tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.replace("pids.tmp", "pids")
while True:
    time.sleep(1)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")  # a zombie is gone for our purpose
    return stat.exists() and stat.read_text().split(") ", 1)[1][0] != "Z"


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_stopping_fdl_check_stops_the_smoke_run(tmp_path, signum, code):
    (tmp_path / "hang.py").write_text(HANGING)
    (tmp_path / "model.pt").write_text("the real model")
    fdl = subprocess.Popen(
        [sys.executable, "-m", "fdl", "check", "hang.py"],
        cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # only fdl gets the signal, as from `kill` or a CI timeout
    )  # fmt: skip
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "pids").exists():
            assert fdl.poll() is None, fdl.communicate()
            assert time.monotonic() < deadline, "the smoke run never started"
            time.sleep(0.05)
        pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
        os.kill(fdl.pid, signum)
        assert fdl.wait(timeout=30) == code
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(pid) for pid in pids), "the smoke run outlived fdl check"
        name = signal.Signals(signum).name
        assert f"error: interrupted by {name}: the smoke run was stopped too" in fdl.stderr.read()
        assert (tmp_path / "model.pt").read_text() == "the real model"  # put back all the same
    finally:
        for pid in (fdl.pid, *pids):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        fdl.communicate()


@pytest.mark.slow
def test_sigint_reaches_the_smoke_run_of_a_background_fdl_check(tmp_path):
    # sh without job control starts `fdl check ... &` with SIGINT ignored: the smoke run must
    # not inherit that, or its Ctrl-C handling never runs and it is killed after the grace.
    (tmp_path / "hang.py").write_text(
        "import os, time\nopen('pids', 'w').write(str(os.getpid()))\n"
        "try:\n    time.sleep(300)\nexcept KeyboardInterrupt:\n    open('stopped', 'w').close()\n"
    )
    script = f'"{sys.executable}" -m fdl check hang.py & echo $! > fdl.pid; wait $!; echo "rc=$?"'
    shell = subprocess.Popen(
        ["sh", "-c", script],
        cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "pids").exists() or not (tmp_path / "pids").read_text():
            assert shell.poll() is None, shell.communicate()
            assert time.monotonic() < deadline, "the smoke run never started"
            time.sleep(0.05)
        pids = [int((tmp_path / "fdl.pid").read_text()), int((tmp_path / "pids").read_text())]
        os.kill(pids[0], signal.SIGINT)
        out, _ = shell.communicate(timeout=60)
        assert "rc=130" in out
        assert (tmp_path / "stopped").exists(), "the script's KeyboardInterrupt handling never ran"
    finally:
        for pid in (shell.pid, *pids):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_killed_fdl_check_is_reported_and_its_files_recovered(run_fdl, tmp_path):
    (tmp_path / "hang.py").write_text(HANGING)
    (tmp_path / "model.pt").write_text("the real model")
    fdl = subprocess.Popen(
        [sys.executable, "-m", "fdl", "check", "hang.py"],
        cwd=tmp_path, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "pids").exists():
            assert fdl.poll() is None
            assert time.monotonic() < deadline, "the smoke run never started"
            time.sleep(0.05)
        pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
        from fdl.porting import leftovers

        assert leftovers.find([tmp_path]) == []  # a check at work is not an interrupted one
        fdl.kill()  # SIGKILL: no chance to put anything back
        fdl.wait(timeout=30)
        assert (tmp_path / "model.pt").read_text() == "the smoke model"
        assert leftovers.find([tmp_path]) == []  # its smoke run still runs, and may still write
        os.killpg(pids[0], signal.SIGKILL)  # now the run is over too
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        for pid in (fdl.pid, *pids):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    [folder] = [p.name for p in tmp_path.iterdir() if p.name.startswith(".fdl-check-")]

    static = run_fdl("check", "--no-run", "hang.py", cwd=tmp_path)
    assert static.returncode == 0, static.stdout + static.stderr  # a warning, not a failure
    assert (
        f"hang.py: warning[interrupted-check]: an earlier fdl check (pid {fdl.pid}) was stopped "
        f"before it put back 1 file(s) its smoke run had overwritten: model.pt; the originals "
        f"are in {folder} — `fdl check --recover` puts them back" in static.stdout
    )
    report = json.loads(run_fdl("check", "--no-run", "--json", "hang.py", cwd=tmp_path).stdout)
    assert report["interrupted_checks"] == [
        {"folders": [folder], "pid": fdl.pid, "files": ["model.pt"]}
    ]

    recovered = run_fdl("check", "--recover", "--json", cwd=tmp_path)
    assert recovered.returncode == 0, recovered.stderr
    assert json.loads(recovered.stdout) == {
        "recovered": [
            {"path": "model.pt", "restored": True, "replaced": f"{folder}/replaced/model.pt"}
        ]
    }
    assert (tmp_path / "model.pt").read_text() == "the real model"
    assert (tmp_path / folder / "replaced" / "model.pt").read_text() == "the smoke model"
    again = run_fdl("check", "--recover", cwd=tmp_path)
    assert again.returncode == 0
    assert "nothing to recover: no interrupted fdl check left files here" in again.stderr
    assert "interrupted-check" not in run_fdl("check", "--no-run", "hang.py", cwd=tmp_path).stdout


def test_recover_says_what_it_put_back(run_fdl, tmp_path):
    from tests.porting.test_leftovers import killed_check

    (tmp_path / "model.pt").write_text("the real model")
    (tmp_path / "old.csv").write_text("rows")
    folder = killed_check(
        tmp_path, "import os\nopen('model.pt', 'w').write('smoke')\nos.remove('old.csv')\n"
    ).name
    result = run_fdl("check", "--recover", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"put back model.pt (the file in its place is now {folder}/replaced/model.pt)" in (
        result.stderr
    )
    assert "put back old.csv\n" in result.stderr
    assert f"kept for you to delete: {folder}" in result.stderr
    assert (tmp_path / "old.csv").read_text() == "rows"


def test_check_without_a_script_is_a_usage_error(run_fdl, tmp_path):
    result = run_fdl("check", cwd=tmp_path)
    assert result.returncode == 2
    assert "missing SCRIPT" in result.stderr
