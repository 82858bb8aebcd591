"""Generated projects are real: their own tests pass and `fdl train` trains and checkpoints."""

from __future__ import annotations

import pytest

from tests.scaffold.generated import saved_epoch, shell

pytestmark = pytest.mark.slow


def test_native_project_trains_resumes_and_passes_its_tests(tmp_path):
    result = shell(
        "fdl init demo --native\n"
        "cd demo\n"
        "fdl train -- --epochs 1\n"
        "fdl train -- --epochs 2 --resume\n"
        "fdl test -- -p no:cacheprovider\n"
        "fdl --env ci test\n",
        tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    root = tmp_path / "demo"
    assert saved_epoch(root / "checkpoints") == 1
    assert "resumed from checkpoints" in result.stdout


def test_docker_project_commands_run_as_they_would_in_the_container(tmp_path):
    # FDL_CONTAINER=dev is what the compose service sets: fdl runs the commands directly, as it
    # does inside the container (building the images needs a registry, which tests lack).
    result = shell(
        "fdl init demo --docker\n"
        "cd demo\n"
        "FDL_CONTAINER=dev fdl train -- --epochs 1\n"
        "FDL_CONTAINER=dev fdl test -- -p no:cacheprovider\n",
        tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert saved_epoch(tmp_path / "demo" / "checkpoints") == 0


@pytest.mark.parametrize("options", ["--native", "--docker --with-hf"])
def test_a_new_project_passes_its_own_lint_and_a_type_checker(tmp_path, options):
    # Its fdl.yml.example's lint task is `ruff check .`, with the ruff settings its
    # pyproject.toml carries: a user's first run of it must not fail on the templates' code
    # (flodl is a third-party import there, sorted with torch). A user who adds mypy finds the
    # templates type-correct against flodl's own types (Optional fields handled).
    result = shell(
        f"fdl init demo {options} </dev/null\ncd demo\nruff check .\nruff format --check .\n"
        "python -m mypy --no-incremental src tests\n",
        tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
