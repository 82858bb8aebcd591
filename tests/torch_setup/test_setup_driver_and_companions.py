"""``fdl setup`` against what is already installed, into throwaway venvs from a loopback index:
a driver that does not answer never costs the user their CUDA torch; torchvision moves with
torch; ``--force`` reinstalls torch alone; a system Python's refusal (PEP 668) says so."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys

import pytest

from fdl.variants import load_table
from tests.fixtures.machines import lay_out_gpu_signs, make_bin
from tests.torch_setup.fake_torch_wheel import build_companion, build_wheel, serve_index
from tests.torch_setup.test_setup_cli import installed_torch, pip_isolated

NEWEST = load_table().newest.torch
VISION = "0.29.1"  # torchvision's release for torch 2.14.1
CU126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
GTX1060 = [{"name": "NVIDIA GeForce GTX 1060 6GB", "cc": [6, 1]}]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    path = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, capture_output=True)
    return path / "bin" / "python"


def serve_builds(server) -> None:
    """The CPU and cu126 builds of the newest torch, each with its torchvision."""
    serve_index(
        server,
        "cpu",
        [build_wheel(NEWEST, "cpu"), build_companion("torchvision", VISION, "cpu", NEWEST)],
    )
    serve_index(
        server,
        "cu126",
        [
            build_wheel(NEWEST, "cu126", gpus=GTX1060, archs=CU126),
            build_companion("torchvision", VISION, "cu126", NEWEST),
        ],
    )


def pip_install(venv, server, tag: str, *requirements: str) -> None:
    """Put a given state in place with pip itself (not fdl)."""
    subprocess.run(
        [
            str(venv),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--index-url",
            f"{server.url}/whl/{tag}",
            "--trusted-host",
            "127.0.0.1",
            *requirements,
        ],
        check=True,
        capture_output=True,
        env=pip_isolated_env(server),
    )


def pip_isolated_env(server) -> dict[str, str]:
    import os

    return {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_CACHE_DIR": "1"}


def installed(venv, name: str) -> str | None:
    code = f"import importlib.metadata as m\ntry: print(m.version({name!r}))\nexcept Exception: print('-')"
    out = subprocess.run([str(venv), "-c", code], capture_output=True, text=True).stdout.strip()
    return None if out == "-" else out


def setup(run_fdl, venv, env, cwd, *extra: str):
    args = ("setup", "--python", str(venv), "--installer", "pip", *extra)
    return run_fdl(*args, env=env, cwd=cwd, timeout=300)


@pytest.mark.parametrize(
    ("machine", "signs", "advice"),
    [
        (
            "driver_library_mismatch",
            {"nodes": True},
            "the driver was upgraded without a reboot: reboot",
        ),
        ("driver_not_loaded", {"pci": True}, "reinstall the NVIDIA driver"),
        (
            None,
            {"module": "575.64.03", "nodes": True},
            "the NVIDIA kernel module 575.64.03 is loaded but nvidia-smi was not found",
        ),
    ],
)
def test_a_driver_that_does_not_answer_never_replaces_a_cuda_torch(
    run_fdl, tmp_path, server, venv, machine, signs, advice
):
    serve_builds(server)
    pip_install(venv, server, "cu126", f"torch=={NEWEST}+cu126")
    env = pip_isolated(tmp_path, server)
    env["PATH"] = str(make_bin(tmp_path, machine))
    env["FDL_PROBE_ROOT"] = str(lay_out_gpu_signs(tmp_path / "root", **signs))
    for mode in ("--dry-run", "-y"):
        result = setup(run_fdl, venv, env, tmp_path, mode)
        err = " ".join(result.stderr.split())
        assert result.returncode == 3, err
        assert "cannot choose a build: " in err and advice in err
        assert "or pass --variant cpu to install the CPU build on purpose" in err
        assert "no NVIDIA GPU detected" not in err and "Command:" not in err
    assert installed_torch(venv) == f"{NEWEST}+cu126"  # left as it was
    # on purpose, the CPU build is still one option away
    forced = setup(run_fdl, venv, env, tmp_path, "--dry-run", "--variant", "cpu")
    assert forced.returncode == 0, forced.stderr
    assert f"torch=={NEWEST}+cpu" in forced.stderr


def test_a_container_without_gpu_access_on_a_gpu_host_plans_the_cpu_build(
    run_fdl, tmp_path, server, venv
):
    # /sys/module is the host's in a container; without --gpus there is no /dev/nvidiactl
    env = pip_isolated(tmp_path, server)
    env["PATH"] = str(make_bin(tmp_path, None))
    env["FDL_PROBE_ROOT"] = str(lay_out_gpu_signs(tmp_path / "root", module="575.64.03"))
    result = setup(run_fdl, venv, env, tmp_path, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert f"torch=={NEWEST}+cpu" in result.stderr and "cannot choose" not in result.stderr


def test_torchvision_moves_with_torch_and_force_reinstalls_only_them(
    run_fdl, tmp_path, server, venv
):
    serve_builds(server)
    pip_install(venv, server, "cpu", f"torch=={NEWEST}+cpu", f"torchvision=={VISION}+cpu")
    env = {**pip_isolated(tmp_path, server), "PATH": str(make_bin(tmp_path, "gtx1060"))}
    result = setup(run_fdl, venv, env, tmp_path, "-y")
    err = result.stderr
    assert result.returncode == 0, err
    assert f"torch=={NEWEST}+cu126 torchvision=={VISION}+cu126 --index-url" in err
    assert (installed(venv, "torch"), installed(venv, "torchvision")) == (
        f"{NEWEST}+cu126",
        f"{VISION}+cu126",
    )
    again = setup(run_fdl, venv, env, tmp_path, "-y")
    assert again.returncode == 0 and "already installed" in again.stderr, again.stderr

    # torchvision of another build beside the right torch: noticed, and moved
    pip_install(venv, server, "cpu", "--force-reinstall", f"torchvision=={VISION}+cpu")
    stale = setup(run_fdl, venv, env, tmp_path, "--dry-run")
    err = " ".join(stale.stderr.split())
    assert "already installed" not in err, err
    assert f"torchvision {VISION}+cpu: not the build of torch {NEWEST}+cu126, moving with it" in err
    assert f"torchvision=={VISION}+cu126" in err and "--force-reinstall" not in err
    # ... and --force then still reinstalls torch (it is the build asked for), with the move
    forced_stale = setup(run_fdl, venv, env, tmp_path, "--dry-run", "--force")
    err = " ".join(forced_stale.stderr.split())
    assert f"torchvision=={VISION}+cu126" in err and "--force-reinstall --no-deps" in err, err
    assert setup(run_fdl, venv, env, tmp_path, "-y").returncode == 0
    assert installed(venv, "torchvision") == f"{VISION}+cu126"

    # --force on the installed build: torch and torchvision again, not their dependencies
    forced = setup(run_fdl, venv, env, tmp_path, "--dry-run", "--force")
    err = " ".join(forced.stderr.split())
    assert (
        f"torch=={NEWEST}+cu126 torchvision=={VISION}+cu126 --index-url {server.url}/whl/cu126 "
        "--trusted-host 127.0.0.1 --force-reinstall --no-deps" in err
    ), err
    # --force towards another build needs no forcing (the +cpu pins switch it), and that
    # build's dependencies must install
    env_cpu = {**env, "PATH": str(make_bin(tmp_path, None))}
    other = setup(run_fdl, venv, env_cpu, tmp_path, "--dry-run", "--force")
    err = " ".join(other.stderr.split())
    assert f"torch=={NEWEST}+cpu torchvision=={VISION}+cpu" in err
    assert "--force-reinstall" not in err and "--no-deps" not in err


def test_a_system_python_refusing_pip_says_nothing_changed(run_fdl, tmp_path, server, venv):
    """An interpreter whose pip refuses as Debian's system Python does (PEP 668)."""
    python = tmp_path / "system-python"
    python.write_text(
        f"#!{shutil.which('sh')}\n"
        'if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then\n'
        f"  {shutil.which('cat')} >&2 <<'EOF'\n"
        "error: externally-managed-environment\n\n"
        "× This environment is externally managed\n"
        "╰─> To install Python packages system-wide, try apt install\n"
        "    python3-xyz, where xyz is the package you are trying to\n"
        "    install.\n"
        "hint: See PEP 668 for the detailed specification.\n"
        "EOF\n"
        "  exit 1\n"
        "fi\n"
        f'exec "{venv}" "$@"\n'
    )
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    serve_builds(server)
    env = pip_isolated(tmp_path, server)
    result = setup(run_fdl, python, env, tmp_path, "-y", "--force", "--variant", "cu126")
    err = " ".join(result.stderr.split())
    assert result.returncode == 1, err
    assert "error: externally-managed-environment" in err  # pip's own words, shown
    assert (
        f"pip refused to install into {python}: it is an externally managed (system) Python "
        "(PEP 668); nothing was changed" in err
    )
    assert "python3 -m venv .venv, then fdl setup --python .venv/bin/python" in err
    assert "partly updated" not in err
