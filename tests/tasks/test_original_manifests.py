"""The Rust original's example manifests (tests/fixtures/original_manifests), run unchanged.

The tree is copied into a temporary directory with each ``fdl.yml.example`` renamed to
``fdl.yml``. Every declared command is listed by ``fdl --help`` and explained by ``fdl CMD -h``;
running them through a fake ``docker`` that logs its arguments gives the inner command line the
original built. The expected lines come from :func:`original_run_line` and
:func:`original_entry_line`, a transcription of the original's ``run.rs`` rules
(``compose_run_command``, ``posix_quote``, ``shell_join`` and the ``cd <root>/<dir> &&`` prefix),
written separately from the code under test.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT, clean_env

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "original_manifests"
MANIFESTS = sorted(p.relative_to(FIXTURES).parent for p in FIXTURES.rglob("fdl.yml.example"))
FAKE_DOCKER = """#!/usr/bin/env python3
import json, os, sys
if sys.argv[1:3] == ["compose", "version"]:
    print("Docker Compose version v2.99.0"); sys.exit(0)
if sys.argv[1:2] == ["version"]:
    print("28.2.2"); sys.exit(0)
keep = ("LIBTORCH_CPU_PATH", "LIBTORCH_HOST_PATH", "CUDA_VERSION", "CUDA_TAG")
with open(os.environ["FAKE_DOCKER_LOG"], "a") as out:
    out.write(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(),
                          "env": {k: os.environ[k] for k in keep if k in os.environ}}) + "\\n")
sys.exit(0)
"""
FAKE_CARGO = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["FAKE_CARGO_LOG"], "a") as out:
    out.write(json.dumps(sys.argv[1:]) + "\\n")
"""


# --- the original's rules, transcribed from its run.rs -----------------------------------------


def posix_quote(s: str) -> str:
    if s == "":
        return "''"
    if all(c.isascii() and (c.isalnum() or c in "_-./:=+@,") for c in s):
        return s
    return "'" + s.replace("'", "'\\''") + "'"


def split_append_dashdash(s: str) -> tuple[str, str]:
    s = s.strip()
    if s == "--":
        return "", ""
    if s.startswith("-- "):
        return "", s[3:].strip()
    if s.endswith(" --"):
        return s[:-3].strip(), ""
    if " -- " in s:
        before, after = s.split(" -- ", 1)
        return before.strip(), after.strip()
    return s, ""


def original_run_line(run: str, user_args: list[str], append: str | None) -> str:
    suffix = append.strip() if append and append.strip() else None
    pre = post = ""
    has = False
    if suffix is not None:
        pre, post = split_append_dashdash(suffix)
        has = (
            suffix == "--" or suffix.startswith("-- ") or suffix.endswith(" --") or " -- " in suffix
        )
    if "--" in user_args:
        i = user_args.index("--")
        user_pre, user_post = user_args[:i], user_args[i + 1 :]
    else:
        user_pre, user_post = user_args, None
    out = run.strip()
    if pre:
        out += " " + pre
    for a in user_pre:
        out += " " + posix_quote(a)
    if has or post or user_post:
        out += " --"
        if post:
            out += " " + post
        for a in user_post or []:
            out += " " + posix_quote(a)
    return out


def shell_join(args: list[str]) -> str:
    return " ".join(
        "'" + a.replace("'", "'\\''") + "'" if (" " in a or '"' in a or a == "") else a
        for a in args
    )


def original_entry_line(root: str, workdir: str, entry: str, args: list[str]) -> str:
    inner = f"{entry} {shell_join(args)}"
    return inner if workdir in ("", ".") else f"cd {root}/{workdir} && {inner}"


# --- the copied tree -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("original") / "flodl"
    shutil.copytree(FIXTURES, root, ignore=shutil.ignore_patterns("README.md"))
    for example in root.rglob("fdl.yml.example"):
        example.rename(example.with_name("fdl.yml"))
    # an active CUDA libtorch, whose variables the original exported to compose
    variant = root / "libtorch" / "precompiled" / "cu126"
    (variant / "lib").mkdir(parents=True)
    (variant / ".arch").write_text("torch=2.7.0\ncuda=12.6\n")
    (root / "libtorch" / ".active").write_text("precompiled/cu126\n")
    return root


