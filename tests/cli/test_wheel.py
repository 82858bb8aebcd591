"""A built wheel, installed into a fresh venv, gives a working `fdl` that finds its data."""

from __future__ import annotations

import email
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

import flodl as fl

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory, repo_root) -> Path:
    """A fresh venv with only the flodl wheel installed; dependencies come from this environment."""
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(root / "dist"),
            str(repo_root),
        ],
        check=True,
    )
    (wheel,) = (root / "dist").glob("flodl-*.whl")
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    # Make this environment's dependencies (typer, rich, ...) importable without a network install;
    # paths listed in a .pth come after the venv's own site-packages, so the wheel's fdl wins.
    (purelib / "_deps_from_dev_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "-q",
            str(wheel),
        ],
        check=True,
    )
    return env_dir


def test_wheel_metadata_requires_what_pyproject_declares(installed_wheel, repo_root):
    # The venv borrows its dependencies (no network), so check the wheel still declares them.
    from packaging.requirements import Requirement

    (wheel,) = (installed_wheel.parent / "dist").glob("flodl-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(archive.read(name))
    declared = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]
    required = [Requirement(r) for r in metadata.get_all("Requires-Dist")]

    def key(r: Requirement) -> tuple[str, str]:
        return r.name.lower(), str(r.specifier)

    always = {key(r) for r in required if r.marker is None}
    assert always == {key(Requirement(d)) for d in declared["dependencies"]}
    for extra, deps in declared["optional-dependencies"].items():
        in_extra = {key(r) for r in required if r.marker and r.marker.evaluate({"extra": extra})}
        assert in_extra >= {key(Requirement(d)) for d in deps}, extra
    assert set(metadata.get_all("Provides-Extra")) == set(declared["optional-dependencies"])


def run_in(env_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        cwd=env_dir,
        env={"PATH": str(env_dir / "bin")},
        check=False,
    )


def test_console_script_reports_the_version(installed_wheel):
    result = run_in(installed_wheel, str(installed_wheel / "bin" / "fdl"), "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"fdl {fl.__version__} (flodl {fl.__version__})"


def test_bundled_data_is_found_inside_the_installed_package(installed_wheel):
    code = (
        "import fdl, fdl.resources as r; "
        "print(fdl.__file__); "
        "print(*(r.bundled_dir(n) for n in r.BUNDLED), sep='\\n'); "
        "print(*(r.bundled_dir(n).joinpath('README.md').is_file() for n in r.BUNDLED))"
    )
    result = run_in(installed_wheel, str(installed_wheel / "bin" / "python"), "-c", code)
    assert result.returncode == 0, result.stderr
    fdl_file, templates, skill, found = result.stdout.splitlines()
    assert fdl_file.startswith(str(installed_wheel))  # the wheel's copy, not this checkout
    assert templates.startswith(str(installed_wheel)) and templates.endswith(
        "_bundled/scaffold_templates"
    )
    assert skill.startswith(str(installed_wheel)) and skill.endswith("_bundled/porting_skill")
    assert found == "True True"


def test_monitor_dashboard_assets_ship_in_the_wheel(installed_wheel):
    code = (
        "import importlib.util, pathlib; "
        "root = pathlib.Path(importlib.util.find_spec('flodl').origin).parent; "
        "print(*sorted(p.name for p in (root / 'monitor' / 'assets').iterdir()))"
    )
    result = run_in(installed_wheel, str(installed_wheel / "bin" / "python"), "-c", code)
    assert result.returncode == 0, result.stderr
    assert {"dashboard.html", "dashboard.css", "dashboard.js"} <= set(result.stdout.split())


def test_a_type_checker_reads_the_installed_packages_types(installed_wheel, tmp_path):
    # PEP 561: without a py.typed marker mypy treats `import flodl` as untyped (an error under
    # the default settings) and every flodl value in the user's code as Any.
    user = tmp_path / "user.py"
    user.write_text(
        "import flodl as fl\nimport fdl\nfrom torch import nn\n\n"
        "graph = fl.FlowBuilder(nn.Linear(2, 2)).through(nn.ReLU()).build()\n"
        "wrong: str = graph\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-incremental",
            "--python-executable",
            str(installed_wheel / "bin" / "python"),
            str(user),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert "py.typed" not in result.stdout, result.stdout
    assert 'expression has type "Graph", variable has type "str"' in result.stdout, result.stdout
    assert "Found 1 error in 1 file" in result.stdout
