"""Stopping ``fdl`` stops its task: SIGTERM / SIGINT sent to fdl reach the task's whole process
group, and no process outlives fdl. Real signals, real processes; every wait is bounded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fdl.tasks.child import GRACE_S
from tests.conftest import clean_env

pytestmark = pytest.mark.slow

# The task: a shell that starts a grandchild (python) and waits for it. The grandchild writes
# both pids, then sleeps; it ignores SIGTERM when asked to (a task that will not stop).
GRANDCHILD = """
import os, signal, sys, time
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if sys.argv[1] == "saver":  # takes a moment to save its state, after its shell is gone
    def save(*_):
        time.sleep(1)
        open("saved", "w").close()
        sys.exit(143)
    signal.signal(signal.SIGTERM, save)
with open("pids.tmp", "w") as f:
    f.write(f"{os.getppid()} {os.getpid()}")
os.replace("pids.tmp", "pids")
try:
    time.sleep(3 if sys.argv[1] == "brief" else 300)  # brief: done on its own, exit 0
except KeyboardInterrupt:
    print("grandchild: interrupted", flush=True)
    sys.exit(130)
"""


@pytest.fixture
def task_project(tmp_path) -> Path:
    (tmp_path / "grandchild.py").write_text(GRANDCHILD)
    python = sys.executable
    (tmp_path / "fdl.yml").write_text(
        "commands:\n"
        f"  work:\n    run: {python} grandchild.py polite; echo after\n"
        f"  stubborn:\n    run: {python} grandchild.py stubborn; echo after\n"
        f"  saver:\n    run: {python} grandchild.py saver; echo after\n"
        f"  brief:\n    run: {python} grandchild.py brief; echo after\n"
    )
    return tmp_path


def launch(project: Path, argv: list[str]) -> tuple[subprocess.Popen[str], list[int]]:
    """``argv`` started in ``project`` in a session of its own (only what the test signals gets
    the signal), once the task has written its pids; killed if it never does."""
    proc = subprocess.Popen(
        argv,
        cwd=project,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (project / "pids").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the task never started"
            time.sleep(0.05)
    except BaseException:
        kill_alive([proc.pid])
        raise
    return proc, [int(p) for p in (project / "pids").read_text().split()]


def start(project: Path, command: str) -> tuple[subprocess.Popen[str], list[int]]:
    return launch(project, [sys.executable, "-m", "fdl", command])


def kill_alive(pids: list[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose; /proc says so
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1][0] != "Z"


def stop(proc: subprocess.Popen[str], pids: list[int], signum: int, timeout: float) -> int:
    try:
        os.kill(proc.pid, signum)  # to fdl only, as `kill PID` or a CI timeout does
        return proc.wait(timeout=timeout)
    finally:
        kill_alive([proc.pid, *pids])


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_fdl_reaches_the_whole_task(task_project, signum, code):
    proc, pids = start(task_project, "work")
    assert stop(proc, pids, signum, timeout=30) == code
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids), "a task process outlived fdl"
    out = proc.stdout.read()
    if signum == signal.SIGINT:  # the grandchild got it and decided how to exit
        assert "grandchild: interrupted" in out
    assert "after" not in out  # the shell was stopped too, not only its child


def test_a_task_that_ignores_sigterm_is_killed_after_the_grace_period(task_project):
    proc, pids = start(task_project, "stubborn")
    began = time.monotonic()
    stop(proc, pids, signal.SIGTERM, timeout=GRACE_S + 30)
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids), "a stubborn task outlived fdl"
    assert time.monotonic() - began < GRACE_S + 30


def test_a_task_finishing_its_cleanup_is_not_cut_short(task_project):
    # The shell dies at once; the grandchild saves for a second: fdl waits for it (grace).
    proc, pids = start(task_project, "saver")
    assert stop(proc, pids, signal.SIGTERM, timeout=GRACE_S + 30) == 143
    assert (task_project / "saved").exists()
    assert not any(alive(pid) for pid in pids)


def test_sigint_reaches_a_task_of_a_background_fdl_started_by_sh(task_project):
    # sh without job control starts `fdl work &` with SIGINT ignored; the task must not inherit
    # that, or the forwarded SIGINT does nothing and fdl kills the task after the grace (137).
    script = f'"{sys.executable}" -m fdl work & echo $! > fdl.pid; wait $!; echo "rc=$?"'
    shell, pids = launch(task_project, ["sh", "-c", script])
    try:
        pids.insert(0, int((task_project / "fdl.pid").read_text()))  # fdl, started by sh
        began = time.monotonic()
        os.kill(pids[0], signal.SIGINT)  # to fdl only, as `kill -INT $!` does
        out, _ = shell.communicate(timeout=GRACE_S + 30)
        assert time.monotonic() - began < GRACE_S / 2  # not killed after the grace period
        assert "grandchild: interrupted" in out and "rc=130" in out
    finally:
        kill_alive([shell.pid, *pids])


def test_sighup_ignored_by_a_nohup_fdl_is_not_forwarded_nor_a_reason_to_kill(task_project):
    # `nohup fdl train &` starts fdl with SIGHUP ignored, and the task inherits that: the SIGHUP
    # of a closed SSH session must not start the grace period, after which fdl killed the task
    # (137). The grace is cut to 1 s here; the task ends on its own (0) 3 s after it started.
    run_fdl = "import fdl.tasks.child as c; c.GRACE_S = 1.0; from fdl.main import main; " + (
        "raise SystemExit(main())"
    )
    script = f"trap '' HUP; exec \"{sys.executable}\" -c '{run_fdl}' brief"
    proc, pids = launch(task_project, ["sh", "-c", script])
    try:
        os.kill(proc.pid, signal.SIGHUP)  # to fdl only (sh exec'd it), as a closed session does
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, (proc.returncode, out, err)
        assert "after" in out  # the task ran to its end, its shell too
    finally:
        kill_alive([proc.pid, *pids])