@pytest.fixture
def fdl(tree: Path, tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text(FAKE_DOCKER.replace("/usr/bin/env python3", sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    cargo = bin_dir / "cargo"
    cargo.write_text(FAKE_CARGO.replace("/usr/bin/env python3", sys.executable))
    cargo.chmod(cargo.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "docker.jsonl"

    def run(cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
        for stale in (log, tmp_path / "cargo.jsonl"):
            stale.unlink(missing_ok=True)
        env = clean_env(
            PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            FAKE_DOCKER_LOG=str(log),
            FAKE_CARGO_LOG=str(tmp_path / "cargo.jsonl"),
        )
        done = subprocess.run(
            [sys.executable, "-m", "fdl", *args],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        calls = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        return done, calls

    return run


def commands_of(tree: Path, directory: Path) -> dict[str, dict]:
    data = yaml.safe_load((tree / directory / "fdl.yml").read_text())
    return {name: spec or {} for name, spec in (data.get("commands") or {}).items()}


def inner(call: dict) -> str:
    argv = call["argv"]
    assert argv[argv.index("run") + 1] == "--rm"
    return argv[-1]  # sh -c <pick bash, else sh> fdl-shell <inner>


@pytest.mark.slow
@pytest.mark.parametrize("directory", MANIFESTS, ids=str)
def test_help_lists_every_declared_command_and_each_explains_itself(tree, fdl, directory):
    where = tree / directory
    listing, _ = fdl(where, "--help")
    assert listing.returncode == 0 and "warning" not in listing.stderr, listing.stderr
    commands = commands_of(tree, directory)
    if not commands:  # an entry-only manifest (convert, export, ...): its help is 'fdl -h' there
        return
    section = listing.stdout.split("Project commands", 1)[1]
    for name in commands:
        assert f"\n  {name} " in section or f"\n  {name}\n" in section, name
    for name in commands:
        shown, calls = fdl(where, name, "-h")
        assert shown.returncode == 0, (name, shown.stderr)
        assert f"fdl {name}" in shown.stdout
        assert all(call["argv"][-1].endswith("--fdl-schema") for call in calls)  # probes only


@pytest.mark.slow
@pytest.mark.parametrize("directory", MANIFESTS, ids=str)
def test_run_commands_build_the_originals_inner_command_line(tree, fdl, tmp_path, directory):
    where = tree / directory
    for name, spec in commands_of(tree, directory).items():
        if "run" not in spec:
            continue
        user = ["-p", "flodl hf", "--", "--it's"]
        done, calls = fdl(where, name, "--", *user)
        assert done.returncode == 0, (name, done.stderr)
        expected = original_run_line(spec["run"], user, spec.get("append"))
        if "docker" not in spec:  # on the host: the fake cargo got what sh made of the line
            logged = (tmp_path / "cargo.jsonl").read_text().splitlines()
            assert [json.loads(x) for x in logged] == [shlex.split(expected)[1:]]
            assert calls == []
            continue
        assert len(calls) == 1, (name, calls)
        assert inner(calls[0]) == expected
        argv = calls[0]["argv"]
        assert "-w" not in argv  # the service's own working_dir
        assert argv[argv.index("run") + 1 :].count(spec["docker"]) >= 1
        # the container path of the project root: the manifest's directory under the mount
        root = "/workspace" if directory == Path(".") else f"/workspace/{directory.as_posix()}"
        assert f"FDL_PROJECT_ROOT={root}" in argv


def test_the_root_check_command_is_the_projects(tree, fdl):
    done, calls = fdl(tree, "check")
    assert done.returncode == 0 and inner(calls[0]) == "cargo check"
    listing, _ = fdl(tree, "--help")
    assert "[shadowed here: 'fdl builtin check']" in listing.stdout


def test_libtorch_variables_reach_compose(tree, fdl):
    _, calls = fdl(tree, "cuda-build")
    assert calls[0]["env"] == {
        "LIBTORCH_CPU_PATH": "./libtorch/precompiled/cpu",
        "LIBTORCH_HOST_PATH": "./libtorch/precompiled/cu126",
        "CUDA_VERSION": "12.6.0",
        "CUDA_TAG": "12.6",
    }


def test_entries_build_the_originals_inner_command_line(tree, fdl):
    # ddp-bench: cargo entry (never probed without compile:), training/output defaults + schema
    done, calls = fdl(tree, "ddp-bench", "--model", "mlp", "--report", "my report.md")
    assert done.returncode == 0, done.stderr
    assert [inner(c) for c in calls] == [
        original_entry_line(
            "/workspace",
            "ddp-bench",
            "cargo run --release --features cuda --",
            [
                "--epochs",
                "5",
                "--seed",
                "42",
                "--output",
                "runs/",
                "--model",
                "mlp",
                "--report",
                "my report.md",
            ],
        )
    ]
    # its presets pin choices the schema refuses ('linear'): the original refused them too
    quick, calls = fdl(tree, "ddp-bench", "quick")
    assert quick.returncode == 2 and calls == []
    assert "preset 'quick' sets option 'model' to 'linear'" in quick.stderr
    wrong, calls = fdl(tree, "ddp-bench", "--mode", "turbo")
    assert wrong.returncode == 2 and calls == [] and "allowed: solo-0, solo-1" in wrong.stderr
    _sweep, calls = fdl(tree, "ddp-bench", "full-sweep")
    assert [inner(c) for c in calls] == [
        original_entry_line(
            "/workspace",
            "ddp-bench",
            "cargo run --release --features cuda --",
            [
                "--epochs",
                "5",
                "--seed",
                "42",
                "--output",
                "runs/",
                "--mode",
                "all",
                "--model",
                "all",
            ],
        )
    ]
    # benchmarks (via 'bench: path: ./benchmarks/'): 'bash run.sh' is probed through the service
    bench, calls = fdl(tree, "bench", "--refresh-schema", "cpu-publish")  # probe now, cached or not
    assert bench.returncode == 0, bench.stderr
    assert [inner(c) for c in calls][-1] == original_entry_line(
        "/workspace",
        "benchmarks",
        "bash run.sh",
        ["--cpu", "--rounds", "10", "--warmup-secs", "15"],
    )
    assert any(inner(c) == "bash run.sh --fdl-schema" for c in calls[:-1])
    # flodl-hf export: compile: true lets fdl probe the cargo entry
    export, calls = fdl(
        tree, "flodl-hf", "export", "--refresh-schema", "--hub", "bert-base-uncased"
    )
    assert export.returncode == 0, export.stderr
    entry = (
        "cargo run --release --manifest-path /workspace/flodl-hf/Cargo.toml "
        "--example export_hf --features hub --"
    )
    assert [inner(c) for c in calls] == [
        f"{entry} --fdl-schema",
        original_entry_line("/workspace", "flodl-hf/export", entry, ["--hub", "bert-base-uncased"]),
    ]
