"""A project made by ``fdl init`` installs on a fresh machine with its README's one command.

The origin of the running flodl decides how the project gets flodl (a requirement on a package
index, or a bundled wheel); the machine decides its torch build (``constraints.txt``).
"""

from __future__ import annotations

import email
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from fdl.scaffold import answers as answers_file
from fdl.scaffold import update
from fdl.scaffold.bundle import build_wheel, detect_origin, running_packages, wheel_name
from fdl.scaffold.create import create
from fdl.scaffold.render import Answers
from fdl.variants import load_table
from tests.conftest import REPO_ROOT, clean_env, require
from tests.fixtures.machines import make_bin, torch_metadata
from tests.scaffold.generated import saved_epoch
from tests.scaffold.torch_index import serve_torch_index, torch_wheels

INSTALL = re.compile(r"^python3 -m venv \.venv && .*$", re.MULTILINE)


def running_torch() -> str:
    return metadata.version("torch")


def readme_install_command(project: Path) -> str:
    """The README's install command, exactly as written (one line of its bash block)."""
    (command,) = INSTALL.findall((project / "README.md").read_text())
    return command


def init(run_fdl, cwd: Path, *args: str, env: dict[str, str] | None = None) -> Path:
    result = run_fdl("init", "demo", "--native", *args, cwd=cwd, env=env)
    assert result.returncode == 0, result.stderr
    return cwd / "demo"


# --- constraints.txt: the torch build the resolver picks for the machine -----------------------


def test_cpu_only_machine_pins_the_cpu_build_of_the_running_release(run_fdl, tmp_path):
    # No nvidia-smi on PATH: a machine without an NVIDIA GPU.
    no_gpu = make_bin(tmp_path, None)
    env = {"PATH": f"{no_gpu}{os.pathsep}/usr/bin:/bin", "FDL_NVML": "0"}
    project = init(run_fdl, tmp_path, env=env)
    release = running_torch().split("+")[0]
    lines = (project / "constraints.txt").read_text().splitlines()
    assert f"torch=={release}+cpu" in lines
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    assert "install -c constraints.txt" in readme_install_command(project)


def test_gpu_machine_pins_the_cuda_build_that_fits_it(run_fdl, tmp_path):
    # sm_61, driver 535: of torch 2.13's builds, cu126 is the one that fits (whatever torch this
    # environment has: the installed one, as fdl sees it, is 2.13.0)
    env = installed_torch(tmp_path, "2.13.0+cpu", "gtx1060")
    project = init(run_fdl, tmp_path, env=env)
    text = (project / "constraints.txt").read_text()
    assert re.search(r"^torch==[\d.]+\+cu126$", text, re.MULTILINE), text
    assert "--extra-index-url https://download.pytorch.org/whl/cu126" in text


def installed_torch(tmp_path: Path, version: str, machine: str | None) -> dict[str, str]:
    """An environment in which the installed torch is ``version``, on ``machine``."""
    return {
        "PATH": f"{make_bin(tmp_path, machine)}{os.pathsep}/usr/bin:/bin",
        "FDL_NVML": "0",
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(torch_metadata(tmp_path, version))]),
    }


def torch_constraints(project: Path) -> tuple[str, str, str]:
    """(requirement, index line, the reason comment) of the project's torch pin."""
    lines = (project / "constraints.txt").read_text().splitlines()
    (pin,) = [line for line in lines if line.startswith("torch==")]
    (index,) = [line for line in lines if line.startswith("--extra-index-url")]
    (reason,) = [line for line in lines if line.startswith("# torch: ")]
    return pin, index, reason


