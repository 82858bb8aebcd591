"""``fdl install --json`` keeps stdout one JSON document, even when it goes on to run pip (whose
output is progress, on stderr). Here flodl's recorded origin is a folder of wheels holding a
newer one that is not a valid wheel, so pip runs for real and changes nothing."""

from __future__ import annotations

import json
import os

from tests.conftest import REPO_ROOT


def fake_flodl_origin(tmp_path):
    """A PYTHONPATH entry whose flodl distribution was installed from a wheel folder holding a
    newer (broken) flodl wheel."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "flodl-0.0.1-py3-none-any.whl").write_bytes(b"")
    (wheels / "flodl-99.0.0-py3-none-any.whl").write_bytes(b"not a zip")
    site = tmp_path / "site"
    info = site / "flodl-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flodl\nVersion: 0.0.1\n")
    record = {"url": f"file://{wheels}/flodl-0.0.1-py3-none-any.whl", "archive_info": {}}
    (info / "direct_url.json").write_text(json.dumps(record))
    return site


def test_json_stays_one_document_while_pip_runs(run_fdl, tmp_path):
    site = fake_flodl_origin(tmp_path)
    env = {
        "FLODL_HOME": str(tmp_path / "home"),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(site)]),
        "PIP_NO_INDEX": "1",
        "PIP_CONFIG_FILE": os.devnull,
    }
    result = run_fdl("install", "--json", env=env, cwd=tmp_path)
    data = json.loads(result.stdout)  # nothing of pip's after the JSON
    assert data["origin"] == "wheel" and data["latest"] == "99.0.0" and data["newer"]
    assert result.returncode == 1 and "the update failed (pip exited with" in result.stderr
    assert "flodl-99.0.0-py3-none-any.whl" in result.stderr  # pip's output, on stderr

    dry = run_fdl("install", "--json", "--dry-run", env=env, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["upgrade"][-1].endswith("flodl-99.0.0-py3-none-any.whl")
    assert "-m pip install" in dry.stderr
