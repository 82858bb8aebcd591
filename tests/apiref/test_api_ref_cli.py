"""`fdl api-ref` as a user runs it: formats, the cache, llms.txt, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from fdl.apiref import cache
from fdl.apiref.llms import validate_llms_txt
from tests.conftest import clean_env

MINI = Path(__file__).resolve().parent / "fixtures" / "mini"
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "fdl/apiref/schema.json").read_text())


@pytest.fixture
def home(tmp_path) -> dict[str, str]:
    return {"FLODL_HOME": str(tmp_path / "home")}


def test_text_layout(run_fdl, home):
    result = run_fdl("api-ref", "--path", str(MINI), env=home)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "flodl API Reference v9.8.7"
    assert lines[1] == "=" * 40
    assert "## Graph" in lines and "## Modules (nn)" in lines
    block = result.stdout.split("### fl.FlowBuilder\n", 1)[1].split("\n\n", 1)[0]
    assert "  builder:\n    .through(module: nn.Module) -> Self" in block
    assert "  file: flodl/graph/builder.py:33" in block
    assert result.stdout.index("## Graph") < result.stdout.index("## Checkpoints")


def test_json_is_one_valid_document(run_fdl, home):
    result = run_fdl("api-ref", "--json", "--path", str(MINI), env=home)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    jsonschema.validate(document, SCHEMA)
    assert document["version"] == "9.8.7"
    assert {t["path"] for t in document["types"]} >= {"flodl.FlowBuilder", "flodl.nn.StateAdd"}


def test_the_real_packages_json_matches_the_schema(run_fdl, home):
    # the flodl of this checkout (PYTHONPATH puts it first), not the miniature
    result = run_fdl("api-ref", "--json", env=home)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    jsonschema.validate(document, SCHEMA)
    assert document["package"] == "flodl"
    paths = {t["path"] for t in document["types"]}
    assert {
        "flodl.FlowBuilder",
        "flodl.Trainer",
        "flodl.Monitor",
        "flodl.optim.param_groups",
    } <= paths
    assert set(document["categories"]) >= {"graph", "nn", "optim", "checkpoint", "monitor", "train"}


def test_markdown(run_fdl, home):
    result = run_fdl("api-ref", "--markdown", "--path", str(MINI), env=home)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# flodl API reference (v9.8.7)")
    assert (
        "### fl.FlowBuilder\n\n```python\nclass FlowBuilder(entry: nn.Module | None = None)\n```"
        in result.stdout
    )


def test_llms_writes_valid_index_and_full_text(run_fdl, home, tmp_path):
    out = tmp_path / "site"
    result = run_fdl("api-ref", "--llms", str(out), "--path", str(MINI), env=home)
    assert result.returncode == 0, result.stderr
    index = (out / "llms.txt").read_text()
    assert validate_llms_txt(index) == []
    assert "- [fl.FlowBuilder](llms-full.txt#flflowbuilder): Describe a network" in index
    full = (out / "llms-full.txt").read_text()
    assert "### fl.FlowBuilder" in full
    assert (out / "porting-guide.md").read_text().startswith("# Porting PyTorch to flodl")
    assert result.stdout == ""  # files, not stdout


def test_formats_are_exclusive(run_fdl, home):
    result = run_fdl("api-ref", "--json", "--markdown", env=home)
    assert result.returncode == 2
    assert "error: --json, --markdown and --llms are alternatives" in result.stderr


def test_missing_path_is_a_clear_error(run_fdl, home, tmp_path):
    result = run_fdl("api-ref", "--path", str(tmp_path / "nope"), env=home)
    assert result.returncode == 1
    assert "no such directory" in result.stderr and result.stdout == ""


def test_path_that_is_a_file_is_a_clear_error(run_fdl, home, tmp_path):
    (tmp_path / "afile").write_text("")
    result = run_fdl("api-ref", "--path", str(tmp_path / "afile"), env=home)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"error: --path {tmp_path / 'afile'}: not a directory — pass the flodl" in result.stderr


def test_llms_into_an_existing_file_is_a_usage_error_and_the_file_is_kept(run_fdl, home, tmp_path):
    target = tmp_path / "llms.txt"
    target.write_text("mine\n")
    result = run_fdl("api-ref", "--llms", str(target), "--path", str(MINI), env=home)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert result.stderr.startswith(f"error: --llms {target}: not a directory — pass the directory")
    assert target.read_text() == "mine\n"


def test_llms_under_a_file_is_an_error_not_a_traceback(run_fdl, home, tmp_path):
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "site"
    result = run_fdl("api-ref", "--llms", str(out), "--path", str(MINI), env=home)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: cannot write ") and "— check that" in result.stderr


def test_llms_into_an_unwritable_directory_is_an_error(monkeypatch, tmp_path, capsys):
    # Simulated: the suite may run as root, for whom no directory is unwritable.
    from fdl.apiref import atomic
    from fdl.main import main

    def refuse(*args, dir=None, **kwargs):
        raise PermissionError(13, "Permission denied", str(dir))

    monkeypatch.setattr(atomic.tempfile, "mkstemp", refuse)
    out = tmp_path / "site"
    code = main(["api-ref", "--llms", str(out), "--path", str(MINI)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"error: cannot write {out}: Permission denied — check that {out} is a directory" in err
    assert list(out.iterdir()) == []  # nothing half-written


def _cached_files(home: dict[str, str]) -> list[Path]:
    return sorted((Path(home["FLODL_HOME"]) / "api-ref-cache").glob("flodl-*.json"))


def test_cache_is_keyed_by_content_and_used(run_fdl, home, tmp_path):
    import shutil

    src = tmp_path / "src"
    shutil.copytree(MINI, src)
    first = run_fdl("api-ref", "--json", "--path", str(src), env=home)
    [cached] = _cached_files(home)
    assert "9.8.7" in cached.name
    # A hit is served from the cache file: prove it by marking the cached document.
    document = json.loads(cached.read_text())
    document["types"][0]["doc"] = "FROM THE CACHE"
    cached.write_text(json.dumps(document))
    second = run_fdl("api-ref", "--json", "--path", str(src), env=home)
    assert "FROM THE CACHE" in second.stdout
    # --no-cache ignores it; a changed source file is a new key.
    assert (
        "FROM THE CACHE"
        not in run_fdl("api-ref", "--json", "--no-cache", "--path", str(src), env=home).stdout
    )
    (src / "flodl" / "nn" / "modules.py").write_text("class StateAdd:\n    '''Changed.'''\n")
    third = run_fdl("api-ref", "--json", "--path", str(src), env=home)
    assert "FROM THE CACHE" not in third.stdout and "Changed." in third.stdout
    assert len(_cached_files(home)) == 2
    assert json.loads(first.stdout)["source_hash"] != json.loads(third.stdout)["source_hash"]


def test_a_changed_extractor_never_serves_a_stale_reference(monkeypatch, tmp_path):
    import shutil

    from fdl.apiref import load_reference

    monkeypatch.setenv("FLODL_HOME", str(tmp_path / "home"))
    extractor = tmp_path / "apiref"  # a copy of fdl/apiref standing in for the installed fdl
    shutil.copytree(cache.EXTRACTOR_DIR, extractor, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "EXTRACTOR_DIR", extractor)
    load_reference(MINI)
    [cached] = _cached_files({"FLODL_HOME": str(tmp_path / "home")})
    document = json.loads(cached.read_text())
    document["types"][0]["doc"] = "MADE BY THE OLD EXTRACTOR"
    cached.write_text(json.dumps(document))
    assert load_reference(MINI).entries[0].doc == "MADE BY THE OLD EXTRACTOR"  # same fdl: a hit
    # the same flodl source, a new extractor (an fdl upgrade, or an edit in a checkout): a miss
    extract_py = extractor / "extract.py"
    extract_py.write_text(extract_py.read_text() + "\n# a changed extractor\n")
    cache.extractor_fingerprint.cache_clear()
    fresh = load_reference(MINI)
    assert fresh.entries[0].doc != "MADE BY THE OLD EXTRACTOR"
    assert len(_cached_files({"FLODL_HOME": str(tmp_path / "home")})) == 2


def test_the_cache_key_names_the_extractor():
    key = cache.cache_path("flodl", "1.0", "ab" * 32)
    assert key.name.startswith("flodl-1.0-s1-" + "ab" * 12 + "-x")
    assert key.name.endswith(cache.extractor_fingerprint(cache.EXTRACTOR_DIR)[:12] + ".json")


def test_a_corrupt_cache_file_is_replaced_not_trusted(run_fdl, home):
    run_fdl("api-ref", "--path", str(MINI), env=home)
    [cached] = _cached_files(home)
    cached.write_text('{"schema": "flodl-api-ref/1", "types": [')
    result = run_fdl("api-ref", "--json", "--path", str(MINI), env=home)
    assert result.returncode == 0
    json.loads(result.stdout)
    json.loads(cached.read_text())  # rewritten whole


def test_the_cache_is_pruned(monkeypatch, tmp_path):
    monkeypatch.setenv("FLODL_HOME", str(tmp_path))
    directory = cache.cache_dir()
    directory.mkdir(parents=True)
    for i in range(cache.KEEP + 3):
        (directory / f"flodl-0.{i}-s1-x.json").write_text("{}")
    cache._prune(directory, "flodl")
    assert len(list(directory.glob("flodl-*.json"))) == cache.KEEP


def test_extraction_imports_neither_torch_nor_flodl():
    probe = (
        "import sys; from fdl.apiref import load_reference; load_reference(use_cache=False); "
        "print(sorted({'torch', 'flodl', 'numpy'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=clean_env(), check=True
    )
    assert result.stdout.strip() == "[]"
