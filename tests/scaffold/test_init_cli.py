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
    install = ("torch_pin", "torch_index", "torch_reason", "flodl_wheel", "flodl_origin")
    assert {k: v for k, v in answers["answers"].items() if k not in install} == {
        "name": "my-model",
        "package": "my_model",
        "mode": "native",
        "cuda": "",  # chosen when Docker is added: a native project probes no GPU
        "cuda_reason": "",
        "torch": "",
    }  # the install answers are checked in test_install.py
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
    # what fdl writes under .fdl/ besides the answers: a bundled wheel (committed) and the task
    # schema cache, beside the root manifest and a child one (absolute paths: never committed)
    (root / ".fdl" / "wheels").mkdir(exist_ok=True)
    (root / ".fdl" / "wheels" / "flodl-0.1.0-py3-none-any.whl").write_bytes(b"x")
    for cache in (root / ".fdl" / "schema-cache", root / "tools" / ".fdl" / "schema-cache"):
        cache.mkdir(parents=True)
        (cache / "train.json").write_text('{"python": "/home/me/.venv/bin/python"}')
    git = ["git", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    committed = [".fdl/project.toml", ".fdl/wheels/flodl-0.1.0-py3-none-any.whl"]
    ignored = [
        "libtorch/precompiled/cpu/.arch",
        "checkpoints/epoch-1.fdl",
        "model.fdl",
        ".fdl/schema-cache/train.json",
        "tools/.fdl/schema-cache/train.json",
    ]
    check = subprocess.run(
        [*git, "check-ignore", "--no-index", *committed, *ignored, "src/ignored/train.py"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode in (0, 1), check.stderr
    assert check.stdout.split() == ignored
    # and `git add -A` really picks up the answers file (what `fdl init --update` needs)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    staged = subprocess.run(
        [*git, "diff", "--cached", "--name-only"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert set(committed) <= set(staged)
    assert not [p for p in staged if p.startswith("libtorch/") or p.endswith(".fdl")]
    assert not [p for p in staged if "schema-cache" in p]
    # the Docker build context (docker's own .dockerignore matcher) leaves libtorch out
    patterns = (root / ".dockerignore").read_text().split()
    context = set(docker.utils.build.exclude_paths(str(root), patterns))
    assert "src/ignored/train.py" in context
    assert not [
        p
        for p in context
        if p.startswith("libtorch")
        or (p.endswith(".fdl") and (root / p).is_file())
        or "schema-cache" in p
    ]


def test_gitignore_keeps_your_data_and_the_bundled_wheel(tmp_path):
    import subprocess

    from fdl.scaffold.bundle import wheel_name

    root = tmp_path / "data"
    create(root, Answers("data", "data", flodl_wheel=wheel_name(), flodl_origin="x"))
    mine = ["data/train.csv", "notes.log", "docs/index.html"]  # yours: committed
    outputs = ["runs/20250101-120000/report.html", "runs/20250101-120000/metrics.csv"]
    # a global gitignore (core.excludesFile) of *.whl, as many have: the clone would lack the
    # wheel constraints.txt installs flodl from
    excludes = tmp_path / "global-ignore"
    excludes.write_text("*.whl\n")
    git = ["git", "-c", "init.defaultBranch=main", "-c", f"core.excludesFile={excludes}"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    wheel = f".fdl/wheels/{wheel_name()}"
    check = subprocess.run(
        [*git, "check-ignore", "--no-index", *mine, *outputs, wheel],
        cwd=root, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert check.returncode in (0, 1), check.stderr
    assert check.stdout.split() == outputs


def _load_table_newest():
    from fdl.variants import load_table

    return load_table().newest


@pytest.mark.parametrize(
    ("machine", "args", "tag", "torch", "reason"),
    [
        (None, (), "newest-default", "newest", "no NVIDIA GPU on this machine: torch "),
        (
            "gtx1060",
            (),
            "cu126",
            "newest",
            "fits this machine: NVIDIA GeForce GTX 1060 6GB (sm_61)",
        ),
        # CUDA 13 needs driver 580: the newest torch with a cu128 build, pinned, not "torch"
        ("blackwell_driver575", (), "cu128", "2.11.0", "driver 575.64.03"),
        ("mixed_gtx1060_rtx5060ti", (), "cu132", "newest", "runs on GPU 1 only"),
        ("gtx1060", ("--cuda", "12.8"), "cu128", "2.11.0", "chosen with --cuda"),
    ],
)
def test_docker_gpu_image_is_what_the_resolver_picks_for_this_machine(
    run_fdl, tmp_path, machine, args, tag, torch, reason
):
    from tests.fixtures.machines import fdl_env, make_bin

    newest = _load_table_newest()
    tag = newest.pypi_default if tag == "newest-default" else tag
    torch = newest.torch if torch == "newest" else torch
    env = fdl_env(tmp_path, PATH=str(make_bin(tmp_path, machine)))
    result = run_fdl("init", "gpu", "--docker", *args, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    root = tmp_path / "gpu"
    answers = tomllib.loads((root / ".fdl/project.toml").read_text())["answers"]
    assert (answers["cuda"], answers["torch"]) == (tag, torch)
    assert reason in answers["cuda_reason"]
    assert f"GPU image: torch {torch} + {tag} (" in result.stderr  # said, not silent
    dockerfile = (root / "Dockerfile.cuda").read_text()
    assert f"ARG TORCH_INDEX=https://download.pytorch.org/whl/{tag}\n" in dockerfile
    assert f"ARG TORCH_VERSION={torch}\n" in dockerfile
    assert reason in dockerfile


def test_unknown_cuda_build_is_a_usage_error(run_fdl, tmp_path):
    result = run_fdl("init", "x", "--docker", "--cuda", "99.9", cwd=tmp_path)
    assert result.returncode == 2
    assert (
        "no torch release in fdl's table has a cu999 build — choose one of: cu118" in result.stderr
    )
    assert list(tmp_path.iterdir()) == []


def test_update_pins_old_answers_and_adding_docker_asks_the_resolver(run_fdl, tmp_path):
    from tests.fixtures.machines import fdl_env, make_bin

    env = fdl_env(tmp_path, PATH=str(make_bin(tmp_path, "gtx1060")))
    assert run_fdl("init", "proj", env=env, cwd=tmp_path).returncode == 0
    root = tmp_path / "proj"
    added = run_fdl("init", "--update", "--docker", env=env, cwd=root)
    assert added.returncode == 0, added.stderr
    answers = tomllib.loads((root / ".fdl/project.toml").read_text())["answers"]
    assert (answers["mode"], answers["cuda"]) == ("docker", "cu126")
    assert "GTX 1060" in answers["cuda_reason"]
    # an answers file written before torch was pinned (cu128, no torch): --update pins the newest
    # release that has cu128 instead of letting pip pick whatever the index has
    text = (root / ".fdl/project.toml").read_text()
    text = text.replace('cuda = "cu126"', 'cuda = "cu128"').replace(
        f'torch = "{answers["torch"]}"\n', ""
    )
    (root / ".fdl/project.toml").write_text(text)
    pinned = run_fdl("init", "--update", env=env, cwd=root)
    assert pinned.returncode == 0, pinned.stderr
    answers = tomllib.loads((root / ".fdl/project.toml").read_text())["answers"]
    assert (answers["cuda"], answers["torch"]) == ("cu128", "2.11.0")
    assert "ARG TORCH_VERSION=2.11.0" in (root / "Dockerfile.cuda").read_text()


def test_add_hf_says_to_install_with_the_projects_constraints(run_fdl, tmp_path):
    # A bare `pip install -e .` ignores constraints.txt: the torch build for this machine and
    # the bundled flodl, which the README's install command passes with -c.
    made = run_fdl("init", "hinted", "--native", "--with-hf", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "  pip install -c constraints.txt -e .  # installs flodl[hf]" in made.stderr
    project = tmp_path / "hinted"
    (project / "examples" / "hf_classify.py").unlink()
    again = run_fdl("add", "hf", cwd=project)
    assert again.returncode == 0, again.stderr
    assert "  pip install -c constraints.txt -e .  # installs flodl[hf]" in again.stderr
    plain = tmp_path / "plain"  # a project fdl did not make: no constraints.txt to pass
    plain.mkdir()
    (plain / "pyproject.toml").write_text('[project]\nname = "plain"\ndependencies = ["flodl"]\n')
    added = run_fdl("add", "hf", cwd=plain)
    assert added.returncode == 0, added.stderr
    assert "  pip install -e .  # installs flodl[hf]" in added.stderr
    assert "constraints" not in added.stderr


def test_add_hf_in_a_docker_project_says_to_rebuild_the_images(run_fdl, tmp_path):
    # The images install the project when built, and fdl builds one only when it is missing:
    # without a rebuild the containers never get flodl[hf]
    made = run_fdl("init", "boxed", "--docker", "--cuda", "12.6", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    added = run_fdl("add", "hf", cwd=tmp_path / "boxed")
    assert added.returncode == 0, added.stderr
    assert "  docker compose build  # rebuilds the images" in added.stderr
    again = run_fdl("add", "hf", cwd=tmp_path / "boxed")  # nothing new: nothing to rebuild
    assert "docker compose build" not in again.stderr
    native = run_fdl("init", "plain", "--native", cwd=tmp_path)
    assert native.returncode == 0, native.stderr
    added = run_fdl("add", "hf", cwd=tmp_path / "plain")
    assert added.returncode == 0 and "docker compose" not in added.stderr
    # a new Docker project with --with-hf: its images are built on first use, with flodl[hf]
    fresh = run_fdl("init", "fresh", "--docker", "--cuda", "12.6", "--with-hf", cwd=tmp_path)
    assert fresh.returncode == 0 and "docker compose build" not in fresh.stderr
