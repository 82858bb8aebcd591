"""The generated ``train.py`` as a user drives it: resume, dashboard, reports, Ctrl-C — through
``fdl``, with real signals on a real pseudo-terminal. Every wait is bounded."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import termios
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import clean_env
from tests.scaffold.generated import shell

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("scaffold")
    # fdl.yml in place: on a terminal, fdl would otherwise offer to copy the example first
    result = shell("fdl init demo --native && cp demo/fdl.yml.example demo/fdl.yml", root)
    assert result.returncode == 0, result.stderr
    return root / "demo"


def env() -> dict[str, str]:
    bin_dir = Path(sys.executable).parent
    return clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", OMP_NUM_THREADS="1")


class Terminal:
    """``fdl ARGS`` in its own session with a pseudo-terminal as its controlling terminal, so
    Ctrl-C typed into it is delivered by the kernel to the terminal's foreground process group."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.leader, follower = pty.openpty()

        def controlling_tty() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(
            ["fdl", *args], cwd=cwd, env=env(), stdin=follower, stdout=follower, stderr=follower,
            start_new_session=True, preexec_fn=controlling_tty,
        )  # fmt: skip
        os.close(follower)
        self.output = ""

    def read_until(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while (match := re.search(pattern, self.output)) is None:
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} within {timeout}s:\n{self.output[-3000:]}"
            ready, _, _ = select.select([self.leader], [], [], min(left, 1.0))
            if ready:
                try:
                    chunk = os.read(self.leader, 4096)
                except OSError:
                    chunk = b""
                if not chunk and self.proc.poll() is not None:
                    raise AssertionError(f"exited before {pattern!r}:\n{self.output[-3000:]}")
                self.output += chunk.decode(errors="replace")
        return match

    def ctrl_c(self) -> None:
        os.write(self.leader, b"\x03")

    def finish(self, timeout: float = 60) -> int:
        code = self.proc.wait(timeout=timeout)
        while True:  # drain what is left
            ready, _, _ = select.select([self.leader], [], [], 0.2)
            if not ready:
                break
            try:
                chunk = os.read(self.leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            self.output += chunk.decode(errors="replace")
        os.close(self.leader)
        return code


def test_ctrl_c_stops_training_with_one_line_and_exit_130(project):
    term = Terminal(["train", "--", "--epochs", "100000", "--checkpoint-dir", "ckpt-c"], project)
    try:
        term.read_until(r"\b2/100000")
        term.ctrl_c()
        code = term.finish()
    finally:
        if term.proc.poll() is None:
            os.killpg(term.proc.pid, signal.SIGKILL)
    assert code == 130, term.output[-3000:]
    assert "Traceback" not in term.output
    lines = [line for line in term.output.splitlines() if "interrupted" in line]
    assert len(lines) == 1 and "continue with --resume" in lines[0], term.output[-3000:]
    assert json.loads((project / "ckpt-c" / "state.json").read_text())["epoch"] >= 1
    run_dir = Path(re.search(r"reports in (\S+)/", lines[0]).group(1))
    assert (project / run_dir / "report.html").is_file()
    csv_rows = (project / run_dir / "metrics.csv").read_text().splitlines()
    assert len(csv_rows) >= 3  # the header and every epoch logged before Ctrl-C


def test_the_dashboard_stays_up_after_training_until_ctrl_c(project):
    term = Terminal(
        ["train", "--", "--epochs", "2", "--dashboard", "0", "--checkpoint-dir", "ckpt-d"], project
    )
    try:
        url = term.read_until(r"dashboard stays up at (http://\S+) until Ctrl-C").group(1)
        time.sleep(0.5)  # still serving after training finished
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200
            assert b"<html" in response.read().lower()
        term.ctrl_c()
        code = term.finish()
    finally:
        if term.proc.poll() is None:
            os.killpg(term.proc.pid, signal.SIGKILL)
    assert code == 0, term.output[-3000:]  # stopping the dashboard after a complete run
    assert "Traceback" not in term.output
    assert any((project / "runs").glob("*/report.html"))


def test_linger_bounds_the_dashboard_wait(project):
    result = subprocess.run(
        ["fdl", "train", "--", "--epochs", "1", "--dashboard", "0", "--linger", "0.2"],
        cwd=project, env=env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert re.search(r"stays up at http://\S+:\d+ for 0.2 s", result.stdout), result.stdout


def test_resume_tells_the_monitor_where_it_starts(project, tmp_path):
    # A spy around fl.Monitor (the dependency, not the script under test) records its arguments.
    script = f"""
import flodl as fl
seen = []
class Spy(fl.Monitor):
    def __init__(self, num_epochs, **kwargs):
        seen.append((num_epochs, kwargs.get("start_epoch", 0)))
        super().__init__(num_epochs, **kwargs)
fl.Monitor = Spy
from demo import train
common = ["--device", "cpu", "--checkpoint-dir", {str(tmp_path / "ck")!r},
          "--runs-dir", {str(tmp_path / "runs")!r}]
train.main(["--epochs", "2", *common])
train.main(["--epochs", "5", "--resume", *common])
print("SEEN", seen)
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=project, capture_output=True, text=True, timeout=300,
        env=clean_env(PYTHONPATH=f"{project / 'src'}{os.pathsep}{clean_env()['PYTHONPATH']}"),
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "SEEN [(2, 0), (5, 2)]" in result.stdout
