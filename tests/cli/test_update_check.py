"""`fdl install --check`, the daily update notice, --ansi/--no-ansi, the claude-code alias."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from fdl import __version__, update_check


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("FLODL_HOME", str(tmp_path / "flodl-home"))
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("FDL_NO_UPDATE_CHECK", raising=False)
    return tmp_path / "flodl-home"


def write_cache(home, **fields):
    home.mkdir(parents=True, exist_ok=True)
    (home / "update-check.json").write_text(json.dumps(fields))


def test_notice_from_a_fresh_cache_and_its_opt_outs(home, monkeypatch):
    write_cache(home, checked_at=time.time(), current=__version__, latest="99.0", newer=True)
    line = update_check.notice(stderr_is_tty=True)
    assert line is not None and "flodl 99.0 is available" in line and "FDL_NO_UPDATE_CHECK" in line
    assert update_check.notice(stderr_is_tty=False) is None  # pipes and logs: silent
    monkeypatch.setenv("FDL_NO_UPDATE_CHECK", "1")
    assert update_check.notice(stderr_is_tty=True) is None
    monkeypatch.delenv("FDL_NO_UPDATE_CHECK")
    monkeypatch.setenv("CI", "true")
    assert update_check.notice(stderr_is_tty=True) is None


def test_no_notice_when_up_to_date_failed_or_for_another_version(home):
    write_cache(home, checked_at=time.time(), current=__version__, latest=__version__, newer=False)
    assert update_check.notice(stderr_is_tty=True) is None
    write_cache(home, checked_at=time.time(), current="0.0.1", latest="99.0", newer=True)
    assert update_check.notice(stderr_is_tty=True) is None  # recorded for another install
    write_cache(home, checked_at=time.time(), current=__version__, newer=True, error="offline")
    assert update_check.notice(stderr_is_tty=True) is None


def test_a_stale_cache_is_refreshed_in_the_background_never_inline(home, monkeypatch):
    started = []
    monkeypatch.setattr(update_check, "_refresh_in_background", lambda: started.append(1))
    write_cache(home, checked_at=time.time() - 2 * update_check.DAY_S, current=__version__)
    assert update_check.notice(stderr_is_tty=True) is None
    assert started == [1]
    write_cache(home, checked_at=time.time(), current=__version__)
    update_check.notice(stderr_is_tty=True)
    assert started == [1]  # at most daily


class _Index(BaseHTTPRequestHandler):
    version = "99.1.0"

    def do_GET(self):
        body = json.dumps({"info": {"version": self.version}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_check_against_an_index_on_loopback(home, monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/pypi/flodl/json"
        monkeypatch.setattr(update_check, "origin", lambda: ("index", url, {}))
        result = update_check.refresh()
        assert result.newer and result.latest == "99.1.0"
        assert result.upgrade[-3:] == ["install", "--upgrade", "flodl"]
        assert update_check.notice(stderr_is_tty=True) is not None  # recorded for the notice
    finally:
        server.shutdown()
    # offline: an error, recorded, and no notice
    monkeypatch.setattr(update_check, "origin", lambda: ("index", url, {}))
    offline = update_check.refresh()
    assert offline.error and not offline.newer
    assert update_check.notice(stderr_is_tty=True) is None


def test_check_a_directory_a_wheel_folder_and_a_git_remote(home, tmp_path, monkeypatch, capsys):
    checkout = tmp_path / "checkout"
    (checkout / "flodl").mkdir(parents=True)
    (checkout / "flodl" / "_version.py").write_text('__version__ = "99.2.0"\n')
    monkeypatch.setattr(update_check, "origin", lambda: ("directory", str(checkout), {}))
    found = update_check.check("0.1.0")
    assert found.newer and found.latest == "99.2.0" and found.upgrade[-1] == str(checkout)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("0.1.0", "0.3.0", "0.2.5"):
        (wheels / f"flodl-{version}-py3-none-any.whl").write_bytes(b"")
    installed = str(wheels / "flodl-0.1.0-py3-none-any.whl")
    monkeypatch.setattr(update_check, "origin", lambda: ("wheel", installed, {}))
    found = update_check.check("0.1.0")
    assert (
        found.newer
        and found.latest == "0.3.0"
        and found.upgrade[-1].endswith("0.3.0-py3-none-any.whl")
    )
    repo = tmp_path / "repo"
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    first = subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    record = {"url": str(repo), "vcs_info": {"vcs": "git", "commit_id": first}}
    monkeypatch.setattr(update_check, "origin", lambda: ("vcs", str(repo), record))
    assert not update_check.check("0.1.0").newer
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "two"], check=True)
    found = update_check.check("0.1.0")
    assert found.newer
    # the upgrade installs what the new commit requires; flodl alone is reinstalled after it,
    # only when pip kept the installed one (the same version number): the dry run says both
    from fdl.commands.install import install

    spec = f"git+{repo}"
    assert found.upgrade[3:] == [
        "install",
        "--upgrade",
        "--upgrade-strategy",
        "only-if-needed",
        spec,
    ]
    assert found.reinstall[3:] == ["install", "--force-reinstall", "--no-deps", spec]
    capsys.readouterr()
    install(dry_run=True)
    upgrade, reinstall = capsys.readouterr().out.splitlines()  # a script: the same commands
    assert upgrade == shlex.join(found.upgrade)
    command, comment = reinstall.split("  # ")
    assert command == shlex.join(found.reinstall) and comment.startswith("only if pip kept")


def test_install_check_cli_reports_the_origin(run_fdl, tmp_path):
    result = run_fdl("install", "--check", "--json", env={"FLODL_HOME": str(tmp_path)})
    assert result.returncode in (0, 3), result.stderr
    data = json.loads(result.stdout)
    assert data["current"] == __version__
    assert data["origin"] in ("directory", "source tree", "wheel", "vcs", "index")


def test_ansi_flags(run_fdl):
    forced = run_fdl("--ansi", "nosuch", env={"NO_COLOR": "1"})
    assert forced.returncode == 2 and "\x1b[" in forced.stderr
    plain = run_fdl("--no-ansi", "nosuch")
    assert plain.returncode == 2 and "\x1b[" not in plain.stderr
    last_wins = run_fdl("--ansi", "--no-ansi", "nosuch")
    assert "\x1b[" not in last_wins.stderr


def test_skill_install_accepts_the_originals_tool_name(run_fdl, tmp_path):
    result = run_fdl("skill", "install", "--tool", "claude-code", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / ".claude").is_dir()


class _NotFound(_Index):
    def do_GET(self):
        self.send_response(404)
        self.end_headers()


def test_no_recorded_origin_and_not_on_the_index_is_an_unknown_origin(home, monkeypatch):
    # `pip install --find-links DIR flodl` writes no direct_url.json, as an index install does;
    # flodl not on the index then means "origin unknown", not a network failure.
    from fdl.commands.install import install
    from fdl.errors import ExitCode, FdlError

    server = HTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/pypi/flodl/json"
        monkeypatch.setattr(update_check, "origin", lambda: ("index", url, {}))
        result = update_check.check("0.1.0")
        assert result.origin == "unknown" and "--find-links" in result.error
        assert result.describe().startswith("where flodl came from is unknown")
        with pytest.raises(FdlError) as raised:
            install(check=True)
    finally:
        server.shutdown()
    assert raised.value.code == ExitCode.UNAVAILABLE
    assert "fdl install --from DIR" in raised.value.hint and "network" not in raised.value.hint


def test_a_wheel_folder_with_a_space_in_its_path(tmp_path, monkeypatch):
    # direct_url.json holds a URL: "my%20wheels" is the folder "my wheels"
    import importlib.metadata

    wheels = tmp_path / "my wheels"
    wheels.mkdir()
    for version in ("0.1.0", "0.1.1"):
        (wheels / f"flodl-{version}-py3-none-any.whl").write_bytes(b"")
    installed = wheels / "flodl-0.1.0-py3-none-any.whl"

    class Dist:
        def read_text(self, name):
            return json.dumps({"url": installed.as_uri(), "archive_info": {}})

        def locate_file(self, name):
            return tmp_path

    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Dist())
    assert "%20" in installed.as_uri()
    assert update_check.origin()[:2] == ("wheel", str(installed))
    found = update_check.check("0.1.0")
    assert found.newer and found.latest == "0.1.1"
    assert found.upgrade[-1] == str(wheels / "flodl-0.1.1-py3-none-any.whl")
    # where the newer one is: the folder, not the installed (older) wheel
    assert found.describe() == f"flodl 0.1.1 is available from {wheels} (you have 0.1.0)"


def test_install_from_a_folder_a_wheel_or_a_checkout(run_fdl, tmp_path):
    wheels = tmp_path / "my wheels"
    wheels.mkdir()
    for version in ("0.1.0", "98.0.0", "99.0.0"):
        (wheels / f"flodl-{version}-py3-none-any.whl").write_bytes(b"")
    numpy = wheels / "numpy-99.9.0-cp311-cp311-linux_x86_64.whl"
    numpy.write_bytes(b"")
    # a folder: its newest flodl-*.whl (never another package's wheel)
    result = run_fdl("install", "--check", "--json", "--from", str(wheels))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["origin"], data["where"], data["latest"]) == ("wheel", str(wheels), "99.0.0")
    assert data["newer"] and data["upgrade"][-1] == str(wheels / "flodl-99.0.0-py3-none-any.whl")
    # a wheel named: that one, not the newest next to it
    named = wheels / "flodl-98.0.0-py3-none-any.whl"
    result = run_fdl("install", "--check", "--json", "--from", str(named))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["origin"], data["where"], data["latest"]) == ("wheel", str(named), "98.0.0")
    assert data["newer"] and data["upgrade"][-1] == str(named)
    dry = run_fdl("install", "--dry-run", "--from", str(named))
    assert dry.returncode == 0 and dry.stdout.strip().endswith("flodl-98.0.0-py3-none-any.whl'")
    not_flodl = run_fdl("install", "--check", "--from", str(numpy))
    assert not_flodl.returncode == 2 and "not a flodl wheel" in not_flodl.stderr
    only_numpy = tmp_path / "numpy only"
    only_numpy.mkdir()
    numpy.rename(only_numpy / numpy.name)
    nothing = run_fdl("install", "--check", "--from", str(only_numpy))
    assert nothing.returncode == 2 and "neither a flodl checkout" in nothing.stderr
    checkout = tmp_path / "checkout"
    (checkout / "flodl").mkdir(parents=True)
    (checkout / "flodl" / "_version.py").write_text('__version__ = "0.0.1"\n')
    result = run_fdl("install", "--check", "--from", str(checkout))
    assert result.returncode == 0 and f"is the newest from {checkout}" in result.stderr
    dry = run_fdl("install", "--dry-run", "--from", str(wheels))
    assert dry.returncode == 0 and dry.stdout.strip().endswith("flodl-99.0.0-py3-none-any.whl'")
    nothing = run_fdl("install", "--check", "--from", str(tmp_path / "nowhere"))
    assert nothing.returncode == 2 and "neither a flodl checkout" in nothing.stderr


# A package named flodl with a build backend of its own (no download, no build dependency): its
# version and requirements are read from version.txt and requires.txt; write_wheel also makes the
# wheel of a dependency.
_WHEEL = r"""
import base64, hashlib, pathlib, zipfile

