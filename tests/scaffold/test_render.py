"""Rendering the templates: the right files per mode, valid Python, YAML, TOML and compose."""

from __future__ import annotations

import ast
import tomllib

import pytest

from fdl import __version__
from fdl.errors import FdlUsageError
from fdl.scaffold.render import Answers, flodl_requirement, normalize_cuda, render
from fdl.tasks.docker import load_service
from fdl.tasks.manifest import load_manifest

COMMON = {
    ".gitignore", "README.md", "constraints.txt", "fdl.ci.yml", "fdl.yml.example", "pyproject.toml",
    "src/my_model/__init__.py", "src/my_model/model.py", "src/my_model/train.py",
    "tests/test_model.py", "tests/test_train.py",
}  # fmt: skip
DOCKER = {"Dockerfile", "Dockerfile.cuda", "docker-compose.yml", ".dockerignore"}


def rendered(mode: str, cuda: str = "cu128", torch: str = "") -> dict[str, bytes]:
    return render(Answers("my-model", "my_model", mode, cuda, "", torch))  # type: ignore[arg-type]


def test_native_and_docker_file_sets():
    assert set(rendered("native")) == COMMON
    assert set(rendered("docker")) == COMMON | DOCKER


@pytest.mark.parametrize("mode", ["native", "docker"])
def test_python_files_are_valid_and_use_the_package(mode):
    files = rendered(mode)
    for path, content in files.items():
        if path.endswith(".py"):
            ast.parse(content.decode(), path)  # raises on a template mistake
    train = files["src/my_model/train.py"].decode()
    assert "from my_model.model import" in train
    for needle in (
        "fl.manual_seed",
        "fl.Monitor",
        "CosineScheduler",
        "save_checkpoint",
        "--resume",
        "--device",
        "--epochs",
        "REPLACE",
    ):
        assert needle in train, needle
    model = files["src/my_model/model.py"].decode()
    assert ".also(" in model and '.tag("features")' in model and "fl.FlowBuilder" in model


