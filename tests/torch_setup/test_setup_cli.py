"""``fdl setup``: plan, confirm, install from the right index, verify in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from fdl.variants import load_table
from tests.fixtures.machines import fdl_env, make_bin
from tests.torch_setup.fake_torch_wheel import build_wheel, serve_index

NEWEST = load_table().newest.torch
HERE_TORCH = version("torch")


def test_dry_run_shows_plan_and_exact_command_and_changes_nothing(run_fdl, tmp_path):
    env = fdl_env(tmp_path, PATH=str(make_bin(tmp_path, "mixed_gtx1060_rtx5060ti")))
    result = run_fdl("setup", "--dry-run", "--installer", "pip", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert f"Plan: torch {NEWEST} + cu132 (compromise)" in err
    assert "no single pre-built" in err
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1" in err
    assert f"Environment: {sys.executable}" in err
    assert (
        f"-m pip install --disable-pip-version-check torch=={NEWEST}+cu132 --index-url https://download.pytorch.org/whl/cu132"
        in err
    )
    assert "dry run: nothing was installed" in err
    assert version("torch") == HERE_TORCH


def test_without_a_terminal_it_asks_for_yes(run_fdl, tmp_path):
    env = fdl_env(tmp_path)
    result = run_fdl(
        "setup", "--torch", "2.9", "--installer", "pip", env=env, cwd=tmp_path, input=""
    )
    assert result.returncode == 2
    assert "no terminal to confirm the install — re-run with -y" in result.stderr


def test_bad_options(run_fdl, tmp_path):
    env = fdl_env(tmp_path)
    assert run_fdl("setup", "--installer", "conda", env=env, cwd=tmp_path).returncode == 2
    unknown = run_fdl("setup", "--torch", "1.0", "--dry-run", env=env, cwd=tmp_path)
    assert unknown.returncode == 2 and "not in fdl's release table" in unknown.stderr
    not_python = run_fdl(
        "setup", "--python", str(tmp_path / "nope"), "--dry-run", env=env, cwd=tmp_path
    )
    assert not_python.returncode == 2 and "is not a working Python interpreter" in not_python.stderr


def test_an_unreadable_release_table_is_one_error_line(run_fdl, tmp_path):
    env = fdl_env(tmp_path, FDL_TORCH_TABLE=str(tmp_path / "nope.json"))
    result = run_fdl("setup", "--dry-run", env=env, cwd=tmp_path)
    assert result.returncode == 3 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: cannot read the torch release table")
    assert "nope.json (FDL_TORCH_TABLE): No such file or directory — " in result.stderr


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A throwaway venv with pip (no torch): the environment fdl setup installs into."""
    path = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, capture_output=True)
    return path / "bin" / "python"


def pip_isolated(tmp_path, server) -> dict[str, str]:
    """fdl's environment for a real pip run: our mirror only, no site pip config or find-links."""
    (tmp_path / "no-links").mkdir(exist_ok=True)
    return fdl_env(
        tmp_path,
        FDL_TORCH_MIRROR=server.url,
        PIP_CONFIG_FILE=os.devnull,
        PIP_FIND_LINKS=str(tmp_path / "no-links"),
        PIP_NO_CACHE_DIR="1",  # every install really fetches from the mirror
    )


def setup_into(run_fdl, venv, env, cwd, *extra: str):
    """``fdl setup -y`` into the throwaway venv with pip (a real install, from the mirror)."""
    args = ("setup", "-y", "--python", str(venv), "--installer", "pip", *extra)
    return run_fdl(*args, env=env, cwd=cwd, timeout=300)


def installed_torch(python) -> str | None:
    code = "import importlib.metadata as m\ntry: print(m.version('torch'))\nexcept Exception: print('-')"
    out = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    return None if out == "-" else out


def installed_file(python, relative: str) -> str:
    """Where ``relative`` (e.g. ``torch/__init__.py``) lives in ``python``'s site-packages."""
    code = "import sysconfig, sys; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    return os.path.join(purelib, relative)


