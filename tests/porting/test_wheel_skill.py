"""From an installed wheel: the skill comes from the bundled files, api-ref and check work."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_wheel import installed_wheel, run_in  # noqa: F401  (a module fixture)

pytestmark = pytest.mark.slow


def test_skill_install_api_ref_and_check_from_the_wheel(installed_wheel, tmp_path):  # noqa: F811
    fdl = str(installed_wheel / "bin" / "fdl")
    result = run_in(
        installed_wheel, fdl, "skill", "install", "--tool", "claude", "--dir", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    skill = (tmp_path / ".claude/skills/port/SKILL.md").read_text()
    assert "`.claude/skills/port/guide.md`" in skill
    assert (tmp_path / ".claude/skills/port/guide.md").read_text().startswith("# Porting PyTorch")

    reference = run_in(installed_wheel, fdl, "api-ref", "--json", "--no-cache")
    assert reference.returncode == 0, reference.stderr
    document = json.loads(reference.stdout)
    assert document["package"] == "flodl"
    assert any(t["path"] == "flodl.FlodlError" for t in document["types"])

    port = tmp_path / "port.py"
    port.write_text("import flodl as fl\nprint(fl.FlodlError.__name__)\n")
    checked = run_in(installed_wheel, fdl, "check", str(port))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "smoke run (FLODL_SMOKE=1): ran to the end" in checked.stdout
