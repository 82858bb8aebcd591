"""``fdl libtorch`` end to end against a loopback mirror (FDL_TORCH_MIRROR)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.fixtures.loopback import sha256
from tests.fixtures.machines import CPU_PATH, NEWEST, libtorch_zip


def transfers(server, path: str = CPU_PATH) -> list[dict[str, str]]:
    """The GETs that download the archive (whole, or resumed with an open ``bytes=N-`` range),
    not the closed-range reads of its index that size the extraction before downloading."""
    return [
        h
        for h in server.gets(path)
        if not (h.get("Range") or "").rstrip().rpartition("-")[2].strip().isdigit()
    ]


def test_download_installs_records_and_activates(mirror, run_fdl):
    _server, env, work, home = mirror
    result = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    assert result.returncode == 0, result.stderr
    variant = home / "precompiled" / "cpu"
    assert (variant / "lib" / "libtorch.so").is_file()
    assert (home / ".active").read_text() == "precompiled/cpu\n"
    arch = dict(line.split("=", 1) for line in (variant / ".arch").read_text().splitlines())
    assert arch["torch"] == NEWEST and arch["cuda"] == "none" and arch["archs"] == "cpu"
    assert len(arch["sha256"]) == 64 and arch["sha256_pinned"] == "no"  # recorded for later
    assert arch["sha256_verified"] == "no" and arch["sha256_source"] == "none"  # and said so
    assert "NOT verified" in " ".join(result.stderr.split())
    assert not (home / ".downloads" / f"libtorch-shared-with-deps-{NEWEST}+cpu.zip").exists()


def test_second_download_skips_but_still_activates_and_force_redownloads(mirror, run_fdl):
    server, env, work, home = mirror
    assert run_fdl("libtorch", "download", "--cpu", env=env, cwd=work).returncode == 0
    (home / ".active").write_text("")
    again = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    assert "already installed" in again.stderr
    assert len(transfers(server)) == 1  # no second transfer
    assert (home / ".active").read_text() == "precompiled/cpu\n"  # activated all the same
    forced = run_fdl("libtorch", "download", "--cpu", "--force", env=env, cwd=work)
    assert forced.returncode == 0, forced.stderr
    assert len(transfers(server)) == 2  # --force really downloads again


def test_path_writes_active_in_that_libtorch_dir(mirror, run_fdl, tmp_path):
    _server, env, work, home = mirror
    custom = tmp_path / "elsewhere" / "libtorch"
    result = run_fdl("libtorch", "download", "--cpu", "--path", str(custom), env=env, cwd=work)
    assert result.returncode == 0, result.stderr
    assert (custom / ".active").read_text() == "precompiled/cpu\n"
    assert not (home / ".active").exists()  # only --path's directory is touched
    listed = run_fdl("libtorch", "list", "--json", "--path", str(custom), env=env, cwd=work)
    assert json.loads(listed.stdout) == [{"variant": "precompiled/cpu", "active": True}]


def test_project_mode_installs_into_the_project(mirror, run_fdl):
    _server, env, work, home = mirror
    (work / "pyproject.toml").write_text('[project]\nname = "demo"\ndependencies = ["flodl"]\n')
    (work / "src").mkdir()
    result = run_fdl("libtorch", "download", "--cpu", "--no-activate", env=env, cwd=work / "src")
    assert result.returncode == 0, result.stderr
    assert (work / "libtorch" / "precompiled" / "cpu" / "lib").is_dir()
    assert not (work / "libtorch" / ".active").exists()  # --no-activate
    assert not home.exists()


def test_list_info_activate_remove(mirror, run_fdl):
    _server, env, work, home = mirror
    assert run_fdl("libtorch", "list", env=env, cwd=work).stderr.startswith("No libtorch variants")
    info = run_fdl("libtorch", "info", env=env, cwd=work)
    assert info.returncode == 3 and "no active libtorch variant" in info.stderr
    assert run_fdl("libtorch", "download", "--cpu", env=env, cwd=work).returncode == 0
    # a second, hand-made variant (e.g. built from source)
    (home / "builds" / "sm61-sm120" / "lib").mkdir(parents=True)
    listed = run_fdl("libtorch", "list", env=env, cwd=work).stdout.splitlines()
    assert listed == ["  builds/sm61-sm120", "  precompiled/cpu (active)"]
    info = run_fdl("libtorch", "info", "--json", env=env, cwd=work)
    assert json.loads(info.stdout)["torch"] == NEWEST
    assert run_fdl("libtorch", "activate", "builds/sm61-sm120", env=env, cwd=work).returncode == 0
    assert (home / ".active").read_text() == "builds/sm61-sm120\n"
    bad = run_fdl("libtorch", "activate", "cu999", env=env, cwd=work)
    assert bad.returncode == 1 and "not an installed libtorch variant" in bad.stderr
    assert (home / ".active").read_text() == "builds/sm61-sm120\n"  # unchanged
    escape = run_fdl("libtorch", "remove", "../../etc", env=env, cwd=work)
    assert escape.returncode == 2 and "not a libtorch variant id" in escape.stderr
    removed = run_fdl("libtorch", "remove", "builds/sm61-sm120", env=env, cwd=work)
    assert removed.returncode == 0 and "was the active variant" in removed.stderr
    assert (home / ".active").read_text() == ""
    assert (home / "precompiled" / "cpu" / "lib").is_dir()  # the other one is untouched


@pytest.mark.parametrize("ranges", [True, False], ids=["range", "no-range"])
def test_a_dropped_transfer_is_resumed_and_the_archive_installs(mirror, run_fdl, ranges):
    # The mirror cuts the connection mid-archive once; the same command retries and installs.
    # With Range support only the missing bytes are asked for; without, it starts over cleanly.
    server, env, work, home = mirror
    body = libtorch_zip(extra={"libtorch/lib/libc10.so": os.urandom(300_000)})
    # two cuts: the first hits the read of the archive's index (then the unpacked size is just
    # not known ahead), the second the download itself
    server.add(CPU_PATH, body, ranges=ranges, drop_after=120_000, drops_left=2)
    result = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    assert result.returncode == 0, result.stderr
    lib = home / "precompiled" / "cpu" / "lib"
    assert (lib / "libtorch.so").is_file() and (lib / "libc10.so").stat().st_size == 300_000
    gets = transfers(server)
    assert len(gets) == 2 and "Range" not in gets[0]
    assert gets[1].get("Range") == "bytes=120000-"  # asked for the rest either way…
    arch = dict(line.split("=", 1) for line in (lib.parent / ".arch").read_text().splitlines())
    assert arch["sha256"] == sha256(body)  # …and what installed is exactly the archive


def test_zip_slip_archive_installs_nothing(mirror, run_fdl, tmp_path):
    server, env, work, home = mirror
    server.add(CPU_PATH, libtorch_zip(extra={"../../../../evil.txt": b"pwned"}))
    result = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    assert result.returncode == 1 and "escapes the target" in result.stderr
    assert not (home / "precompiled" / "cpu").exists() and not (home / ".active").exists()
    assert not list(Path(tmp_path).rglob("evil.txt"))


def test_symlink_chain_archive_writes_nothing_outside_the_home(mirror, run_fdl, tmp_path):
    from tests.downloads.test_archive import chain_zip

    server, env, work, home = mirror
    (home / "precompiled" / "cpu").mkdir(parents=True)
    (home / "precompiled" / "cpu" / "keep.txt").write_text("previous install")
    before = {p for p in tmp_path.rglob("*") if ".downloads" not in p.parts}
    server.add(CPU_PATH, chain_zip())
    result = run_fdl("libtorch", "download", "--cpu", "--force", env=env, cwd=work)
    assert result.returncode == 1, result.stderr
    assert "error: archive member 'libtorch/q/z' is written through a symlink" in result.stderr
    assert not list(tmp_path.rglob("ESCAPED.txt"))
    after = {p for p in tmp_path.rglob("*") if ".downloads" not in p.parts}
    assert after == before  # no staging dir, no link, no file left anywhere
    assert (home / "precompiled" / "cpu" / "keep.txt").read_text() == "previous install"
    assert not (home / ".active").exists()


def test_archive_without_libtorch_library_is_refused(mirror, run_fdl):
    server, env, work, home = mirror
    server.add(CPU_PATH, libtorch_zip(lib="README.txt"))
    result = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    assert result.returncode == 1 and "no libtorch library" in result.stderr
    assert not (home / ".active").exists()


def test_missing_variant_is_404_with_exit_code_3(mirror, run_fdl):
    _server, env, work, _home = mirror
    result = run_fdl("libtorch", "download", "--cuda", "12.6", env=env, cwd=work)
    assert result.returncode == 3 and "404" in result.stderr
    assert "cu126/libtorch-shared-with-deps" in result.stderr


def test_usage_errors(mirror, run_fdl):
    _server, env, work, _home = mirror
    both = run_fdl("libtorch", "download", "--cpu", "--cuda", "12.8", env=env, cwd=work)
    assert both.returncode == 2 and "mutually exclusive" in both.stderr
    unknown = run_fdl("libtorch", "download", "--cuda", "9.9", env=env, cwd=work)
    assert unknown.returncode == 2 and "cu99" in unknown.stderr


@pytest.mark.parametrize("how", ["flag", "env"])
@pytest.mark.parametrize("url", ["notaurl", "ftp://mirror.lan/pytorch", "http://"])
def test_a_mirror_that_is_not_an_http_url_is_a_usage_error(mirror, run_fdl, how, url):
    server, env, work, home = mirror
    args = ["--mirror", url] if how == "flag" else []
    if how == "env":
        env = {**env, "FDL_TORCH_MIRROR": url}
    result = run_fdl("libtorch", "download", "--cpu", *args, env=env, cwd=work)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    source = "--mirror" if how == "flag" else "FDL_TORCH_MIRROR"
    assert f"error: {source} '{url}' is not an http(s) URL — " in result.stderr
    assert server.state.log == [] and not home.exists()


def test_dry_run_names_the_cxx11_abi_file_and_downloads_nothing(mirror, run_fdl):
    server, env, work, home = mirror
    result = run_fdl(
        "libtorch", "download", "--cuda", "12.6", "--torch", "2.6", "--dry-run", env=env, cwd=work
    )
    assert result.returncode == 0, result.stderr
    assert "cu126/libtorch-cxx11-abi-shared-with-deps-2.6.0%2Bcu126.zip" in result.stderr
    assert server.state.log == [] and not home.exists()


def test_auto_detect_picks_from_the_gpus(mirror, run_fdl, tmp_path):
    from tests.fixtures.machines import make_bin

    _server, env, work, _home = mirror
    env = {**env, "PATH": str(make_bin(tmp_path, "gtx1060"))}
    result = run_fdl("libtorch", "download", "--dry-run", env=env, cwd=work)
    assert result.returncode == 0, result.stderr
    assert f"cu126/libtorch-shared-with-deps-{NEWEST}%2Bcu126.zip" in result.stderr
    assert "GTX 1060" in result.stderr


def test_a_driver_that_lists_no_gpu_is_refused_not_taken_for_a_cpu_machine(
    mirror, run_fdl, tmp_path
):
    from tests.fixtures.machines import lay_out_gpu_signs, make_bin

    server, env, work, home = mirror
    env = {
        **env,
        "PATH": str(make_bin(tmp_path, "driver_library_mismatch")),
        "FDL_PROBE_ROOT": str(lay_out_gpu_signs(tmp_path / "root", nodes=True)),
    }
    result = run_fdl("libtorch", "download", "--dry-run", env=env, cwd=work)
    err = " ".join(result.stderr.split())
    assert result.returncode == 3, err
    assert "cannot choose a libtorch: nvidia-smi is installed but reported no GPU" in err
    assert "pass --cpu or --cuda X.Y" in err and "libtorch-" not in err
    assert server.state.log == [] and not home.exists()
    chosen = run_fdl("libtorch", "download", "--dry-run", "--cpu", env=env, cwd=work)
    assert chosen.returncode == 0, chosen.stderr


def test_pinned_sha256_mismatch_installs_nothing_unless_no_verify(mirror, run_fdl, tmp_path):
    _server, env, work, home = mirror
    table = json.loads(
        (Path(__file__).parents[2] / "fdl" / "variants" / "torch_releases.json").read_text()
    )
    newest = max(table["releases"], key=lambda r: tuple(map(int, r["torch"].split("."))))
    newest["libtorch_sha256"] = {"linux-x86_64/cpu": "0" * 64}
    pinned = tmp_path / "table.json"
    pinned.write_text(json.dumps(table))
    env = {**env, "FDL_TORCH_TABLE": str(pinned)}
    result = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    assert result.returncode == 1 and "sha256 mismatch" in result.stderr
    assert not (home / "precompiled" / "cpu").exists() and not (home / ".active").exists()
    assert not (home / ".downloads").exists()  # the bad file is gone, not resumable
    trusted = run_fdl("libtorch", "download", "--cpu", "--no-verify", env=env, cwd=work)
    assert trusted.returncode == 0, trusted.stderr
    arch = (home / "precompiled" / "cpu" / ".arch").read_text()
    assert "sha256_pinned=no" in arch and "sha256_verified=no" in arch


@pytest.mark.parametrize(
    ("pyproject", "is_project"),
    [
        ('[project]\nname = "demo"\ndependencies = ["flodl>=0.1", "rich"]\n', True),
        (
            '[project]\nname = "demo"\n[project.optional-dependencies]\ntrain = ["flodl[gpu]"]\n',
            True,
        ),
        ('[project]\nname = "demo"\n[dependency-groups]\ndev = ["flodl"]\n', True),
        ('[project]\nname = "flodl"\ndependencies = ["torch"]\n', False),  # flodl's own checkout
        ('# we tried flodl once\n[project]\nname = "demo"\n', False),
        ("not toml [[[", False),
    ],
)
def test_what_counts_as_a_project(tmp_path, monkeypatch, pyproject, is_project):
    from fdl.libtorch_home import find_home

    monkeypatch.setenv("FLODL_HOME", str(tmp_path / "global"))
    (tmp_path / "p" / "src").mkdir(parents=True)
    (tmp_path / "p" / "pyproject.toml").write_text(pyproject)
    home = find_home(cwd=tmp_path / "p" / "src")
    expected = tmp_path / "p" / "libtorch" if is_project else tmp_path / "global" / "libtorch"
    assert (home.path, home.mode) == (expected, "project" if is_project else "global")


def _dead_url() -> str:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_mirror_flag_wins_over_the_environment(mirror, run_fdl):
    server, env, work, home = mirror
    env = {**env, "FDL_TORCH_MIRROR": _dead_url()}
    result = run_fdl(
        "libtorch", "download", "--cpu", "--mirror", server.url + "/", env=env, cwd=work
    )
    assert result.returncode == 0, result.stderr
    assert f"URL:  {server.url}{CPU_PATH.replace('+', '%2B')}" in result.stderr
    assert len(transfers(server)) == 1
    assert (home / "precompiled" / "cpu" / "lib" / "libtorch.so").is_file()
    arch = (home / "precompiled" / "cpu" / ".arch").read_text()
    assert f"url={server.url}/libtorch/cpu/" in arch  # recorded where it really came from


PROGRESS_BAR = "libtorch " + NEWEST + "+cpu"  # the bar's label; never printed otherwise


def test_no_progress_bar_without_a_terminal_even_with_force_color(mirror, run_fdl):
    _server, env, work, _home = mirror
    result = run_fdl("libtorch", "download", "--cpu", env={**env, "FORCE_COLOR": "1"}, cwd=work)
    assert result.returncode == 0, result.stderr
    assert PROGRESS_BAR not in result.stderr and "installed precompiled/cpu" in result.stderr


def _on_a_terminal(args: list[str], env: dict[str, str], cwd) -> tuple[int, str, str]:
    """fdl with stderr on a pseudo-terminal (stdout a pipe): (exit code, stdout, terminal text)."""
    import os
    import pty
    import subprocess
    import sys

    from tests.conftest import clean_env

    leader, follower = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-m", "fdl", *args],
        cwd=cwd,
        env=clean_env(**env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=follower,
        close_fds=True,
    )
    os.close(follower)
    screen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        screen += chunk
    os.close(leader)
    assert child.stdout is not None
    stdout = child.stdout.read().decode()
    return child.wait(timeout=120), stdout, screen.decode(errors="replace")


def test_progress_bar_on_a_terminal_and_not_with_json(mirror):
    server, env, work, home = mirror
    code, _out, screen = _on_a_terminal(["libtorch", "download", "--cpu"], env, work)
    assert code == 0, screen
    assert PROGRESS_BAR in screen  # the bar, drawn on the terminal

    code, out, screen = _on_a_terminal(
        ["libtorch", "download", "--cpu", "--force", "--json"], env, work
    )
    assert code == 0, screen
    assert PROGRESS_BAR not in screen
    data = json.loads(out)
    assert data["variant"] == "precompiled/cpu" and data["downloaded"] is True
    assert data["torch"] == NEWEST and len(data["sha256"]) == 64
    assert data["path"] == str(home / "precompiled" / "cpu")
    assert len(transfers(server)) == 2


def test_version_after_the_command_is_not_fdls_version(mirror, run_fdl):
    server, env, work, home = mirror
    args = ("libtorch", "download", "--cpu", "--version", "2.9", "--dry-run")
    result = run_fdl(*args, env=env, cwd=work)
    assert result.returncode == 2 and result.stdout == ""  # not "fdl 0.x" and exit 0
    assert "error: 'fdl libtorch download' has no --version option" in result.stderr
    assert "a torch release is given with --torch VERSION" in result.stderr
    assert server.state.log == [] and not home.exists()
