"""Hub ids resolve through a locally populated HF cache (HF_HOME, HF_HUB_OFFLINE); no network."""

from __future__ import annotations

import shutil

import pytest
import torch

import flodl.hf as fh
from flodl.hf import parity

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def populate_cache(hf_home, repo_id, source, commit=COMMIT):
    """Lay out ``source``'s files as huggingface_hub stores a downloaded snapshot."""
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for f in source.iterdir():
        shutil.copy(f, snapshot / f.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot


@pytest.fixture
def offline_home(tmp_path, monkeypatch):
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


def test_hub_id_from_the_cache(offline_home, tmp_path):
    parity.make_reference("distilbert", "qa", tmp_path / "src")
    populate_cache(offline_home, "tiny-org/tiny-distilbert-qa", tmp_path / "src")
    model = fh.AutoModelForQuestionAnswering.from_pretrained("tiny-org/tiny-distilbert-qa")
    local = fh.AutoModelForQuestionAnswering.from_pretrained(tmp_path / "src")
    ids = parity.sample_inputs()["input_ids"]
    assert isinstance(model, fh.DistilBertForQuestionAnswering)
    assert all(torch.equal(a, b) for a, b in zip(model(ids), local(ids), strict=True))
    assert model.load_report.source == "tiny-org/tiny-distilbert-qa"
    pinned = fh.AutoModelForQuestionAnswering.from_pretrained(
        "tiny-org/tiny-distilbert-qa", revision=COMMIT
    )
    assert torch.equal(pinned(ids)[0], model(ids)[0])


def test_offline_and_not_cached_names_the_id_and_the_cache(offline_home):
    with pytest.raises(fh.HfHubError) as err:
        fh.AutoModel.from_pretrained("nobody/not-cached")
    message = str(err.value)
    assert "'nobody/not-cached'" in message
    assert str(offline_home / "hub") in message and "HF_HUB_OFFLINE" in message


def test_a_path_that_is_not_a_directory(tmp_path):
    with pytest.raises(fh.HfHubError, match="not a model directory"):
        fh.AutoModel.from_pretrained(tmp_path / "missing" / "dir")


def test_sharded_hub_checkpoint_from_the_cache(offline_home, tmp_path):
    reference = parity.make_reference("albert", "seqcls", tmp_path / "one")
    reference.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    populate_cache(offline_home, "tiny-org/sharded-albert", tmp_path / "sharded")
    model = fh.AutoModelForSequenceClassification.from_pretrained("tiny-org/sharded-albert")
    ids = parity.sample_inputs()["input_ids"]
    whole = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path / "one")
    assert torch.equal(model(ids), whole(ids))


def test_a_hub_ids_tokenizer_config_is_carried_to_the_export(offline_home, tmp_path):
    parity.make_reference("bert", "seqcls", tmp_path / "src")
    (tmp_path / "src" / "tokenizer_config.json").write_text('{"model_max_length": 16}')
    populate_cache(offline_home, "tiny-org/with-tokenizer-config", tmp_path / "src")
    model = fh.AutoModelForSequenceClassification.from_pretrained("tiny-org/with-tokenizer-config")
    out = model.save_pretrained(tmp_path / "out")
    assert (out / "tokenizer_config.json").read_text() == '{"model_max_length": 16}'
