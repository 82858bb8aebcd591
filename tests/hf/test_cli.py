"""`fdl hf export|verify-export|convert|parity`, `fdl add hf`, `fdl init --with-hf`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

import flodl.hf as fh
from flodl.hf import parity

from .helpers import tiny_bert
from .test_hub import populate_cache

pytestmark = pytest.mark.slow  # each test starts `fdl` (torch, transformers) in a subprocess


def test_export_then_verify(run_fdl, tmp_path):
    tiny_bert(tmp_path / "src", "tokcls")
    out = tmp_path / "out"
    result = run_fdl("hf", "export", str(tmp_path / "src"), str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(out)
    assert {p.name for p in out.iterdir()} == {"model.safetensors", "config.json", "tokenizer.json"}
    verified = run_fdl("hf", "verify-export", str(out))
    assert verified.returncode == 0, verified.stderr
    assert "missing      0" in verified.stdout and "unexpected   0" in verified.stdout
    assert "BertForTokenClassification" in verified.stdout
    as_json = run_fdl("hf", "verify-export", str(out), "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["ok"] is True  # stdout: the document and nothing else
    again = run_fdl("hf", "export", str(tmp_path / "src"), str(out))
    assert again.returncode == 1 and "error: " in again.stderr and "--force" in again.stderr
    assert run_fdl("hf", "export", str(tmp_path / "src"), str(out), "--force").returncode == 0
    bad_head = run_fdl("hf", "export", str(tmp_path / "src"), str(out), "--head", "nope")
    assert bad_head.returncode == 2


def test_export_as_another_head(run_fdl, tmp_path):
    tiny_bert(tmp_path / "src", "mlm")
    result = run_fdl("hf", "export", str(tmp_path / "src"), str(tmp_path / "out"), "--head", "base")
    assert result.returncode == 0, result.stderr
    assert isinstance(fh.AutoModel.from_pretrained(tmp_path / "out"), fh.BertModel)
    assert run_fdl("hf", "verify-export", str(tmp_path / "out")).returncode == 0


def test_verify_export_fails_on_a_broken_export(run_fdl, tmp_path):
    parity.make_reference("albert", "qa", tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["qa_outputs.bias"] = (
        weights["qa_outputs.bias"] + 1.0
    )  # config and keys fine, values off
    save_file(weights, tmp_path / "model.safetensors")
    ok = run_fdl("hf", "verify-export", str(tmp_path))
    assert ok.returncode == 0  # flodl and transformers read the same (changed) weights alike
    weights["extra.weight"] = torch.zeros(2)
    save_file(weights, tmp_path / "model.safetensors")
    result = run_fdl("hf", "verify-export", str(tmp_path))
    assert result.returncode == 1 and "does not round-trip" in result.stderr
    assert "unexpected   1: extra.weight" in result.stdout


def test_convert_a_bin_checkpoint(run_fdl, tmp_path):
    parity.make_reference("roberta", "seqcls", tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    torch.save(state, tmp_path / "pytorch_model.bin")
    (tmp_path / "model.safetensors").unlink()
    result = run_fdl("hf", "convert", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path / "model.safetensors")
    converted = load_file(tmp_path / "model.safetensors")
    assert converted.keys() == state.keys()
    assert all(torch.equal(converted[k], state[k]) for k in state)
    fh.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    again = run_fdl("hf", "convert", str(tmp_path))
    assert again.returncode == 1 and "already exists" in again.stderr


def test_convert_refuses_a_pickle_that_is_not_plain_tensors(run_fdl, tmp_path):
    parity.make_reference("bert", "base", tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save({"w": torch.ones(2), "obj": subprocess.CompletedProcess([], 0)},
               tmp_path / "pytorch_model.bin")  # fmt: skip
    result = run_fdl("hf", "convert", str(tmp_path))
    assert result.returncode == 1 and "weights_only=True" in result.stderr
    assert not (tmp_path / "model.safetensors").exists()


def test_convert_a_cached_hub_id(run_fdl, tmp_path):
    parity.make_reference("bert", "base", tmp_path / "src")
    state = load_file(tmp_path / "src" / "model.safetensors")
    torch.save(state, tmp_path / "src" / "pytorch_model.bin")
    (tmp_path / "src" / "model.safetensors").unlink()
    home = tmp_path / "hf-home"
    snapshot = populate_cache(home, "old-org/old-bert", tmp_path / "src")
    env = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    result = run_fdl("hf", "convert", "old-org/old-bert", env=env)
    assert result.returncode == 0, result.stderr
    assert (snapshot / "model.safetensors").is_file()
    missing = run_fdl("hf", "convert", "old-org/not-here", env=env)
    assert missing.returncode == 3 and "old-org/not-here" in missing.stderr


def test_parity_command(run_fdl):
    result = run_fdl("hf", "parity", "--family", "distilbert,deberta-v2", "--head", "seqcls,qa")
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.endswith("PASS")]
    assert len(rows) == 4
    assert "all 4 cells within 1e-05" in result.stderr
    bad = run_fdl("hf", "parity", "--family", "gpt2")
    assert bad.returncode == 2 and "unknown family 'gpt2'" in bad.stderr
    empty = run_fdl("hf", "parity", "--family", "", "--head", "seqcls")
    assert empty.returncode == 2 and "unknown family ''" in empty.stderr
    as_json = run_fdl("hf", "parity", "--family", "bert", "--head", "base", "--json")
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    assert document["ok"] and [c["head"] for c in document["cells"]] == ["base"]


def test_add_hf_to_a_project(run_fdl, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "demo"\nversion = "0.1"\ndependencies = ["numpy", "flodl>=0.1"]\n'
    )
    (tmp_path / "src").mkdir()
    result = run_fdl("add", "hf", cwd=tmp_path / "src")
    assert result.returncode == 0, result.stderr
    assert 'dependencies = ["numpy", "flodl[hf]>=0.1"]' in (tmp_path / "pyproject.toml").read_text()
    assert (tmp_path / "examples" / "hf_classify.py").is_file()
    assert "created  examples/hf_classify.py" in result.stderr
    again = run_fdl("add", "hf", cwd=tmp_path)
    assert again.returncode == 0 and "already in this project" in again.stderr
    assert run_fdl("add", "nope", cwd=tmp_path).returncode == 2
    assert run_fdl("add", "hf", "--path", str(tmp_path.parent)).returncode == 3


def test_add_hf_without_a_flodl_dependency(run_fdl, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = []\n')
    assert run_fdl("add", "hf", cwd=tmp_path).returncode == 0
    assert 'dependencies = ["flodl[hf]"]' in (tmp_path / "pyproject.toml").read_text()


def test_init_with_hf_and_the_example_runs(run_fdl, tmp_path):
    result = run_fdl("init", "withhf", "--native", "--with-hf", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    project = tmp_path / "withhf"
    assert '"flodl[hf]' in (project / "pyproject.toml").read_text()
    tiny_bert(tmp_path / "model", "seqcls", labels=["neg", "pos"])
    from tests.conftest import clean_env

    ran = subprocess.run(
        [sys.executable, str(project / "examples" / "hf_classify.py"), str(tmp_path / "model"),
         "good film", "--top-k", "2"],
        capture_output=True, text=True, env=clean_env(), timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "'good film': " in ran.stdout and "neg" in ran.stdout and "pos" in ran.stdout
    assert run_fdl("init", "--update", "--with-hf", cwd=project).returncode == 2
