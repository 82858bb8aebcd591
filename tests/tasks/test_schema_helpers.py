"""fdl.schema.from_argparse / from_typer: scripts answer --fdl-schema; fdl uses the answer.
And interpreter clarity: a task whose Python lacks torch/flodl gets a note naming both
interpreters; 'python:' in the manifest fixes it."""

from __future__ import annotations

import argparse
import enum
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Annotated

import pytest
import typer

from fdl.schema import from_argparse, from_typer
from fdl.tasks.schema import parse_schema
from tests.conftest import REPO_ROOT, clean_env


def test_from_argparse_covers_types_lists_positionals_and_reserved_names(capsys):
    parser = argparse.ArgumentParser(prog="t")
    parser.add_argument("run_id", nargs="?", help="which run")
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("-n", "--epochs", type=int, default=3, help="epochs (%(default)s)")
    parser.add_argument("--lr", type=float)
    parser.add_argument("--out", type=Path, default=Path("runs"))
    parser.add_argument("--tag", action="append")
    parser.add_argument("-v", "--verbose", action="count")  # -v is fdl's: the short is dropped
    parser.add_argument("-q", "--quiet", action="store_true")  # --quiet is fdl's: not listed
    parser.add_argument("-x", action="store_true")  # short-only: not listed
    schema = from_argparse(parser, strict=True)
    assert schema["strict"] is True
    assert schema["args"] == [
        {"name": "run_id", "type": "string", "description": "which run", "required": False},
        {"name": "files", "type": "list[path]", "required": False, "variadic": True},
    ]
    options = schema["options"]
    assert options["epochs"] == {
        "type": "int",
        "description": "epochs (3)",
        "default": 3,
        "short": "n",
    }
    assert options["lr"] == {"type": "float"}
    assert options["out"] == {"type": "path", "default": "runs"}
    assert options["tag"] == {"type": "list[string]"}
    assert options["verbose"] == {"type": "bool"}
    assert "quiet" not in options and "x" not in options
    parse_schema(schema)  # fdl accepts what the helper publishes
    with pytest.raises(SystemExit) as done:
        parser.parse_args(["--fdl-schema"])
    assert done.value.code == 0
    assert json.loads(capsys.readouterr().out) == schema
    assert parser.parse_args(["r1", "--epochs", "4"]).epochs == 4


class Mode(enum.StrEnum):
    a = "a"
    b = "b"


def test_from_typer_answers_and_describes(capsys):
    app = typer.Typer()

    @app.command()
    def main(
        name: str,
        size: Annotated[int, typer.Option("--size", "-s", help="how big", envvar="SIZE")] = 2,
        mode: Mode = Mode.a,
        fast: Annotated[bool, typer.Option("--fast")] = False,
        tags: Annotated[list[Path], typer.Option()] = [],  # noqa: B006 (Typer reads the default)
    ) -> None:
        pass

    schema = from_typer(app, argv=[])
    assert schema["args"] == [{"name": "name", "type": "string", "required": True}]
    assert schema["options"]["size"] == {
        "type": "int", "description": "how big", "default": 2, "short": "s", "env": "SIZE"
    }  # fmt: skip
    assert schema["options"]["mode"]["choices"] == ["a", "b"]
    assert schema["options"]["fast"] == {"type": "bool"}
    assert schema["options"]["tags"] == {"type": "list[path]", "default": []}
    parse_schema(schema)
    with pytest.raises(SystemExit) as done:
        from_typer(app, argv=["--fdl-schema"])
    assert done.value.code == 0 and json.loads(capsys.readouterr().out) == schema


SCRIPT = """\
import argparse
from fdl.schema import from_argparse
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=20, help="epochs to train")
parser.add_argument("--resume", action="store_true", help="continue")
parser.add_argument("--dashboard", type=int, metavar="PORT", help="live dashboard port")
from_argparse(parser)
print("trained", vars(parser.parse_args()))
"""


def run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fdl", *args],
        cwd=cwd, env=clean_env(**env), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_probed_argparse_script_drives_help_and_validation(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "fdl.yml").write_text(
        f"python: {sys.executable}\ncommands:\n  train:\n    run: python train.py\n    schema: probe\n"
    )
    assert "--epochs" not in run(tmp_path, "train", "--help").stdout  # help never runs it
    help_text = run(tmp_path, "train", "--refresh-schema", "--help").stdout
    for line in (
        "--epochs <INT>",
        "--resume",
        "--dashboard <INT>",
        "epochs to train (default: 20)",
    ):
        assert line in help_text
    assert run(tmp_path, "train", "--epochs", "x").returncode == 2
    ok = run(tmp_path, "train", "--epochs", "2", "--resume")
    assert ok.returncode == 0, ok.stderr
    assert "'epochs': 2, 'resume': True" in ok.stdout


def test_python_key_and_the_interpreter_note(tmp_path):
    # a bare interpreter without torch/flodl, first on PATH: a venv without site packages
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    (tmp_path / "fdl.yml").write_text(
        "commands:\n  t: {run: python -c 'import flodl'}\n  ok: {run: 'exit 4'}\n"
    )
    env = {"PATH": f"{bare / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    failed = run(tmp_path, "t", **env)
    assert failed.returncode == 1
    note = failed.stderr
    assert f"the task ran 'python' = {bare / 'bin' / 'python'}" in note
    assert "which cannot import torch" in note  # flodl is on PYTHONPATH, its torch is not
    assert f"fdl itself runs under {sys.executable}" in note
    assert "python: " in note  # the manifest fix is named
    plain = run(tmp_path, "ok", **env)
    assert plain.returncode == 4 and "the task ran" not in plain.stderr  # no python, no note
    (tmp_path / "fdl.yml").write_text(
        f"python: {sys.executable}\ncommands:\n  t: {{run: python -c 'import flodl'}}\n"
    )
    fixed = run(tmp_path, "t", **env)
    assert fixed.returncode == 0, fixed.stderr
    (tmp_path / "fdl.yml").write_text("python: nope/bin/python\ncommands:\n  t: {run: 'true'}\n")
    missing = run(tmp_path, "t")
    assert (
        missing.returncode == 1
        and "'python: " in missing.stderr
        and "does not exist" in missing.stderr
    )


def test_scaffold_train_answers_fdl_schema(tmp_path):
    template = (REPO_ROOT / "scaffold_templates/project/src/__package__/train.py.jinja").read_text()
    start = template.index("def parse_args")
    end = template.index("\n\n\n", start)
    code = "import argparse\nfrom pathlib import Path\n" + template[start:end]
    namespace: dict = {}
    exec(textwrap.dedent(code), namespace)
    with pytest.raises(SystemExit) as done:
        namespace["parse_args"](["--fdl-schema"])
    assert done.value.code == 0


def test_scaffold_train_help_lists_typed_options(run_fdl, tmp_path):
    assert run_fdl("init", "demo", cwd=tmp_path).returncode == 0
    root = tmp_path / "demo"
    manifest = (root / "fdl.yml.example").read_text()
    (root / "fdl.yml").write_text(f"python: {sys.executable}\n" + manifest)
    help_text = run_fdl("train", "--refresh-schema", "--help", cwd=root, timeout=300).stdout
    for line in ("--epochs <INT>", "--resume", "--dashboard <INT>", "--lr <FLOAT>"):
        assert line in help_text, help_text
    bad = run_fdl("train", "--epochs", "many", cwd=root)
    assert bad.returncode == 2 and "invalid value 'many' for --epochs" in bad.stderr