@pytest.mark.parametrize(
    ("installed", "machine", "pin", "index"),
    [
        # a patch release the table does not list (it has 2.9.1): the line's builds
        ("2.9.0+cpu", None, "torch==2.9.0+cpu", "whl/cpu"),
        ("2.9.0+cu128", "gtx1060", "torch==2.9.0+cu126", "whl/cu126"),  # sm_61: cu126 only
        # a line the table does not know, newer or older: every release has a CPU build
        ("2.99.0+cpu", None, "torch==2.99.0+cpu", "whl/cpu"),
        ("2.4.1+cu121", None, "torch==2.4.1+cpu", "whl/cpu"),
    ],
)
def test_the_installed_release_is_pinned_even_where_the_table_lacks_it(
    run_fdl, tmp_path, installed, machine, pin, index
):
    project = init(run_fdl, tmp_path, env=installed_torch(tmp_path, installed, machine))
    got_pin, got_index, reason = torch_constraints(project)
    assert (got_pin, got_index) == (pin, f"--extra-index-url https://download.pytorch.org/{index}")
    release = installed.split("+")[0]
    assert f"torch {release} is the release flodl runs with where this project was made" in reason


def test_a_torch_the_table_does_not_know_on_a_gpu_machine_gets_the_tables_newest_and_says_so(
    run_fdl, tmp_path
):
    # which CUDA builds 2.99 has is not known here: the newest release the table knows that fits
    env = installed_torch(tmp_path, "2.99.0+cu132", "gtx1060")
    project = init(run_fdl, tmp_path, env=env)
    pin, index, reason = torch_constraints(project)
    table = load_table()
    assert (pin, index) == (
        f"torch=={table.newest.torch}+cu126",
        "--extra-index-url https://download.pytorch.org/whl/cu126",
    )
    lines = f"{table.releases[-1].minor} to {table.newest.minor}"
    assert (
        f"torch 2.99.0 runs here, but fdl's release table does not know its line (it has {lines})"
        in reason
    )


def test_a_local_mirror_is_trusted_and_used(run_fdl, tmp_path):
    env = {"FDL_TORCH_MIRROR": "http://127.0.0.1:9", "PATH": "/usr/bin:/bin", "FDL_NVML": "0"}
    project = init(run_fdl, tmp_path, env=env)
    lines = (project / "constraints.txt").read_text().splitlines()
    assert "--extra-index-url http://127.0.0.1:9/whl/cpu" in lines
    assert "--trusted-host 127.0.0.1" in lines


# --- where flodl comes from ---------------------------------------------------------------------


def test_a_checkout_on_the_python_path_bundles_a_wheel_of_the_running_code(run_fdl, tmp_path):
    # The fixture runs `python -m fdl` with this checkout first on PYTHONPATH.
    project = init(run_fdl, tmp_path)
    wheel = project / ".fdl" / "wheels" / wheel_name()
    assert wheel.is_file()
    constraints = (project / "constraints.txt").read_text().splitlines()
    assert "--find-links .fdl/wheels" in constraints
    with zipfile.ZipFile(wheel) as archive:
        # exactly this checkout's code, not the installed distribution's
        assert (
            archive.read("fdl/scaffold/bundle.py")
            == (REPO_ROOT / "fdl" / "scaffold" / "bundle.py").read_bytes()
        )
    recorded = tomllib.loads((project / ".fdl/project.toml").read_text())
    assert recorded["answers"]["flodl_wheel"] == wheel.name
    assert f".fdl/wheels/{wheel.name}" in recorded["files"]


def test_the_bundled_wheel_is_complete_and_deterministic():
    name, first = build_wheel()
    assert build_wheel() == (name, first)  # same code, same bytes: --update sees no change
    with zipfile.ZipFile(io.BytesIO(first)) as archive:
        path_names = set(archive.namelist())
        info = f"flodl-{metadata.version('flodl')}.dist-info"
        meta = email.message_from_bytes(archive.read(f"{info}/METADATA"))
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        record = archive.read(f"{info}/RECORD").decode().splitlines()
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert meta.get_all("Requires-Dist") == declared["dependencies"]
    assert "fdl = fdl.main:main" in entry_points
    assert "fdl/_bundled/scaffold_templates/project/README.md.jinja" in path_names
    assert any(n.startswith("fdl/_bundled/porting_skill/") for n in path_names)
    assert "flodl/__init__.py" in path_names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in path_names)
    assert len(record) == len(path_names)  # every file is recorded, RECORD itself included


