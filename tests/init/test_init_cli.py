"""``fdl init`` from the command line: what it writes, what it refuses, and that it is atomic."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fdl.errors import FdlError
from fdl.scaffold.create import create
from fdl.scaffold.render import Answers
from tests.tasks.test_runner_cli import run_on_a_terminal


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_native_project(run_fdl, tmp_path):
    result = run_fdl("init", "my-model", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    root = tmp_path / "my-model"
    assert "Dockerfile" not in tree(root)
    assert {"src/my_model/train.py", "fdl.yml.example", ".fdl/project.toml"} <= tree(root)
    answers = tomllib.loads((root / ".fdl/project.toml").read_text())
    assert answers["answers"] == {
        "name": "my-model",
        "package": "my_model",
        "mode": "native",
        "cuda": "cu128",
        "cuda_reason": answers["answers"]["cuda_reason"],
    }
    assert set(answers["files"]) == tree(root) - {".fdl/project.toml"}
    # the exact next commands, on stderr (stdout stays clean for data)
    assert result.stdout == ""
    assert "cd my-model\n  fdl train -- --epochs 1" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["my-model"]  # no temp dir left


def test_docker_project_with_cuda_tag(run_fdl, tmp_path):
    result = run_fdl("init", "gpu-net", "--docker", "--cuda", "12.6", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    root = tmp_path / "gpu-net"
    assert {"Dockerfile", "Dockerfile.cuda", "docker-compose.yml"} <= tree(root)
    assert "whl/cu126" in (root / "docker-compose.yml").read_text()
    assert "fdl shell" in result.stderr
    # the generated manifest is immediately usable by the task runner
    help_text = run_fdl("--help", cwd=root).stdout
    assert "cuda-train" in help_text and "Environments: ci" in help_text


def test_existing_path_is_refused_and_left_alone(run_fdl, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("keep me")
    result = run_fdl("init", "taken", cwd=tmp_path)
    assert result.returncode == 1
    assert "'" + str(tmp_path / "taken") + "' already exists" in result.stderr
    assert tree(tmp_path / "taken") == {"mine.txt"}
    (tmp_path / "file").write_text("x")
    assert run_fdl("init", "file", cwd=tmp_path).returncode == 1


def test_an_empty_directory_is_accepted(run_fdl, tmp_path):
    (tmp_path / "empty").mkdir()
    assert run_fdl("init", "empty", cwd=tmp_path).returncode == 0
    assert (tmp_path / "empty" / "pyproject.toml").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["init", "bad name"], "contains ' '"),
        (["init", "x", "--docker", "--native"], "--docker and --native are mutually exclusive"),
        (["init", "x", "--cuda", "fast"], "--cuda 'fast' is not a CUDA version"),
        (["init"], "missing the project name"),
        (["init", "x", "--dry-run"], "--dry-run only applies to --update"),
    ],
)
def test_usage_errors_create_nothing(run_fdl, tmp_path, args, message):
    result = run_fdl(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_failure_while_writing_leaves_nothing_behind(tmp_path):
    # A template tree that renders both a file "proj" and "proj/x" (via the __package__ part):
    # writing fails half-way, after real files are already in the staging directory.
    templates = tmp_path / "templates"
    (templates / "a").mkdir(parents=True)
    (templates / "a" / "first.txt").write_text("written before the failure")
    (templates / "proj").write_text("a file named like the package")
    (templates / "__package__").mkdir()
    (templates / "__package__" / "x.jinja").write_text("{{ name }}")
    workdir = tmp_path / "work"
    workdir.mkdir()
    with pytest.raises(FdlError, match="nothing was written"):
        create(workdir / "proj", Answers("proj", "proj"), templates)
    assert list(workdir.iterdir()) == []


def test_template_errors_leave_nothing_behind(tmp_path):
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "ok.txt").write_text("fine")
    (templates / "bad.jinja").write_text("{{ no_such_variable }}")
    workdir = tmp_path / "work"
    workdir.mkdir()
    with pytest.raises(Exception, match="no_such_variable"):
        create(workdir / "proj", Answers("proj", "proj"), templates)
    assert list(workdir.iterdir()) == []


def test_interactive_mode_choice(tmp_path):
    code, output = run_on_a_terminal(["init", "asked"], tmp_path, b"y\n")
    assert code == 0, output
    assert "Add Docker images" in output
    assert (tmp_path / "asked" / "docker-compose.yml").is_file()


def test_ignore_files_keep_the_answers_and_leave_out_outputs(run_fdl, tmp_path):
    import subprocess

    import docker.utils.build

    assert run_fdl("init", "ignored", "--docker", "--cuda", "12.6", cwd=tmp_path).returncode == 0
    root = tmp_path / "ignored"
    (root / "libtorch" / "precompiled" / "cpu").mkdir(parents=True)
    (root / "libtorch" / "precompiled" / "cpu" / ".arch").write_text("torch=2.0\n")
    (root / "checkpoints").mkdir()
    (root / "checkpoints" / "epoch-1.fdl").write_bytes(b"x")
    (root / "model.fdl").write_bytes(b"x")
    git = ["git", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    paths = [
        ".fdl/project.toml",
        "libtorch/precompiled/cpu/.arch",
        "checkpoints/epoch-1.fdl",
        "model.fdl",
        "src/ignored/train.py",
    ]
    check = subprocess.run(
        [*git, "check-ignore", "--no-index", *paths],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode in (0, 1), check.stderr
    assert check.stdout.split() == paths[1:4]
    # and `git add -A` really picks up the answers file (what `fdl init --update` needs)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    staged = subprocess.run(
        [*git, "diff", "--cached", "--name-only"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert ".fdl/project.toml" in staged
    assert not [p for p in staged if p.startswith("libtorch/") or p.endswith(".fdl")]
    # the Docker build context (docker's own .dockerignore matcher) leaves libtorch out
    patterns = (root / ".dockerignore").read_text().split()
    context = set(docker.utils.build.exclude_paths(str(root), patterns))
    assert "src/ignored/train.py" in context
    assert not [p for p in context if p.startswith("libtorch") or p.endswith(".fdl")]