@pytest.mark.slow
def test_installs_from_the_local_index_into_a_throwaway_venv_and_verifies(
    run_fdl, tmp_path, server, venv
):
    from tests.fixtures.machines import libtorch_zip

    serve_index(server, "cpu", [build_wheel(NEWEST, "cpu")])
    server.add(f"/libtorch/cpu/libtorch-shared-with-deps-{NEWEST}+cpu.zip", libtorch_zip())
    env = pip_isolated(tmp_path, server)
    args = ("setup", "-y", "--python", str(venv), "--installer", "pip")
    result = run_fdl(*args, "--libtorch", env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert installed_torch(venv) == f"{NEWEST}+cpu"
    home = tmp_path / "flodl-home" / "libtorch"  # --libtorch: the matching C++ build too
    assert (home / ".active").read_text() == "precompiled/cpu\n"
    err = result.stderr
    assert f"Environment: {venv}" in err
    assert f"--index-url {server.url}/whl/cpu --trusted-host 127.0.0.1" in err
    assert f"import torch {NEWEST}+cpu (CUDA none): ok" in err and "CPU tensor op: ok" in err
    assert "Done. Ran:" in err

    # Same build already there: nothing is installed, it is only verified.
    before = len(server.gets(f"/files/torch-{NEWEST}+cpu-py3-none-any.whl"))
    again = run_fdl(*args, env=env, cwd=tmp_path, timeout=300)
    assert again.returncode == 0 and "already installed" in again.stderr
    assert len(server.gets(f"/files/torch-{NEWEST}+cpu-py3-none-any.whl")) == before

    # --force really re-installs: the wheel is fetched again and a damaged install is repaired.
    init = Path(installed_file(venv, "torch/__init__.py"))
    init.write_text("raise ImportError('tampered with')\n")
    forced = run_fdl(*args, "--force", env=env, cwd=tmp_path, timeout=300)
    assert forced.returncode == 0, forced.stderr
    assert "--force-reinstall --no-deps" in forced.stderr and "Done. Ran:" in forced.stderr
    assert len(server.gets(f"/files/torch-{NEWEST}+cpu-py3-none-any.whl")) == before + 1
    assert "tampered" not in init.read_text() and f"import torch {NEWEST}+cpu" in forced.stderr


@pytest.mark.slow
def test_a_build_that_does_not_import_fails_verification(run_fdl, tmp_path, server, venv):
    serve_index(server, "cpu", [build_wheel(NEWEST, "cpu", broken=True)])
    env = pip_isolated(tmp_path, server)
    result = setup_into(run_fdl, venv, env, tmp_path, "--force")
    assert result.returncode == 1
    assert "torch is installed but does not work here" in result.stderr
    assert "libtorch_cuda.so" in result.stderr


@pytest.mark.slow
def test_failed_install_names_the_command(run_fdl, tmp_path, server, venv):
    serve_index(server, "cpu", [])  # the index has no torch at all
    env = pip_isolated(tmp_path, server)
    result = setup_into(run_fdl, venv, env, tmp_path, "--force", "--torch", "2.9")
    assert result.returncode == 1
    assert "pip failed" in result.stderr and "torch==2.9.1+cpu" in result.stderr


def interactive_setup(tmp_path, answers: bytes, *args: str, machine: str | None = None):
    """Run ``fdl setup`` on a pseudo-terminal, typing ``answers``; returns (code, stderr)."""
    import pty
    import subprocess

    from tests.conftest import clean_env

    primary, secondary = pty.openpty()
    env = clean_env(**fdl_env(tmp_path, PATH=str(make_bin(tmp_path, machine))))
    proc = subprocess.Popen(
        [sys.executable, "-m", "fdl", "setup", "--installer", "pip", *args],
        stdin=secondary,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
        text=True,
    )
    os.close(secondary)
    os.write(primary, answers)
    _, err = proc.communicate(timeout=120)
    os.close(primary)
    return proc.returncode, err


def test_interactive_no_installs_nothing(tmp_path):
    code, err = interactive_setup(tmp_path, b"n\n", "--torch", "2.9")
    assert code == 1, err
    assert "Install?" in err and "setup cancelled; nothing was installed" in err
    assert version("torch") == HERE_TORCH


def test_mixed_gpus_let_the_user_pick_the_compromise(tmp_path):
    code, err = interactive_setup(tmp_path, b"cu126\nn\n", machine="mixed_gtx1060_rtx5060ti")
    assert code == 1, err
    assert "Build to install" in err and "[cu126/cu130/cu132/cpu]" in err
    assert f"Plan: torch {NEWEST} + cu126 (your choice)" in err
    assert "cu126 will not run everywhere here" in err
    assert "--index-url https://download.pytorch.org/whl/cu126" in err  # the command follows
    assert "setup cancelled" in err


def test_picking_cpu_at_the_compromise_prompt_keeps_the_pinned_release(tmp_path):
    code, err = interactive_setup(
        tmp_path, b"cpu\nn\n", "--torch", "2.9", machine="mixed_gtx1060_rtx5060ti"
    )
    assert code == 1, err
    assert "Plan: torch 2.9.1 + cpu (your choice)" in err and "torch==2.9.1+cpu" in err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("machine", "args", "unused"),
    [
        ("gtx1060", ("--variant", "cpu"), "GPU 0 NVIDIA GeForce GTX 1060 6GB"),
        # the newest torch has no build for Blackwell on a 575 driver: the plan is no-build (CPU)
        ("blackwell_driver575", ("--torch", NEWEST), "GPU 0 NVIDIA GeForce RTX 5090"),
    ],
)
def test_a_cpu_plan_on_a_gpu_machine_verifies_without_cuda(
    run_fdl, tmp_path, server, venv, machine, args, unused
):
    serve_index(server, "cpu", [build_wheel(NEWEST, "cpu")])
    env = {**pip_isolated(tmp_path, server), "PATH": str(make_bin(tmp_path, machine))}
    # --force: the shared venv may hold an earlier test's broken build of the same version
    result = setup_into(run_fdl, venv, env, tmp_path, "--force", *args)
    assert result.returncode == 0, result.stderr
    assert installed_torch(venv) == f"{NEWEST}+cpu"
    err = result.stderr
    assert f"cpu build: CUDA is not expected ({unused} unused)" in err
    assert "is_available() is False" not in err and "Done." in err