def _fake_distribution(tmp_path: Path, direct_url: dict | None) -> metadata.Distribution:
    """An installed flodl distribution whose RECORD owns the running package files."""
    site = tmp_path / "site"
    info = site / "flodl-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flodl\nVersion: 0.1.0\n")
    init_py = running_packages()["flodl"] / "__init__.py"
    (info / "RECORD").write_text(f"{os.path.relpath(init_py, site)},,\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return metadata.Distribution.at(info)


@pytest.mark.parametrize(
    ("direct_url", "kind"),
    [
        (None, "index"),
        ({"url": "file:///x/flodl-0.1.0-py3-none-any.whl", "archive_info": {}}, "archive"),
        ({"url": "https://github.com/o/flodl", "vcs_info": {"vcs": "git"}}, "vcs"),
        ({"url": "file:///src/flodl", "dir_info": {}}, "directory"),
    ],
)
def test_the_origin_is_read_from_pep_610_direct_url(tmp_path, direct_url, kind):
    origin = detect_origin(_fake_distribution(tmp_path, direct_url))
    assert origin.kind == kind
    assert origin.from_index == (kind == "index")


def test_an_installed_distribution_that_is_not_the_running_code_is_not_trusted(tmp_path):
    info = tmp_path / "flodl-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flodl\nVersion: 0.1.0\n")
    (info / "RECORD").write_text("flodl/__init__.py,,\n")  # owns some other flodl
    origin = detect_origin(metadata.Distribution.at(info))
    assert origin.kind == "source"  # the running checkout, not the index's flodl: bundle it


def test_update_replaces_an_old_bundled_wheel_and_drops_it_for_an_index_flodl(tmp_path):
    answers = Answers(
        "demo", "demo", torch_pin="torch==2.13.0+cpu", flodl_wheel=wheel_name(), flodl_origin="x"
    )
    root = tmp_path / "demo"
    create(root, answers)
    # Pretend an older flodl generated it: its wheel, recorded, never edited.
    recorded = answers_file.load(root)[2]
    current = root / ".fdl" / "wheels" / wheel_name()
    old = root / ".fdl" / "wheels" / wheel_name("0.0.9")
    current.rename(old)
    recorded[f".fdl/wheels/{old.name}"] = recorded.pop(f".fdl/wheels/{current.name}")
    changes = {c.path: c.status for c in update.plan(root, answers, recorded)}
    assert changes[f".fdl/wheels/{old.name}"] == "removed"
    assert changes[f".fdl/wheels/{current.name}"] == "create"
    update.apply(root, answers, update.plan(root, answers, recorded))
    assert sorted(p.name for p in (root / ".fdl" / "wheels").iterdir()) == [current.name]

    # flodl now comes from a package index: the wheel goes, constraints no longer point at it.
    from_index = Answers("demo", "demo", torch_pin="torch==2.13.0+cpu", flodl_origin="index")
    recorded = answers_file.load(root)[2]
    plan = update.plan(root, from_index, recorded)
    assert {c.path: c.status for c in plan}[f".fdl/wheels/{current.name}"] == "removed"
    update.apply(root, from_index, plan)
    assert not current.exists()
    assert "--find-links" not in (root / "constraints.txt").read_text()


def test_update_keeps_a_wheel_you_replaced(tmp_path):
    answers = Answers("demo", "demo", flodl_wheel=wheel_name(), flodl_origin="x")
    root = tmp_path / "demo"
    create(root, answers)
    wheel = root / ".fdl" / "wheels" / wheel_name()
    wheel.write_bytes(b"my own build")
    recorded = answers_file.load(root)[2]
    plan = update.plan(root, Answers("demo", "demo"), recorded)
    assert f".fdl/wheels/{wheel.name}" not in {c.path for c in plan}  # never deleted
    update.apply(root, Answers("demo", "demo"), plan)
    assert wheel.read_bytes() == b"my own build"