def write_wheel(folder, name, version, files, requires=()):
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    files = {
        **files,
        f"{info}/METADATA": (metadata + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in files.items()
    ]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(pathlib.Path(folder) / wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel
"""
_BACKEND = (
    _WHEEL
    + r"""
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return write_wheel(
        wheel_directory,
        "flodl",
        pathlib.Path("version.txt").read_text().strip(),
        {"flodl/__init__.py": pathlib.Path("flodl/__init__.py").read_bytes()},
        pathlib.Path("requires.txt").read_text().split(),
    )
"""
)


@pytest.mark.slow
def test_install_from_a_git_url_follows_new_commits_of_the_same_version(tmp_path, monkeypatch):
    # pip refused the "@HEAD" fdl used to add ("git checkout -b HEAD": not a valid branch name),
    # and calls a new commit of the same version installed: flodl is then reinstalled, after an
    # upgrade that installs what the new commit requires (not with --no-deps: flodl would not
    # import). A new version needs no reinstall.
    import venv

    repo = tmp_path / "repo"
    (repo / "flodl").mkdir(parents=True)
    (repo / "backend.py").write_text(_BACKEND)
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
    )
    (repo / "version.txt").write_text("0.0.1\n")
    (repo / "requires.txt").write_text("")
    (repo / "flodl" / "__init__.py").write_text("VALUE = 1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    deps = tmp_path / "deps"  # the new dependency of commit two, found with --find-links
    deps.mkdir()
    namespace: dict = {}
    exec(_WHEEL, namespace)
    namespace["write_wheel"](deps, "fdl_fake_dep", "1.0", {"fdl_fake_dep.py": b"OK = 1\n"})
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"

    def pip(*args):  # this environment's pip, installing into the test venv
        done = subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(python), *args, "-q", "--no-index",
             "--find-links", str(deps)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr

    def upgrade(found):  # as fdl install runs it: `install ...`, then a reinstall if needed
        assert "--no-deps" not in found.upgrade and not found.upgrade[-1].endswith("@HEAD")
        pip(*found.upgrade[3:])
        kept = update_check.kept_installed(found, str(python))
        if kept:
            pip(*found.reinstall[3:])
        assert not update_check.kept_installed(found, str(python))
        return kept

    pip("install", "--no-deps", f"git+{repo.as_uri()}")
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )

    def installed_origin():
        (info,) = site.glob("flodl-*.dist-info")
        record = json.loads((info / "direct_url.json").read_text())
        return "vcs", record["url"], record

    monkeypatch.setattr(update_check, "origin", installed_origin)
    assert not update_check.check("0.0.1").newer
    # commit two: the same version, a new dependency
    (repo / "flodl" / "__init__.py").write_text("import fdl_fake_dep\nVALUE = 2\n")
    (repo / "requires.txt").write_text("fdl_fake_dep\n")
    subprocess.run([*git, "commit", "-q", "-am", "two"], check=True)
    found = update_check.check("0.0.1")
    assert found.newer
    upgrade(found)
    assert (site / "flodl" / "__init__.py").read_text() == "import fdl_fake_dep\nVALUE = 2\n"
    assert (site / "fdl_fake_dep.py").is_file()  # installed, as the new commit requires
    assert not update_check.check("0.0.1").newer  # the new commit is the one installed
    # commit three: a new version number; pip installs it, no reinstall follows
    (repo / "flodl" / "__init__.py").write_text("VALUE = 3\n")
    (repo / "version.txt").write_text("0.0.2\n")
    subprocess.run([*git, "commit", "-q", "-am", "three"], check=True)
    found = update_check.check("0.0.1")
    assert found.newer and not upgrade(found)
    assert (site / "flodl" / "__init__.py").read_text() == "VALUE = 3\n"
    assert not update_check.check("0.0.2").newer