CU132_ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
MIXED_GPUS = [
    {"name": "NVIDIA GeForce GTX 1060 6GB", "cc": [6, 1]},
    {"name": "NVIDIA GeForce RTX 5060 Ti", "cc": [12, 0]},
]


@pytest.mark.slow
def test_a_compromise_is_verified_only_on_the_gpus_it_supports(run_fdl, tmp_path, server, venv):
    wheel = build_wheel(NEWEST, "cu132", gpus=MIXED_GPUS, archs=CU132_ARCHS)
    serve_index(server, "cu132", [wheel])
    env = {
        **pip_isolated(tmp_path, server),
        "PATH": str(make_bin(tmp_path, "mixed_gtx1060_rtx5060ti")),
    }
    result = setup_into(run_fdl, venv, env, tmp_path)
    err = result.stderr
    assert result.returncode == 0, err
    # the same release as the CPU build installed before: the +cu132 pin makes pip switch builds
    assert f"torch=={NEWEST}+cu132 --index-url" in err
    assert installed_torch(venv) == f"{NEWEST}+cu132"
    assert "GPU 0 NVIDIA GeForce GTX 1060 6GB excluded from the check: cu132 has no kernels" in err
    # nvidia-smi's index 1 is CUDA's 1 only in PCI bus order (CUDA's default: fastest first,
    # where the stand-in, like real CUDA, puts the RTX 5060 Ti at 0 and the GTX 1060 at 1)
    assert "with CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES='1', as the plan says" in err
    # the RTX 5060 Ti is reported by its machine-wide index, and its kernel really ran
    assert "GPU 1 NVIDIA GeForce RTX 5060 Ti (sm_120): archs sass, kernel ok" in err
    assert "GTX 1060 6GB (sm_61): archs" not in err  # never touched
    assert "Remember: CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1" in err
    # without the plan's device mask the same install fails on the GTX 1060: the check is real
    from fdl.torch_setup import verify_torch

    whole = verify_torch(str(venv), expected_gpus=2)
    assert not whole.ok and "no kernel image is available" in "; ".join(whole.problems)


@pytest.mark.parametrize(
    ("machine", "tag", "expected", "visible", "note"),
    [
        ("rtx5060ti", None, 1, None, None),
        ("gtx1060", "cpu", 0, None, "cpu build: CUDA is not expected (GPU 0 NVIDIA"),
        ("mixed_gtx1060_rtx5060ti", None, 1, "1", "GPU 0 NVIDIA GeForce GTX 1060 6GB excluded"),
        ("mixed_gtx1060_rtx5060ti", "cu126", 1, "0", "GPU 1 NVIDIA GeForce RTX 5060 Ti excluded"),
        ("gtx1060", "cu130", 0, "", "the driver is too old for CUDA 13"),
        (None, None, 0, None, "cpu build: CUDA is not expected"),
    ],
)
def test_verification_scope_follows_the_plan(gpu_machine, machine, tag, expected, visible, note):
    from fdl.torch_setup import scope_for
    from fdl.variants import resolve
    from tests.variants.test_resolver import target_for

    gpu_machine(machine)
    target = target_for(machine)
    scope = scope_for(resolve(target, tag=tag), target.gpus)
    assert (scope.expected_gpus, scope.visible_devices) == (expected, visible)
    if note is None:
        assert scope.notes == ()
    else:
        assert any(note in n for n in scope.notes), scope.notes
