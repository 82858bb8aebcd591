"""Helpers for task-runner tests: write a project tree from a dict of files."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def project(tmp_path: Path) -> Callable[[dict[str, str]], Path]:
    """``project({"fdl.yml": "...", "sub/fdl.yml": "..."})`` writes the files, returns the root."""

    def make(files: dict[str, str]) -> Path:
        root = tmp_path / "proj"
        for relative, text in files.items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return root

    return make
