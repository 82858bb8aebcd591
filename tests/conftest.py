"""Shared fixtures: run ``fdl`` as a user would, from this checkout, in a clean environment."""

from __future__ import annotations

import getpass
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# onnxruntime (the ONNX tests' reference; torch 2.4 also imports it when an optimizer is
# built) writes a device id under ~/.cache and a session file in the temp directory at import,
# for its usage telemetry, unless this is set. Set here, so every child process inherits it.
os.environ["ORT_DISABLE_TELEMETRY"] = "1"

# Fake GPU machines, fdl's CLI environment and a loopback HTTP server, shared by several test
# directories (hardware, variants, downloads, libtorch_home, torch_setup).
pytest_plugins = ["tests.fixtures.machines"]

# Variables that change how fdl prints or behaves; tests start from none of them.
_ENV_NOISE = ("NO_COLOR", "FORCE_COLOR", "FDL_ENV", "FLODL_VERBOSITY", "TERM", "COLUMNS", "CI")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``make test`` runs the suite on several workers (pytest-xdist, ``--dist loadgroup``). The
    tests of a real Docker engine share one engine and the image names they build and remove,
    so they run on one worker, one after another."""
    for item in items:
        if item.get_closest_marker("docker"):
            item.add_marker(pytest.mark.xdist_group("docker"))


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment minus fdl-relevant noise, with this checkout first on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in _ENV_NOISE}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "100"
    env.update(extra)
    return env


def require(component: str, problem: str | None) -> None:
    """Skip when a real component the test needs is missing (``problem`` says why) — or fail, when
    ``FDL_REQUIRE`` names it (``FDL_REQUIRE=all`` in CI), so a broken install cannot pass as a skip.

    Components: docker, graphviz, browser, nvml, tensorboard.
    """
    if problem is None:
        return
    wanted = {w.strip() for w in os.environ.get("FDL_REQUIRE", "").split(",") if w.strip()}
    if "all" in wanted or component in wanted:
        pytest.fail(f"FDL_REQUIRE names {component!r} but it is unavailable: {problem}")
    pytest.skip(f"{component}: {problem} (CI runs this)")


@pytest.fixture(scope="session", autouse=True)
def private_flodl_home(tmp_path_factory):
    """The suite never reads or writes the user's ~/.flodl: the whole session, subprocesses included,
    gets its own FLODL_HOME (tests that need a fresh one set their own)."""
    saved = os.environ.get("FLODL_HOME")
    os.environ["FLODL_HOME"] = str(tmp_path_factory.mktemp("flodl-home"))
    yield
    if saved is None:
        os.environ.pop("FLODL_HOME", None)
    else:
        os.environ["FLODL_HOME"] = saved


@pytest.fixture(scope="session", autouse=True)
def interruptible_children():
    """A suite started with SIGINT ignored (a background job of a shell without job control)
    would start every process with it ignored, and the Ctrl-C tests would time out. The session
    handles SIGINT as Python does by default instead: a handled signal is back to its default
    action in a child after exec, so the processes the tests start take Ctrl-C as in a terminal."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def private_tmpdir(tmp_path_factory):
    """Temp files of the whole session (this process's, subprocesses', torchrun agents', docstring
    examples') go under pytest's base temp, which pytest prunes to the last 3 runs, instead of
    piling up in the machine's /tmp. torch's compile cache keeps its usual home: it is meant to
    outlive a run."""
    saved = {k: os.environ.get(k) for k in ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR")}
    machine_tmp = tempfile.gettempdir()
    cache = os.path.join(machine_tmp, f"torchinductor_{getpass.getuser()}")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", cache)
    os.environ["TMPDIR"] = tempfile.tempdir = str(tmp_path_factory.mktemp("tmp"))
    yield
    tempfile.tempdir = None
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def run_fdl() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m fdl ARGS`` in a subprocess; returns the completed process (text mode)."""

    def run(
        *args: str,
        env: dict[str, str] | None = None,
        cwd: Path | str | None = None,
        input: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fdl", *args],
            capture_output=True,
            text=True,
            env=clean_env(**(env or {})),
            cwd=cwd,
            input=input,
            timeout=timeout,
            check=False,
        )

    return run
