"""A project made by ``fdl init`` installs on a fresh machine with its README's one command.

The origin of the running flodl decides how the project gets flodl (a requirement on a package
index, or a bundled wheel); the machine decides its torch build (``constraints.txt``).
"""

from __future__ import annotations

import contextlib
import email
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
import venv
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
    requires = meta.get_all("Requires-Dist")
    assert [r for r in requires if "extra ==" not in r] == declared["dependencies"]
    # the extras too: without them pip installs flodl[hf] from this wheel as plain flodl
    assert meta.get_all("Provides-Extra") == list(declared["optional-dependencies"])
    for extra, wanted in declared["optional-dependencies"].items():
        assert [r.split(";")[0] for r in requires if f"extra == '{extra}'" in r] == wanted
    assert "fdl = fdl.main:main" in entry_points
    assert "fdl/_bundled/scaffold_templates/project/README.md.jinja" in path_names
    assert any(n.startswith("fdl/_bundled/porting_skill/") for n in path_names)
    assert "flodl/__init__.py" in path_names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in path_names)
    assert len(record) == len(path_names)  # every file is recorded, RECORD itself included


def _fake_distribution(
    tmp_path: Path, direct_url: dict | None, generator: str = "hatchling 1.27.0"
) -> metadata.Distribution:
    """An installed flodl distribution whose RECORD owns the running package files."""
    site = tmp_path / "site"
    info = site / "flodl-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flodl\nVersion: 0.1.0\n")
    (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nGenerator: {generator}\n")
    init_py = running_packages()["flodl"] / "__init__.py"
    (info / "RECORD").write_text(f"{os.path.relpath(init_py, site)},,\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return metadata.Distribution.at(info)


@contextlib.contextmanager
def json_index(
    releases: dict[str, list[dict]] | None, raw: bytes | None = None, delay: float = 0.0
) -> Iterator[tuple[str, list[str]]]:
    """A stand-in for PyPI's JSON API of flodl on 127.0.0.1, its per-version endpoint
    (``/pypi/flodl/VERSION/json``: the version's files in ``urls``, or a 404; ``releases`` None:
    a 404 for all); ``raw``: bytes sent instead of an HTTP answer (a broken proxy); ``delay``:
    seconds before answering. Yields the project URL (as ``FDL_UPDATE_INDEX_URL`` names it)
    and the paths asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self) -> None:
            asked.append(self.path)
            time.sleep(delay)
            if raw is not None:
                self.wfile.write(raw)
                return
            match = re.fullmatch(r"/pypi/flodl/([^/]+)/json", self.path)
            if releases is None or not match or match.group(1) not in releases:
                self.send_error(404)
                return
            files = releases[match.group(1)]
            body = json.dumps({"info": {"name": "flodl"}, "urls": files}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/pypi/flodl/json", asked
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def index_allowed(monkeypatch):
    """The index may be asked (the suite may run with FDL_NO_UPDATE_CHECK=1, or under CI)."""
    monkeypatch.delenv("FDL_NO_UPDATE_CHECK", raising=False)
    monkeypatch.delenv("CI", raising=False)


@pytest.mark.parametrize(
    ("releases", "kind"),
    [
        ({"0.0.9": [{}], "0.1.0": [{"filename": "flodl-0.1.0-py3-none-any.whl"}]}, "index"),
        # pip records no origin for a wheel found through --find-links either: an index that
        # lacks this version (or flodl), has it only yanked, or cannot be asked is no origin
        ({"0.0.9": [{}]}, "unrecorded"),
        ({"0.1.0": [{"yanked": True}]}, "unrecorded"),
        ({"0.1.0": []}, "unrecorded"),
        (None, "unrecorded"),
    ],
)
def test_no_origin_record_is_an_index_only_when_the_index_has_this_version(
    tmp_path, monkeypatch, index_allowed, releases, kind
):
    with json_index(releases) as (url, asked):
        monkeypatch.setenv("FDL_UPDATE_INDEX_URL", url)
        origin = detect_origin(_fake_distribution(tmp_path, None))
    assert asked == ["/pypi/flodl/0.1.0/json"]  # the version's endpoint, not `releases`
    assert origin.kind == kind
    assert origin.from_index == (kind == "index")
    assert origin.asked  # the index answered


@pytest.mark.parametrize(
    ("raw", "delay"),
    [
        (b"garbage\r\n\r\n", 0.0),  # http.client.BadStatusLine: not an OSError
        (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nnot json!", 0.0),
        (None, 30.0),  # answers, but too late
    ],
)
def test_an_index_that_does_not_answer_properly_cannot_tell(
    tmp_path, monkeypatch, index_allowed, raw, delay
):
    from fdl.scaffold import bundle

    monkeypatch.setattr(bundle, "INDEX_DEADLINE_S", 1.0)  # the whole query, however slow
    with json_index({"0.1.0": [{}]}, raw=raw, delay=delay) as (url, asked):
        monkeypatch.setenv("FDL_UPDATE_INDEX_URL", url)
        began = time.monotonic()
        assert bundle.index_has("0.1.0") is None
        assert time.monotonic() - began < 5
        origin = detect_origin(_fake_distribution(tmp_path, None))
    assert asked
    assert (origin.kind, origin.from_index, origin.asked) == ("unrecorded", False, False)


@pytest.mark.parametrize(("variable", "value"), [("FDL_NO_UPDATE_CHECK", "1"), ("CI", "true")])
def test_the_update_check_opt_outs_keep_fdl_init_from_asking_the_index(
    tmp_path, monkeypatch, index_allowed, variable, value
):
    monkeypatch.setenv(variable, value)
    with json_index({"0.1.0": [{}]}) as (url, asked):
        monkeypatch.setenv("FDL_UPDATE_INDEX_URL", url)
        origin = detect_origin(_fake_distribution(tmp_path, None))
    assert asked == []
    assert (origin.kind, origin.asked) == ("unrecorded", False)


@pytest.mark.parametrize("recorded_wheel", [True, False])
def test_update_keeps_the_recorded_choice_when_the_index_cannot_tell(monkeypatch, recorded_wheel):
    import dataclasses

    from fdl.commands import init as init_command
    from fdl.scaffold import bundle, torch_pin
    from fdl.scaffold.bundle import Origin

    pin = torch_pin.TorchPin("torch==2.13.0+cpu", "https://download.pytorch.org/whl/cpu", "x")
    monkeypatch.setattr(torch_pin, "choose_torch", lambda: pin)
    old = Answers(
        "demo", "demo", flodl_wheel="flodl-0.0.1-py3-none-any.whl" if recorded_wheel else "",
        flodl_origin="a wheel bundled by fdl init" if recorded_wheel else "a package index",
    )  # fmt: skip
    monkeypatch.setattr(bundle, "detect_origin", lambda: Origin("unrecorded", asked=False))
    kept = init_command._install(old, announce=False, update=True)
    assert kept.flodl_wheel == (wheel_name() if recorded_wheel else "")  # this flodl's wheel
    assert kept.flodl_origin == old.flodl_origin
    # a new project, or answers that recorded no choice: bundled when in doubt
    for answers, update_ in ((old, False), (dataclasses.replace(old, flodl_origin=""), True)):
        fresh = init_command._install(answers, announce=False, update=update_)
        assert fresh.flodl_wheel == wheel_name()
    # the index answered no: bundled, whatever was recorded
    monkeypatch.setattr(bundle, "detect_origin", lambda: Origin("unrecorded", asked=True))
    assert init_command._install(old, announce=False, update=True).flodl_wheel == wheel_name()


def test_no_origin_record_and_no_index_to_ask_is_no_index(tmp_path, monkeypatch):
    monkeypatch.setenv("FDL_UPDATE_INDEX_URL", "http://127.0.0.1:9/pypi/flodl/json")  # refused
    assert not detect_origin(_fake_distribution(tmp_path, None)).from_index


def test_a_wheel_fdl_init_bundled_is_bundled_again_without_asking_the_index(
    tmp_path, monkeypatch, index_allowed
):
    # A project's venv, installed as its README says: pip found the bundled wheel through
    # --find-links and wrote no direct_url.json. Its WHEEL file says fdl init built it.
    with json_index({"0.1.0": [{}]}) as (url, asked):
        monkeypatch.setenv("FDL_UPDATE_INDEX_URL", url)
        origin = detect_origin(_fake_distribution(tmp_path, None, generator="fdl init"))
    assert (origin.kind, origin.from_index, asked) == ("bundled", False, [])
    assert origin.describe() == "a wheel bundled by fdl init"


@pytest.mark.parametrize(
    ("direct_url", "kind"),
    [
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
    assert {c.path: c.status for c in plan}[f".fdl/wheels/{wheel.name}"] == "dropped"
    update.apply(root, Answers("demo", "demo"), plan)
    assert wheel.read_bytes() == b"my own build"  # never deleted; no longer tracked
    assert f".fdl/wheels/{wheel.name}" not in answers_file.load(root)[2]


def test_update_recreates_the_bundled_wheel_constraints_install_from(tmp_path):
    # A clone without it (a global gitignore of *.whl): not a file you chose to delete.
    answers = Answers("demo", "demo", flodl_wheel=wheel_name(), flodl_origin="x")
    root = tmp_path / "demo"
    create(root, answers)
    wheel = root / ".fdl" / "wheels" / wheel_name()
    built = wheel.read_bytes()
    wheel.unlink()
    (root / "README.md").unlink()  # a file you deleted stays deleted
    plan = {c.path: c.status for c in update.plan(root, answers, answers_file.load(root)[2])}
    assert plan[f".fdl/wheels/{wheel.name}"] == "create"
    assert plan["README.md"] == "skipped"
    update.apply(root, answers, update.plan(root, answers, answers_file.load(root)[2]))
    assert wheel.read_bytes() == built
    assert (
        f"--find-links .fdl/wheels\nflodl=={metadata.version('flodl')}"
        in (root / "constraints.txt").read_text()
    )


def test_update_keeps_a_wheel_that_your_constraints_still_install(tmp_path):
    # You edited constraints.txt: it stays as it is, still pinning the bundled flodl, so that
    # wheel must stay even when the new rendering has no wheel.
    answers = Answers("demo", "demo", flodl_wheel=wheel_name(), flodl_origin="x")
    root = tmp_path / "demo"
    create(root, answers)
    constraints = root / "constraints.txt"
    constraints.write_text(constraints.read_text() + "numpy<3\n")
    wheel = root / ".fdl" / "wheels" / wheel_name()
    from_index = Answers("demo", "demo", flodl_origin="index")
    plan = update.plan(root, from_index, answers_file.load(root)[2])
    statuses = {c.path: c.status for c in plan}
    assert statuses["constraints.txt"] == "conflict"
    assert statuses[f".fdl/wheels/{wheel.name}"] == "unchanged"
    update.apply(root, from_index, plan)
    assert wheel.is_file()
    # still tracked: once you merge constraints.txt, the next update removes it
    assert f".fdl/wheels/{wheel.name}" in answers_file.load(root)[2]


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


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_venv_installed_from_the_bundled_wheel_keeps_bundling_it(run_fdl, tmp_path):
    # The project's own venv, made as its README says: pip finds flodl in .fdl/wheels through
    # --find-links and records no origin. `fdl init --update` from there once took that for a
    # package index: it deleted the wheel and dropped it from constraints.txt.
    project = init(run_fdl, tmp_path)
    wheel = project / ".fdl" / "wheels" / wheel_name()
    built = wheel.read_bytes()
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # flodl's dependencies (torch...) from this environment: nothing to download
    import site
    import sysconfig

    deps = dict.fromkeys([sysconfig.get_paths()["purelib"], *site.getsitepackages()])
    (Path(purelib) / "deps.pth").write_text("\n".join(deps) + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index"]
    subprocess.run(
        [*pip, "--no-deps", "--ignore-installed", "-c", "constraints.txt", "flodl"],
        cwd=project, check=True, capture_output=True,
    )  # fmt: skip
    (info,) = Path(purelib).glob("flodl-*.dist-info")
    assert not (info / "direct_url.json").exists()
    # the extras are in the wheel's metadata: pip installs flodl[hf]'s dependencies from it
    extras = email.message_from_string((info / "METADATA").read_text()).get_all("Provides-Extra")
    assert "hf" in extras
    env = fresh_machine_env(FDL_UPDATE_INDEX_URL="http://127.0.0.1:9/pypi/flodl/json")
    fdl = str(env_dir / "bin" / "fdl")
    updated = subprocess.run(
        [fdl, "init", "--update"], cwd=project, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert updated.returncode == 0, updated.stderr
    assert "removed" not in updated.stderr
    assert wheel.read_bytes() == built  # rebuilt from the installed copy: the same bytes
    constraints = (project / "constraints.txt").read_text()
    assert "came from a wheel bundled by fdl init" in constraints
    assert f"--find-links .fdl/wheels\nflodl=={metadata.version('flodl')}" in constraints
    made = subprocess.run(
        [fdl, "init", "next", "--native"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "next" / ".fdl" / "wheels" / wheel.name).read_bytes() == built


def test_docker_images_install_the_project_with_its_constraints():
    from fdl.scaffold.render import render

    bundled = Answers(
        "demo", "demo", "docker", "cu126", "", "2.13.0", "torch==2.13.0+cpu",
        "https://download.pytorch.org/whl/cpu", "no GPU", wheel_name(), "x",
    )  # fmt: skip
    files = {k: v.decode() for k, v in render(bundled).items()}
    for image in ("Dockerfile", "Dockerfile.cuda"):
        text = files[image]
        # As the README installs it: the project (so its dependencies, flodl with the extras
        # pyproject.toml names, e.g. flodl[hf] after `fdl add hf`), editable at the mount point,
        # with constraints.txt (the bundled flodl), after the image's own torch
        steps = [
            "RUN pip install --index-url",
            "WORKDIR /workspace",
            "COPY pyproject.toml README.md constraints.txt ./",
            "COPY .fdl/wheels .fdl/wheels",
            # the dependencies before the code, with an empty package in its place: a change
            # to src/ does not reinstall them (the layer is cached)
            "RUN mkdir -p src/demo && touch src/demo/__init__.py \\\n"
            " && grep -v '^torch==' constraints.txt > /tmp/constraints.txt \\\n"
            " && pip install -c /tmp/constraints.txt -e . pytest ruff\n",
            "COPY src src\n",
        ]
        where = [text.index(step) for step in steps]
        assert where == sorted(where), text
        assert text.count("COPY src") == 1 and text.endswith("COPY src src\n")
        assert "rebuild it: docker compose build" in text
        assert "flodl==" not in text and '"flodl' not in text  # not flodl alone
    assert "!.fdl/wheels" in files[".dockerignore"].splitlines()  # *.fdl would drop .fdl/
    # What pip gets in the image: the bundled flodl (found relative to /workspace), not the
    # torch build of the machine fdl init ran on (the image has its own)
    kept = subprocess.run(
        ["grep", "-v", "^torch=="], input=files["constraints.txt"], capture_output=True,
        text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert "--find-links .fdl/wheels" in kept and f"flodl=={metadata.version('flodl')}" in kept
    assert not [line for line in kept if line.startswith("torch")]
    plain = render(Answers("demo", "demo", "docker", "cu126", "", "2.13.0"))
    for image in ("Dockerfile", "Dockerfile.cuda"):
        text = plain[image].decode()
        assert "COPY .fdl/wheels" not in text
        assert "pip install -c /tmp/constraints.txt -e . pytest ruff" in text
    # Both images pin the same torch release (the CPU one took whatever was newest).
    assert '/whl/cpu "torch==2.13.0"' in plain["Dockerfile"].decode()
    assert "ARG TORCH_VERSION=2.13.0" in plain["Dockerfile.cuda"].decode()
    unpinned = render(Answers("demo", "demo", "docker", "cu126", "", ""))["Dockerfile"].decode()
    assert "/whl/cpu torch\n" in unpinned and "torch==" not in unpinned.replace("'^torch==", "")


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
