"""The templates ship inside the wheel: an installed `fdl init` renders the whole project."""

from __future__ import annotations

import pytest

from fdl.scaffold.bundle import wheel_name
from tests.cli.test_wheel import installed_wheel, run_in  # noqa: F401  (the fixture)
from tests.scaffold.test_render import COMMON, DOCKER

pytestmark = pytest.mark.slow


def test_installed_fdl_init_renders_every_template(installed_wheel):  # noqa: F811
    fdl = str(installed_wheel / "bin" / "fdl")
    result = run_in(installed_wheel, fdl, "init", "my-model", "--docker")
    assert result.returncode == 0, result.stderr
    root = installed_wheel / "my-model"
    written = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    # installed from a wheel file (no package index): that flodl is bundled with the project
    bundled = {f".fdl/wheels/{wheel_name()}"}
    assert written == COMMON | DOCKER | {".fdl/project.toml"} | bundled
