"""The suite keeps its temp files to itself: under pytest's base temp, never the machine's /tmp."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path


def test_temp_files_of_the_session_and_its_subprocesses_stay_under_pytest_base_temp(
    tmp_path_factory,
):
    base = tmp_path_factory.getbasetemp().resolve()
    here = Path(tempfile.mkdtemp()).resolve()
    child = subprocess.run(
        [sys.executable, "-c", "import tempfile; print(tempfile.mkdtemp())"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    there = Path(child.stdout.strip()).resolve()
    assert here.is_relative_to(base), here
    assert there.is_relative_to(base), there