def test_pyproject_depends_on_a_compatible_flodl():
    data = tomllib.loads(rendered("native")["pyproject.toml"].decode())
    assert data["project"]["name"] == "my-model"
    assert data["project"]["dependencies"] == [flodl_requirement(__version__)]
    assert data["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["src/my_model"]


@pytest.mark.parametrize("mode", ["native", "docker"])
def test_manifest_and_ci_overlay_load_with_described_commands(tmp_path, mode):
    files = rendered(mode)
    for name in ("fdl.yml.example", "fdl.ci.yml", "docker-compose.yml"):
        if name in files:
            (tmp_path / name).write_bytes(files[name])
    manifest = load_manifest(tmp_path / "fdl.yml.example")
    expected = {"train", "test", "lint"}
    if mode == "docker":
        expected |= {"shell", "cuda-train", "cuda-test", "cuda-shell"}
    assert set(manifest.commands) == expected
    assert all(c.description for c in manifest.commands.values())
    services = {c.docker for c in manifest.commands.values()}
    assert services == ({"dev", "cuda"} if mode == "docker" else {None})
    ci = load_manifest(tmp_path / "fdl.yml.example", "ci")
    assert "--epochs 1" in ci.commands["train"].append
    assert ci.commands["train"].docker is None  # CI trains on the host in both modes


def test_compose_services(tmp_path):
    files = rendered("docker", "cu126", "2.9.1")
    (tmp_path / "docker-compose.yml").write_bytes(files["docker-compose.yml"])
    dev = load_service(tmp_path / "docker-compose.yml", "dev")
    cuda = load_service(tmp_path / "docker-compose.yml", "cuda")
    assert dev.container_path(tmp_path) == cuda.container_path(tmp_path) == "/workspace"
    assert not dev.gpus and cuda.gpus
    assert dev.environment["FDL_CONTAINER"] == "dev"  # fdl inside runs commands directly
    assert cuda.build_args == {
        "TORCH_INDEX": "https://download.pytorch.org/whl/cu126",
        "TORCH_VERSION": "2.9.1",
    }
    assert cuda.image == "my_model-cuda:2.9.1-cu126" and dev.image == "my_model-dev"
    assert dev.unknown_keys == cuda.unknown_keys == []  # the SDK backend can run both
    assert "whl/cu126" in files["Dockerfile.cuda"].decode()
    assert "whl/cpu" in files["Dockerfile"].decode()


def test_gitignore_keeps_outputs_and_local_config_out():
    lines = rendered("native")[".gitignore"].decode().splitlines()
    for entry in ("checkpoints/", ".venv/", "fdl.yml", "*.fdl"):
        assert entry in lines
    assert "fdl.yml.example" not in lines and ".fdl/" not in lines


@pytest.mark.parametrize(
    ("tag", "expected"),
    [("12.8", "cu128"), ("cu126", "cu126"), ("130", "cu130"), (" CU12.9 ", "cu129")],
)
def test_cuda_tags(tag, expected):
    assert normalize_cuda(tag) == expected


@pytest.mark.parametrize("tag", ["cpu", "12", "cu12.8.1", "twelve"])
def test_bad_cuda_tags(tag):
    with pytest.raises(FdlUsageError, match="is not a CUDA version"):
        normalize_cuda(tag)


def test_flodl_requirement():
    assert flodl_requirement("0.1.0") == "flodl>=0.1.0,<0.2"
    assert flodl_requirement("2.3") == "flodl>=2.3.0,<3"
    assert flodl_requirement("0.4.0rc1") == "flodl>=0.4.0rc1,<0.5"


@pytest.mark.parametrize(
    "version", ["0.2.0", "0.2.0rc1", "0.2.0.dev3", "0.2.0a1.dev2", "0.2.0.post1", "1.0.0b2",
                "0.2.0+local.1", "0.2"],
)  # fmt: skip
def test_the_requirement_admits_the_version_constraints_pin(version):
    # pyproject.toml's requirement and constraints.txt's flodl==VERSION must both hold, or pip
    # gives up (ResolutionImpossible): a pre-release is admitted only by a bound naming one.
    from packaging.requirements import Requirement
    from packaging.version import Version

    requirement = Requirement(flodl_requirement(version))
    assert requirement.specifier.contains(Version(version)), requirement
    breaking = "2.0.0" if version.startswith("1.") else "0.3.0"
    assert not requirement.specifier.contains(Version(breaking)), requirement


def test_gpu_image_pins_torch_and_needs_a_build():
    dockerfile = rendered("docker", "cu126", "2.9.1")["Dockerfile.cuda"].decode()
    assert "ARG TORCH_VERSION=2.9.1" in dockerfile
    assert '"torch${TORCH_VERSION:+==${TORCH_VERSION}}"' in dockerfile
    # answers from before torch was pinned still render (unpinned) until --update pins them
    old = rendered("docker", "cu128")
    assert "ARG TORCH_VERSION=\n" in old["Dockerfile.cuda"].decode()
    assert "TORCH_VERSION" not in old["docker-compose.yml"].decode()
    with pytest.raises(FdlUsageError, match="needs the CUDA build of its GPU image"):
        rendered("docker", "")


@pytest.fixture
def smoke_train(tmp_path, monkeypatch):
    """The rendered train.py of a project 'smokeprobe', imported, run as under FLODL_SMOKE=1
    (``fdl check``) with its temporary directories under ``tmp_path / "tmp"``."""
    import importlib
    import sys
    import tempfile

    for path, content in render(Answers("smokeprobe", "smokeprobe")).items():
        if path.startswith("src/"):
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_bytes(content)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setenv("FLODL_SMOKE", "1")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    yield importlib.import_module("smokeprobe.train")
    for name in [m for m in sys.modules if m == "smokeprobe" or m.startswith("smokeprobe.")]:
        del sys.modules[name]


def test_a_smoke_run_redirects_only_the_default_directories(smoke_train, tmp_path, capsys):
    from pathlib import Path

    args = smoke_train.parse_args([])
    (scratch,) = (tmp_path / "tmp").glob("smokeprobe-smoke-*")
    assert (args.checkpoint_dir, args.runs_dir) == (scratch / "checkpoints", scratch / "runs")
    printed = capsys.readouterr().out
    assert f"--checkpoint-dir and --runs-dir (default) redirected to {scratch}" in printed
    assert "left there" in printed
    # what you pass is yours: kept, and only the other default moves
    mine = tmp_path / "mine"
    args = smoke_train.parse_args(["--checkpoint-dir", str(mine)])
    assert args.checkpoint_dir == mine and args.runs_dir.name == "runs"
    assert args.runs_dir.parent != Path(".") and "--runs-dir (default) redirected" in (
        capsys.readouterr().out
    )
    both = smoke_train.parse_args(["--checkpoint-dir", "a", "--runs-dir", "b"])
    assert (both.checkpoint_dir, both.runs_dir) == (Path("a"), Path("b"))
    assert "FLODL_SMOKE" not in capsys.readouterr().out
    assert len(list((tmp_path / "tmp").glob("smokeprobe-smoke-*"))) == 2  # none for the last
