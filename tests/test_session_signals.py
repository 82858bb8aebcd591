"""The suite's Ctrl-C tests hold however it is launched: a run started with SIGINT ignored (a
background job of a shell without job control) still starts its processes taking Ctrl-C."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

LAUNCH_IGNORING_SIGINT = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
os.execv(sys.executable, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", sys.argv[1]])
"""


@pytest.mark.slow
def test_a_ctrl_c_test_passes_in_a_run_started_ignoring_sigint():
    test = "tests/tasks/test_signals.py::test_a_signal_to_fdl_reaches_the_whole_task[2-130]"
    result = subprocess.run(
        [sys.executable, "-c", LAUNCH_IGNORING_SIGINT, test],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "1 passed" in result.stdout
