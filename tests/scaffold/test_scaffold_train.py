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
from tests.scaffold.generated import saved_epoch, shell

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
    assert saved_epoch(project / "ckpt-c") >= 1
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


# Trains `demo` from a subprocess. With AT=N, a real SIGINT reaches the process at its first
# write into the N-th file it writes in the checkpoint directory, that is in the middle of a
# save; Python raises KeyboardInterrupt there, as for a Ctrl-C typed at that moment.
INTERRUPTED_SAVE = """
import os, signal, sys
from demo import train

ckpt, runs, epochs, at = sys.argv[1:5]
common = ["--device", "cpu", "--epochs", epochs, "--checkpoint-dir", ckpt, "--runs-dir", runs]
if at == "resume":
    print("LOSS", repr(train.main([*common, "--resume"])))
    raise SystemExit(0)
files, last = 0, None

def probe(frame, event, arg):
    global files, last
    if event != "c_call" or getattr(arg, "__name__", "") != "write":
        return
    name = str(getattr(getattr(arg, "__self__", None), "name", ""))
    # the temporary file sits beside the real path of the destination (links resolved)
    if not name.startswith(os.path.realpath(ckpt) + os.sep) or name == last:
        return
    files, last = files + 1, name
    if files == int(at):
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGINT)
        (lambda: None)()  # a call: Python runs the signal's handler here, inside the write

if at != "none":
    sys.setprofile(probe)
try:
    print("LOSS", repr(train.main(common)))
except SystemExit as stop:
    print("EXIT", stop.code, "FILES", files)
"""
EPOCHS = "6"


def train_demo(project: Path, ckpt: Path, at: str) -> subprocess.CompletedProcess[str]:
    runs = ckpt.parent / f"{ckpt.name}-runs"
    return subprocess.run(
        [sys.executable, "-c", INTERRUPTED_SAVE, str(ckpt), str(runs), EPOCHS, at],
        cwd=project, capture_output=True, text=True, timeout=300, check=False,
        env=clean_env(
            PYTHONPATH=f"{project / 'src'}{os.pathsep}{clean_env()['PYTHONPATH']}",
            OMP_NUM_THREADS="1",
        ),
    )  # fmt: skip


def loss_of(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return re.search(r"^LOSS (\S+)$", result.stdout, re.MULTILINE).group(1)


@pytest.fixture(scope="module")
def uninterrupted_loss(project, tmp_path_factory) -> str:
    return loss_of(train_demo(project, tmp_path_factory.mktemp("whole") / "ck", "none"))


@pytest.mark.parametrize("nth_file", [1, 5])
def test_ctrl_c_during_a_save_leaves_one_epoch_to_resume_from(
    project, tmp_path, uninterrupted_loss, nth_file
):
    # The 5th file written was, with one file per part (model, optimizer, epoch), the optimizer
    # of epoch 2 after its model: resuming then mixed epoch 2's weights with epoch 1's
    # optimizer and epoch number. Whatever the save that is cut short, the resumed run must
    # end exactly where the uninterrupted one does.
    ckpt = tmp_path / "ck"
    cut = train_demo(project, ckpt, str(nth_file))
    assert f"EXIT 130 FILES {nth_file}" in cut.stdout, cut.stdout + cut.stderr
    assert not list(ckpt.glob(".*.tmp"))  # the cut write left no partial file behind
    resumed = train_demo(project, ckpt, "resume")
    assert loss_of(resumed) == uninterrupted_loss, resumed.stdout
    if nth_file == 1:
        assert "no checkpoint in" in resumed.stdout
    else:
        assert "resumed from" in resumed.stdout


def test_resume_refuses_the_three_files_of_an_older_train_py(project, tmp_path):
    ckpt = tmp_path / "ck"
    ckpt.mkdir()
    for name in ("model.fdl", "optimizer.fdl"):
        (ckpt / name).write_bytes(b"x")
    (ckpt / "state.json").write_text(json.dumps({"epoch": 3}))
    result = train_demo(project, ckpt, "resume")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "holds the three-file checkpoint of an older train.py" in result.stderr
    assert "Train without --resume to start over" in result.stderr
    assert "Traceback" not in result.stderr


def test_train_help_states_each_default_once(project):
    # fdl adds "(default: ...)" from the script's schema: a help text saying it too doubled it.
    result = subprocess.run(
        ["fdl", "train", "--refresh-schema", "-h"],
        cwd=project, env=env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(re.search(r"--epochs .*epochs to train \(default: 20\)$", line) for line in lines)
    assert any(re.search(r"--runs-dir .*reports go \(default: runs\)$", line) for line in lines)
    assert not [line for line in lines if line.count("(default:") > 1], result.stdout


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_smoke_run_leaves_the_real_checkpoints_and_runs_alone(project, tmp_path):
    # `fdl check src/demo/train.py`, as the docstring suggests, with a real checkpoint there:
    # the smoke run's throwaway model must not replace it, nor add a run to runs/.
    real = project / "checkpoints" / "training.fdl"
    real.parent.mkdir(exist_ok=True)
    real.write_bytes(b"my real checkpoint")
    before = {name: snapshot(project / name) for name in ("checkpoints", "runs")}
    checked = subprocess.run(
        ["fdl", "check", "src/demo/train.py"], cwd=project, env={**env(), "TMPDIR": str(tmp_path)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert {name: snapshot(project / name) for name in ("checkpoints", "runs")} == before
    (scratch,) = tmp_path.glob("demo-smoke-*")
    assert saved_epoch(scratch / "checkpoints") == 1  # the smoke run's 2 epochs, saved there
    assert list((scratch / "runs").glob("*/report.html"))

    # run by hand, it says where they went
    (tmp_path / "by-hand").mkdir()
    by_hand = subprocess.run(
        [sys.executable, "-m", "demo.train"], cwd=project, capture_output=True, text=True,
        env={**env(), "TMPDIR": str(tmp_path / "by-hand"), "FLODL_SMOKE": "1",
             "PYTHONPATH": f"{project / 'src'}{os.pathsep}{env()['PYTHONPATH']}"},
        timeout=300, check=False,
    )  # fmt: skip
    assert by_hand.returncode == 0, by_hand.stdout + by_hand.stderr
    (scratch,) = (tmp_path / "by-hand").glob("demo-smoke-*")
    assert (
        f"FLODL_SMOKE: --checkpoint-dir and --runs-dir (default) redirected to {scratch}, "
        "left there for you to inspect (delete it when done)\n"
    ) in by_hand.stdout
    assert {name: snapshot(project / name) for name in ("checkpoints", "runs")} == before


@pytest.mark.parametrize("value", ["0", "-3"])
def test_epochs_below_one_are_a_usage_error(project, value):
    result = subprocess.run(
        ["fdl", "train", "--", "--epochs", value], cwd=project, env=env(), capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"argument --epochs: must be at least 1, not {value}" in result.stderr
    assert "Traceback" not in result.stderr
