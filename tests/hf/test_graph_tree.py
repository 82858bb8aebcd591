"""A loaded model is a graph tree: label paths, freezing, per-path LRs, subgraph checkpoints."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F

import flodl as fl
import flodl.hf as fh
from flodl.hf import parity


@pytest.fixture
def bert(tmp_path):
    parity.make_reference("bert", "seqcls", tmp_path / "bert")
    return fh.AutoModelForSequenceClassification.from_pretrained(tmp_path / "bert")


def _batch():
    inputs = parity.sample_inputs()
    return inputs, torch.tensor([0, 2])


@pytest.mark.parametrize("family", sorted(fh.FAMILIES))
def test_documented_label_paths(family, tmp_path):
    parity.make_reference(family, "seqcls", tmp_path)
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    assert model.validate_path("embeddings").kind is fl.PathKind.TAG
    assert model.validate_path("encoder").kind is fl.PathKind.SUBGRAPH
    assert model.validate_path("head").kind is fl.PathKind.SUBGRAPH
    for i in range(2):
        assert model.validate_path(f"encoder.layer_{i}").kind is fl.PathKind.TAG
    names = [n for n, _ in model.named_parameters()]
    assert all(n.split(".")[0] in ("embeddings", "encoder", "head") for n in names)
    if family == "albert":  # one shared layer, registered once as encoder.layer_0
        assert model.parameters_at("encoder.layer_1") == model.parameters_at("encoder.layer_0")
        assert not any(n.startswith("encoder.layer_1.") for n in names)


def test_hidden_states_are_tagged(tmp_path):
    parity.make_reference("bert", "base", tmp_path)
    model = fh.AutoModel.from_pretrained(tmp_path)
    reference = parity.transformers_module().AutoModel.from_pretrained(tmp_path).eval()
    inputs = parity.sample_inputs()
    with torch.no_grad():
        out = model(**inputs)
        ref = reference(**inputs, output_hidden_states=True)
    assert torch.allclose(model.tagged_at("encoder.layer_0"), ref.hidden_states[1], atol=1e-5)
    assert torch.equal(model.tagged("hidden_states"), out)
    assert model.tagged("pooled").shape == (2, 32)  # BERT's pooler, a fork beside the output
    assert torch.allclose(model.tagged("pooled"), ref.pooler_output, atol=1e-5)


def test_freeze_embeddings_leaves_their_grads_none(bert):
    frozen = bert.freeze("embeddings")
    assert frozen == len(bert.parameters_at("embeddings")) > 0
    session = fl.Trainer.setup_head(bert, lambda p: torch.optim.AdamW(p, lr=1e-3))
    assert bert.training
    in_optimizer = {id(p) for g in session.optimizer.param_groups for p in g["params"]}
    assert not any(id(p) in in_optimizer for p in bert.parameters_at("embeddings"))
    before = [p.clone() for p in bert.parameters_at("embeddings")]
    inputs, labels = _batch()
    F.cross_entropy(bert(**inputs), labels).backward()
    assert all(p.grad is None for p in bert.parameters_at("embeddings"))
    assert all(p.grad is not None for p in bert.parameters_at("head"))
    head_before = [p.clone() for p in bert.parameters_at("head")]
    bert.step()
    assert all(
        torch.equal(a, b) for a, b in zip(before, bert.parameters_at("embeddings"), strict=True)
    )
    assert any(
        not torch.equal(a, b) for a, b in zip(head_before, bert.parameters_at("head"), strict=True)
    )


def test_per_path_learning_rates_reach_the_optimizer(bert):
    bert.freeze("encoder.layer_0")
    session = fl.Trainer.setup_head(
        bert,
        lambda groups: torch.optim.AdamW(groups, lr=1e-3),
        param_groups={"encoder.layer_1": 1e-5, "head": 1e-3, "embeddings": 0.0},
    )
    got = {g["name"]: (g["lr"], len(g["params"])) for g in session.optimizer.param_groups}
    assert got["encoder.layer_1"] == (1e-5, len(bert.parameters_at("encoder.layer_1")))
    assert got["head"] == (1e-3, len(bert.parameters_at("head")))
    assert got["embeddings"][0] == 0.0
    assert "encoder.layer_0" not in got and "(rest)" not in got  # frozen: left out entirely
    inputs, labels = _batch()
    F.cross_entropy(bert(**inputs), labels).backward()
    bert.step()
    assert bert.training_step == 1


def test_encoder_subgraph_checkpoint_round_trips(bert, tmp_path):
    path = tmp_path / "encoder.fdl"
    bert.subgraph("encoder").save_checkpoint(path)
    saved = [p.clone() for p in bert.parameters_at("encoder")]
    with torch.no_grad():
        for p in bert.parameters_at("encoder"):
            p.zero_()
    report = bert.load_subgraph_checkpoint("encoder", path)
    assert report.missing == [] and "encoder.layer_0.attention.self.query.weight" in report.loaded
    assert all(torch.equal(a, b) for a, b in zip(saved, bert.parameters_at("encoder"), strict=True))


def test_copy_and_pickle_keep_the_class_and_the_outputs(bert):
    inputs, _ = _batch()
    expected = bert(**inputs)
    for twin in (copy.deepcopy(bert), pickle.loads(pickle.dumps(bert))):
        assert type(twin) is fh.BertForSequenceClassification
        assert torch.equal(twin(**inputs), expected)
        assert twin.id2label == bert.id2label


def test_tree_summary_names_the_parts(bert):
    text = bert.tree_summary()
    assert "encoder" in text and "head" in text


def test_deberta_trains_after_an_inference_mode_forward(tmp_path):
    """DeBERTa caches its relative positions per length: a cache filled under inference_mode
    (predict) must not break a later training step."""
    parity.make_reference("deberta-v2", "seqcls", tmp_path)
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    inputs, labels = _batch()
    with torch.inference_mode():
        expected = model(**inputs)
    model.train()
    F.cross_entropy(model(**inputs), labels).backward()
    assert all(p.grad is not None for p in model.parameters_at("encoder.layer_0"))
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(**inputs), expected)


def test_whole_model_fdl_checkpoint_round_trips(bert, tmp_path):
    """A fine-tuned head saved as a .fdl checkpoint loads into a fresh model of the config."""
    with torch.no_grad():
        bert.subgraph("head").classifier.bias.add_(1.0)
    bert.save_checkpoint(tmp_path / "model.fdl")
    fresh = fh.AutoModelForSequenceClassification.from_config(bert.config)
    assert fresh.structural_hash() == bert.structural_hash()
    fresh.load_checkpoint(tmp_path / "model.fdl")
    inputs, _ = _batch()
    with torch.no_grad():
        assert torch.equal(fresh.eval()(**inputs), bert(**inputs))


def test_a_labelled_model_is_a_child_of_the_graph_it_is_nested_in(tmp_path):
    parity.make_reference("bert", "base", tmp_path)
    encoder = fh.AutoModel.from_pretrained(tmp_path, label="bert")
    assert encoder.label == "bert"
    outer = (
        fl.FlowBuilder()
        .input("attention_mask", "token_type_ids")
        .through(encoder)
        .using("attention_mask", "token_type_ids")
        .through(fh.layers.FirstToken())
        .through(torch.nn.Linear(32, 3))
        .tag("cls")
        .build()
    )
    assert outer.children_graphs() == {"bert": encoder}
    assert outer.validate_path("bert.encoder").kind is fl.PathKind.SUBGRAPH
    assert outer.validate_path("bert.encoder.layer_1").kind is fl.PathKind.TAG
    assert "bert [hash:" in outer.tree_summary()
    assert outer.freeze("bert.embeddings") == len(encoder.parameters_at("embeddings")) > 0
    assert all(n.startswith(("bert.", "cls.")) for n, _ in outer.named_parameters())
    inputs = parity.sample_inputs()
    outer(inputs["input_ids"], attention_mask=inputs["attention_mask"],
          token_type_ids=inputs["token_type_ids"])  # fmt: skip
    assert torch.equal(outer.tagged_at("bert.hidden_states"), encoder(**inputs))
    fresh = fh.AutoModelForSequenceClassification.from_config(encoder.config, label="clf")
    assert fresh.label == "clf"
    with pytest.raises(fh.HfConfigError, match="label must be a non-empty string without dots"):
        fh.AutoModel.from_pretrained(tmp_path, label="a.b")
