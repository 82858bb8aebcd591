"""`fdl hf export|verify-export` called in process: options and errors, each one clear line."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

import flodl.hf as fh
from fdl.commands import hf as cli
from fdl.errors import ExitCode, FdlError, FdlUsageError
from flodl.hf import parity


def _export(source, out, **options):
    defaults = {"head": "auto", "force": False, "init_head": False, "num_labels": None,
                "labels": None}  # fmt: skip
    cli.export(str(source), out, **{**defaults, **options})


def test_verify_export_of_a_model_with_few_positions(tmp_path, capsys):
    t = parity.transformers_module()
    for family in ("bert", "roberta"):
        cfg = parity.tiny_config(family, "seqcls")
        cfg.max_position_embeddings = 8
        t.AutoModelForSequenceClassification.from_config(cfg).save_pretrained(tmp_path / family)
        cli.verify_export(tmp_path / family, tolerance=1e-5)
        assert "max abs diff 0.000e+00" in capsys.readouterr().out


@pytest.mark.parametrize("tolerance", [-1.0, float("nan"), float("inf")])
def test_verify_export_refuses_a_bad_tolerance(tolerance, tmp_path):
    with pytest.raises(FdlUsageError, match="--tolerance"):
        cli.verify_export(tmp_path, tolerance=tolerance)


@pytest.mark.parametrize("content", [b"", b'\x10\x00\x00\x00\x00\x00\x00\x00{"a":', None])
def test_an_unreadable_safetensors_file_is_named(content, tmp_path):
    parity.make_reference("bert", "seqcls", tmp_path)
    weights = tmp_path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] if content is None else content)
    with pytest.raises(fh.WeightsError, match=r"model\.safetensors: not a readable safetensors"):
        fh.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    with pytest.raises(FdlError, match="not a readable safetensors file") as err:
        cli.verify_export(tmp_path, tolerance=1e-5)
    assert str(weights) in str(err.value)
    with pytest.raises(FdlError, match="not a readable safetensors file"):
        _export(tmp_path, tmp_path / "out")


def test_verify_export_of_a_directory_without_weights(tmp_path):
    parity.make_reference("bert", "seqcls", tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FdlError, match=r"has no model\.safetensors") as err:
        cli.verify_export(tmp_path, tolerance=1e-5)
    assert err.value.code == ExitCode.UNAVAILABLE


def test_export_a_base_checkpoint_with_a_new_head(tmp_path):
    parity.make_reference("bert", "base", tmp_path / "src")
    with pytest.raises(FdlError, match="--init-head"):
        _export(tmp_path / "src", tmp_path / "out", head="seqcls")
    _export(tmp_path / "src", tmp_path / "out", head="seqcls", init_head=True, labels="neg,pos")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["id2label"] == {"0": "neg", "1": "pos"}
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path / "out")
    assert model(torch.tensor([[2, 7, 3]])).shape == (1, 2)
    _export(tmp_path / "src", tmp_path / "three", head="tokcls", init_head=True, num_labels=3)
    assert fh.AutoModelForTokenClassification.from_pretrained(tmp_path / "three").id2label == {
        0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"
    }  # fmt: skip
    with pytest.raises(FdlUsageError, match="empty name"):
        _export(tmp_path / "src", tmp_path / "bad", head="seqcls", init_head=True, labels="a,")


def test_verify_export_json(tmp_path, capsys):
    parity.make_reference("distilbert", "tokcls", tmp_path)
    cli.verify_export(tmp_path, tolerance=1e-5, as_json=True)
    document = json.loads(capsys.readouterr().out)  # stdout: the one document
    assert document == {
        "directory": str(tmp_path),
        "class": "DistilBertForTokenClassification",
        "missing": [],
        "unexpected": [],
        "max_abs_diff": 0.0,
        "tolerance": 1e-5,
        "ok": True,
    }
    weights = load_file(tmp_path / "model.safetensors")
    weights["extra.weight"] = torch.zeros(2)
    save_file(weights, tmp_path / "model.safetensors")
    with pytest.raises(FdlError, match="does not round-trip"):
        cli.verify_export(tmp_path, tolerance=1e-5, as_json=True)
    document = json.loads(capsys.readouterr().out)
    assert document["unexpected"] == ["extra.weight"] and document["ok"] is False


def test_parity_json(capsys):
    cli.parity(family="distilbert", head="seqcls,qa", as_json=True)
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is True and document["tolerance"] == parity.TOLERANCE
    assert [(c["family"], c["head"]) for c in document["cells"]] == [
        ("distilbert", "seqcls"), ("distilbert", "qa")
    ]  # fmt: skip
    cell = document["cells"][0]
    assert set(cell) == {"family", "head", "load_diff", "export_diff", "reference_diff",
                         "missing", "unexpected", "error", "ok"}  # fmt: skip
    assert cell["ok"] is True and cell["load_diff"] < parity.TOLERANCE and cell["error"] == ""