# --- the real thing: a fresh virtualenv, the README's command, train and test ------------------


def fresh_machine_env(**extra: str) -> dict[str, str]:
    """A shell as a new user has it: the base Python's python3 on PATH, no dev venv, no PYTHONPATH."""
    env = clean_env(**extra)
    for key in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
        env.pop(key, None)
    env["PATH"] = os.pathsep.join([str(Path(sys.base_prefix) / "bin"), "/usr/bin", "/bin"])
    return env


def install_and_run(project: Path, mirror: str) -> subprocess.CompletedProcess[str]:
    """Run exactly the README's install command in ``project``, then its train and test tasks."""
    script = "\n".join(
        [
            readme_install_command(project),
            "fdl train -- --epochs 2",
            "fdl test -- -p no:cacheprovider",
            "python -c \"import flodl, torch; print('TORCH', torch.__version__, flodl.__file__)\"",
        ]
    )
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=project,
        env=fresh_machine_env(FDL_TORCH_MIRROR=mirror),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def torch_index_for_this_machine():
    """A loopback PyTorch index serving the local CPU wheel of the running torch release."""
    version = running_torch().split("+")[0] + "+cpu"
    wheels = torch_wheels(version)
    require("torch-wheel", None if wheels else f"no local wheel of torch {version} (find-links)")
    return serve_torch_index(wheels)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_generated_project_installs_trains_and_tests_on_a_fresh_machine(run_fdl, tmp_path):
    with torch_index_for_this_machine() as mirror:
        # Generated by this checkout's fdl (on PYTHONPATH): a source-tree origin, so flodl is
        # bundled. FDL_TORCH_MIRROR stands in for download.pytorch.org (no network in tests).
        env = {"FDL_TORCH_MIRROR": mirror, "PATH": "/usr/bin:/bin", "FDL_NVML": "0"}
        (tmp_path / "gen").mkdir()
        generated = init(run_fdl, tmp_path / "gen", env=env)
        elsewhere = tmp_path / "elsewhere" / "demo"
        shutil.copytree(generated, elsewhere)  # a temp dir outside the repository, no .venv
        assert not str(elsewhere).startswith(str(REPO_ROOT))
        result = install_and_run(elsewhere, mirror)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    torch_line = next(line for line in result.stdout.splitlines() if line.startswith("TORCH "))
    _, version, flodl_file = torch_line.split()
    assert version.endswith("+cpu")  # not PyPI's multi-GB CUDA build
    assert Path(flodl_file).is_relative_to(elsewhere / ".venv")  # the bundled wheel, installed
    assert saved_epoch(elsewhere / "checkpoints") == 1
    assert "passed" in result.stdout


