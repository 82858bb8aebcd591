"""`fdl --help` and `fdl --version` must not import heavy libraries (an import-graph fact)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer

from fdl.app import app
from tests.conftest import clean_env

HEAVY = ("torch", "requests", "docker", "jinja2", "griffe", "numpy", "yaml")

PROBE = """
{preamble}
import json, sys
from fdl.main import main
code = main(sys.argv[1:])
sys.stdout.flush()
print("\\n@@" + json.dumps(sorted(m.split(".")[0] for m in sys.modules)))
"""


def modules_after(*argv: str, preamble: str = "") -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(preamble=preamble), *argv],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
    )
    marker = result.stdout.rindex("@@")
    return set(json.loads(result.stdout[marker + 2 :]))


def _help_paths() -> list[tuple[str, ...]]:
    command = typer.main.get_command(app)
    paths: list[tuple[str, ...]] = [("--help",), ("--version",), ()]
    for name, sub in command.commands.items():
        paths.append((name, "--help"))
        paths.extend((name, child, "--help") for child in getattr(sub, "commands", {}))
    return paths


@pytest.mark.parametrize("argv", _help_paths(), ids=lambda a: " ".join(a) or "<none>")
def test_help_and_version_do_not_import_heavy_modules(argv):
    loaded = modules_after(*argv)
    assert "fdl" in loaded  # the probe really ran the CLI
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    # Help is click's plain layout: typer's rich help would pull in rich's markdown, syntax and
    # traceback renderers (markdown-it, pygments) and triple the start-up time.
    assert "rich" not in loaded and "markdown_it" not in loaded and "pygments" not in loaded


def test_the_probe_can_see_an_import():
    # Guard against a probe that could never fail.
    assert "sqlite3" in modules_after("--version", preamble="import sqlite3")
