"""``fdl libtorch download`` against a hostile loopback mirror: zip bombs, wrong and user-supplied
hashes, unverified downloads refused on request, a stalled server, and no leftovers on refusal."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import pytest

from tests.fixtures.loopback import sha256
from tests.fixtures.machines import CPU_PATH, libtorch_zip


def words(text: str) -> str:
    """stderr with rich's line wrapping undone."""
    return " ".join(text.split())


def bomb(size: int) -> bytes:
    """A libtorch-shaped archive with ``size`` bytes of zeros inside (deflate: ~1000x)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("libtorch/lib/libtorch.so", b"\x7fELF")
        with zf.open("libtorch/lib/libc10.so", "w") as out:
            block = bytes(1 << 20)
            for _ in range(size // len(block)):
                out.write(block)
    return buf.getvalue()


def assert_nothing_left(home: Path) -> None:
    """A refused archive leaves no variant, no .active, no staging directory, no download."""
    assert not (home / "precompiled" / "cpu").exists()
    assert not (home / ".active").exists()
    assert not (home / ".downloads").exists()
    if (home / "precompiled").exists():
        assert list((home / "precompiled").iterdir()) == []  # no .cpu.extract-* staging


def test_zip_bomb_by_ratio_is_refused_with_default_limits(mirror, run_fdl):
    server, env, work, home = mirror
    data = bomb(64 << 20)  # 64 MiB of zeros in ~64 KB: far over the 50x default
    server.add(CPU_PATH, data)
    result = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    assert result.returncode == 1, result.stderr
    err = words(result.stderr)
    assert "zip bomb" in err and "over the 50x limit" in err and "--max-extract-ratio" in err
    assert_nothing_left(home)


def test_zip_bomb_by_size_is_refused_and_the_limit_can_be_raised(mirror, run_fdl):
    server, env, work, home = mirror
    server.add(CPU_PATH, libtorch_zip(extra={"libtorch/lib/libc10.so": os.urandom(3 << 20)}))
    env = {**env, "FDL_MAX_EXTRACT_SIZE": "2M"}
    refused = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    assert refused.returncode == 1, refused.stderr
    err = words(refused.stderr)
    assert "over the 2.0 MiB limit" in err and "FDL_MAX_EXTRACT_SIZE" in err
    assert_nothing_left(home)
    # the flag wins over the environment: a user who trusts the archive raises the cap
    raised = run_fdl("libtorch", "download", "--cpu", "--max-extract-size", "8M", env=env, cwd=work)
    assert raised.returncode == 0, raised.stderr
    assert (home / "precompiled" / "cpu" / "lib" / "libc10.so").stat().st_size == 3 << 20


def test_bad_limits_are_usage_errors(mirror, run_fdl):
    server, env, work, _home = mirror
    for args in (["--max-extract-size", "lots"], ["--max-extract-ratio", "-1"]):
        result = run_fdl("libtorch", "download", "--cpu", *args, env=env, cwd=work)
        assert result.returncode == 2 and args[0] in result.stderr, result.stderr
    env = {**env, "FDL_STALL_TIMEOUT": "soon"}
    result = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work)
    assert result.returncode == 2 and "FDL_STALL_TIMEOUT" in result.stderr
    assert server.state.log == []  # nothing was asked of the mirror


def test_wrong_user_hash_installs_nothing(mirror, run_fdl):
    server, env, work, home = mirror
    result = run_fdl("libtorch", "download", "--cpu", "--sha256", "ab" * 32, env=env, cwd=work)
    assert result.returncode == 1, result.stderr
    err = words(result.stderr)
    assert f"expected {'ab' * 32}, got {sha256(server.state.files[CPU_PATH].body)}" in err
    assert_nothing_left(home)


def test_user_hash_is_checked_and_recorded(mirror, run_fdl):
    server, env, work, home = mirror
    digest = sha256(server.state.files[CPU_PATH].body)
    result = run_fdl(
        "libtorch", "download", "--cpu", "--sha256", digest.upper(), "--json", env=env, cwd=work
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["verification"] == {
        "checked": True,
        "source": "user",
        "expected": digest,
        "sha256": digest,
    }
    assert "sha256 checked against --sha256" in words(result.stderr)
    arch = (home / "precompiled" / "cpu" / ".arch").read_text()
    assert f"sha256={digest}\n" in arch
    assert "sha256_verified=yes\n" in arch and "sha256_source=user\n" in arch
    info = run_fdl("libtorch", "info", env=env, cwd=work)
    assert "Verified: yes, against a --sha256 hash" in info.stdout


def test_unverified_download_says_so_everywhere(mirror, run_fdl):
    server, env, work, _home = mirror
    digest = sha256(server.state.files[CPU_PATH].body)
    result = run_fdl("libtorch", "download", "--cpu", "--json", env=env, cwd=work)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["verification"] == {
        "checked": False,
        "source": None,
        "expected": None,
        "sha256": digest,
    }
    assert "warning: precompiled/cpu: NOT verified" in words(result.stderr)
    info = run_fdl("libtorch", "info", env=env, cwd=work)
    assert "Verified: no" in info.stdout
    helptext = words(run_fdl("libtorch", "download", "--help", env=env, cwd=work).stdout)
    assert "verified)" not in helptext and "--sha256" in helptext


@pytest.mark.parametrize("how", ["flag", "env"])
def test_require_verified_refuses_an_unpinned_download(mirror, run_fdl, how):
    server, env, work, home = mirror
    args = ["--require-verified"] if how == "flag" else []
    if how == "env":
        env = {**env, "FDL_REQUIRE_VERIFIED": "1"}
    refused = run_fdl("libtorch", "download", "--cpu", *args, env=env, cwd=work)
    assert refused.returncode == 1, refused.stderr
    err = words(refused.stderr)
    assert "no sha256 is known" in err and "--sha256 HEX" in err
    assert server.gets(CPU_PATH) == []  # refused before downloading anything
    assert_nothing_left(home)
    digest = sha256(server.state.files[CPU_PATH].body)
    ok = run_fdl("libtorch", "download", "--cpu", *args, "--sha256", digest, env=env, cwd=work)
    assert ok.returncode == 0, ok.stderr
    assert "sha256_verified=yes" in (home / "precompiled" / "cpu" / ".arch").read_text()


def test_a_dry_run_refuses_what_the_real_run_would_refuse(mirror, run_fdl):
    server, env, work, home = mirror
    real = run_fdl("libtorch", "download", "--cpu", "--require-verified", env=env, cwd=work)
    dry = run_fdl(
        "libtorch", "download", "--cpu", "--require-verified", "--dry-run", env=env, cwd=work
    )
    assert real.returncode == dry.returncode == 1, dry.stderr
    refusal = real.stderr[real.stderr.index("error: ") :]
    assert "no sha256 is known" in refusal and refusal in dry.stderr
    assert "dry run: nothing downloaded" not in dry.stderr
    digest = sha256(server.state.files[CPU_PATH].body)
    ok = run_fdl(
        "libtorch", "download", "--cpu", "--require-verified", "--sha256", digest, "--dry-run",
        env=env, cwd=work,
    )  # fmt: skip
    assert ok.returncode == 0 and "dry run: nothing downloaded" in ok.stderr, ok.stderr
    assert server.gets(CPU_PATH) == []
    assert_nothing_left(home)


def test_contradictory_or_malformed_hash_options_are_usage_errors(mirror, run_fdl):
    server, env, work, _home = mirror
    cases = [
        ["--sha256", "xyz"],
        ["--sha256", "ab" * 32, "--no-verify"],
        ["--require-verified", "--no-verify"],
    ]
    for args in cases:
        result = run_fdl("libtorch", "download", "--cpu", *args, env=env, cwd=work)
        assert result.returncode == 2, (args, result.stderr)
    assert server.state.log == []


def test_stalled_mirror_fails_within_the_configured_timeout_and_resumes(mirror, run_fdl):
    server, env, work, home = mirror
    body = libtorch_zip(extra={"libtorch/lib/libc10.so": os.urandom(400_000)})
    served = server.add(CPU_PATH, body, stall_at=150_000)
    result = run_fdl(
        "libtorch", "download", "--cpu", "--stall-timeout", "1.5", env=env, cwd=work, timeout=60
    )
    assert result.returncode == 3, result.stderr
    err = words(result.stderr)
    host = server.url.removeprefix("http://")
    assert f"stalled: {host} sent nothing for" in err and "stall timeout 1.5 s" in err
    assert "re-run the same command to resume (150000 bytes kept" in err
    assert not (home / ".active").exists()
    served.stall_at = None
    again = run_fdl("libtorch", "download", "--cpu", env=env, cwd=work, timeout=60)
    assert again.returncode == 0, again.stderr
    assert server.gets(CPU_PATH)[-1].get("Range") == "bytes=150000-"
    assert sha256(body) in (home / "precompiled" / "cpu" / ".arch").read_text()


def test_refused_layout_keeps_the_installed_variant_and_leaves_no_download(mirror, run_fdl):
    server, env, work, home = mirror
    assert run_fdl("libtorch", "download", "--cpu", env=env, cwd=work).returncode == 0
    installed = (home / "precompiled" / "cpu" / ".arch").read_text()
    server.add(CPU_PATH, libtorch_zip(lib="README.txt"))
    result = run_fdl("libtorch", "download", "--cpu", "--force", env=env, cwd=work)
    assert result.returncode == 1 and "no libtorch library" in result.stderr
    assert (home / "precompiled" / "cpu" / ".arch").read_text() == installed  # still there
    assert (home / "precompiled" / "cpu" / "lib" / "libtorch.so").is_file()
    assert not (home / ".downloads").exists()
    assert sorted(p.name for p in (home / "precompiled").iterdir()) == ["cpu"]  # no staging
