"""`fdl install --check`, the daily update notice, --ansi/--no-ansi, the claude-code alias."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

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


def test_check_a_directory_a_wheel_folder_and_a_git_remote(tmp_path, monkeypatch):
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
    assert update_check.check("0.1.0").newer


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