def readme_install_lines() -> dict[str, str]:
    """The main README's "Install into your own project" commands, by what they install."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("## Install into your own project", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    return {
        "venv": next(line for line in lines if line.startswith("python3 -m venv")),
        "torch": next(line for line in lines if "torch==" in line),
        "wheel": next(line for line in lines if line.endswith(".whl")),
    }


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_flodl_from_a_make_dist_wheel_makes_projects_that_install_anywhere(tmp_path):
    # `make dist`'s build, then the main README's steps in a fresh venv, then that venv's
    # `fdl init`: an `archive` origin, bundled again into the project.
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(dist)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("flodl-*.whl")
    steps = readme_install_lines()
    with torch_index_for_this_machine() as mirror:
        script = "\n".join(
            [
                steps["venv"],
                steps["torch"].replace("https://download.pytorch.org", mirror),
                steps["wheel"].replace("/path/to/flodl-0.1.0-py3-none-any.whl", str(wheel)),
                "fdl init demo --native",
            ]
        )
        user = tmp_path / "user"
        user.mkdir()
        made = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=user,
            env=fresh_machine_env(FDL_TORCH_MIRROR=mirror, FDL_NVML="0"),
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert made.returncode == 0, (made.stdout + made.stderr)[-6000:]
        assert "from a wheel or source archive" in made.stderr
        elsewhere = tmp_path / "elsewhere" / "demo"
        shutil.copytree(user / "demo", elsewhere)
        result = install_and_run(elsewhere, mirror)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    bundled_path = elsewhere / ".fdl" / "wheels" / wheel.name
    with zipfile.ZipFile(bundled_path) as bundled, zipfile.ZipFile(wheel) as built:
        # the same code as the wheel make dist built (repacked from the installed files)
        assert bundled.read("fdl/scaffold/bundle.py") == built.read("fdl/scaffold/bundle.py")
    assert saved_epoch(elsewhere / "checkpoints") == 1


def test_docker_images_install_the_bundled_wheel():
    from fdl.scaffold.render import render

    bundled = Answers(
        "demo", "demo", "docker", "cu126", "", "2.13.0", flodl_wheel=wheel_name(), flodl_origin="x"
    )
    files = {k: v.decode() for k, v in render(bundled).items()}
    for image in ("Dockerfile", "Dockerfile.cuda"):
        assert "COPY .fdl/wheels /tmp/flodl-wheels" in files[image]
        assert (
            f'--find-links /tmp/flodl-wheels "flodl=={metadata.version("flodl")}"' in files[image]
        )
    assert "!.fdl/wheels" in files[".dockerignore"].splitlines()  # *.fdl would drop .fdl/
    plain = render(Answers("demo", "demo", "docker", "cu126", "", "2.13.0"))
    for image in ("Dockerfile", "Dockerfile.cuda"):
        text = plain[image].decode()
        assert "COPY .fdl/wheels" not in text and 'pip install "flodl>=' in text
    # Both images pin the same torch release (the CPU one took whatever was newest).
    assert '/whl/cpu "torch==2.13.0"' in plain["Dockerfile"].decode()
    assert "ARG TORCH_VERSION=2.13.0" in plain["Dockerfile.cuda"].decode()
    unpinned = render(Answers("demo", "demo", "docker", "cu126", "", ""))["Dockerfile"].decode()
    assert "/whl/cpu torch " in unpinned and "torch==" not in unpinned  # older answers


def test_update_rewrites_constraints_for_the_machine_it_runs_on(run_fdl, tmp_path):
    no_gpu = installed_torch(tmp_path, "2.13.0+cpu", None)  # cu126 fits the GTX 1060 there
    project = init(run_fdl, tmp_path, env=no_gpu)
    again = run_fdl("init", "--update", cwd=project, env=no_gpu)
    assert again.returncode == 0 and "nothing to update" in again.stderr  # same code, same bytes
    gpu = installed_torch(tmp_path, "2.13.0+cpu", "gtx1060")
    moved = run_fdl("init", "--update", cwd=project, env=gpu)
    assert moved.returncode == 0, moved.stderr
    assert "update    constraints.txt" in moved.stderr
    assert "+cu126" in (project / "constraints.txt").read_text()
    recorded = tomllib.loads((project / ".fdl/project.toml").read_text())["answers"]
    assert recorded["torch_pin"].endswith("+cu126")


def test_the_bundled_wheel_holds_the_files_of_the_wheel_make_dist_builds(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(tmp_path)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    )
    (built,) = tmp_path.glob("flodl-*.whl")
    _, bundled = build_wheel()

    def files(archive: zipfile.ZipFile) -> dict[str, bytes]:
        return {n: archive.read(n) for n in archive.namelist() if ".dist-info/" not in n}

    with zipfile.ZipFile(built) as a, zipfile.ZipFile(io.BytesIO(bundled)) as b:
        assert files(b) == files(a)
