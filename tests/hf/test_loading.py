"""Loading: every key and shape checked before any weight is written; clear errors; dtypes."""

from __future__ import annotations

import json
import logging
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

import flodl as fl
import flodl.hf as fh
from flodl.hf import parity
from flodl.hf.weights import load_into


@pytest.fixture
def bert_seqcls(tmp_path):
    parity.make_reference("bert", "seqcls", tmp_path / "src")
    return tmp_path / "src"


def _rewrite(directory, change):
    tensors = load_file(directory / "model.safetensors")
    change(tensors)
    save_file(tensors, directory / "model.safetensors")


TINY_BERT = {"model_type": "bert", "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2,
             "num_attention_heads": 2, "intermediate_size": 64}  # fmt: skip


def _snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_missing_key_is_named_and_nothing_is_loaded(bert_seqcls):
    model = fh.BertForSequenceClassification.from_config(bert_seqcls)
    before = _snapshot(model)
    _rewrite(bert_seqcls, lambda t: t.pop("bert.encoder.layer.1.output.dense.weight"))
    with pytest.raises(fh.WeightsError) as err:
        load_into(model, model.family, bert_seqcls / "model.safetensors", "bert.")
    assert "bert.encoder.layer.1.output.dense.weight" in str(err.value)
    assert "nothing was loaded" in str(err.value)
    assert err.value.missing == ["bert.encoder.layer.1.output.dense.weight"]
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # not one weight written
    with pytest.raises(fh.WeightsError, match=r"layer\.1\.output\.dense\.weight"):
        fh.AutoModelForSequenceClassification.from_pretrained(bert_seqcls)


def test_shape_mismatch_names_both_shapes(bert_seqcls):
    _rewrite(bert_seqcls, lambda t: t.update({"classifier.weight": torch.zeros(5, 32)}))
    with pytest.raises(fh.WeightsError) as err:
        fh.AutoModelForSequenceClassification.from_pretrained(bert_seqcls)
    assert "classifier.weight: checkpoint [5, 32] vs model [3, 32]" in str(err.value)
    assert err.value.mismatched and not err.value.missing
    assert isinstance(err.value, fl.FlodlError)


def test_extra_keys_are_tolerated_and_reported(bert_seqcls, caplog):
    _rewrite(bert_seqcls, lambda t: t.update({"cls.seq_relationship.weight": torch.zeros(2, 32)}))
    with caplog.at_level(logging.WARNING, logger="flodl.hf"):
        model = fh.AutoModelForSequenceClassification.from_pretrained(bert_seqcls)
    assert model.load_report.unexpected == ["cls.seq_relationship.weight"]
    assert "cls.seq_relationship.weight" in caplog.text


def test_legacy_gamma_beta_names_load(bert_seqcls):
    reference = fh.AutoModelForSequenceClassification.from_pretrained(bert_seqcls)

    def legacy(t):
        for key in [k for k in t if k.endswith("LayerNorm.weight")]:
            t[key[: -len("weight")] + "gamma"] = t.pop(key)
        for key in [k for k in t if k.endswith("LayerNorm.bias")]:
            t[key[: -len("bias")] + "beta"] = t.pop(key)

    _rewrite(bert_seqcls, legacy)
    model = fh.AutoModelForSequenceClassification.from_pretrained(bert_seqcls)
    ids = parity.sample_inputs()["input_ids"]
    assert torch.equal(model(ids), reference(ids))


def test_base_checkpoint_into_a_task_head(tmp_path):
    """Fine-tuning starts from a base checkpoint: the head is new, only with init_head=True."""
    parity.make_reference("bert", "base", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["id2label"] = {"0": "no", "1": "yes"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(fh.WeightsError, match="init_head=True") as err:
        fh.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    assert "classifier.weight" in str(err.value)
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path, init_head=True)
    assert set(model.load_report.initialized) == {
        "head.classifier.weight",
        "head.classifier.bias",
    }
    base = fh.AutoModel.from_pretrained(tmp_path)
    ids = parity.sample_inputs()["input_ids"]
    assert torch.equal(model.subgraph("encoder").layer_1.output.dense.weight,
                       base.subgraph("encoder").layer_1.output.dense.weight)  # fmt: skip
    assert model(ids).shape == (2, 2) and model.id2label == {0: "no", 1: "yes"}


def test_labels_given_at_load_build_the_head_as_transformers_does(tmp_path):
    # transformers' from_pretrained(base, num_labels=3) and ours start a 3-label head over the
    # same encoder; what we save, transformers loads with nothing missing and the same logits.
    t = parity.transformers_module()
    parity.make_reference("bert", "base", tmp_path / "base")
    names = ["negative", "neutral", "positive"]
    model = fh.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "base", init_head=True, id2label=names
    )
    assert model.id2label == {0: "negative", 1: "neutral", 2: "positive"}
    assert set(model.load_report.initialized) == {"head.classifier.weight", "head.classifier.bias"}
    inputs = parity.sample_inputs()
    assert model(**inputs).shape == (2, 3)
    ours = model.save_pretrained(tmp_path / "ours")
    with parity._quiet():
        theirs, info = t.AutoModelForSequenceClassification.from_pretrained(
            ours, output_loading_info=True
        )
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert theirs.config.id2label == {0: "negative", 1: "neutral", 2: "positive"}
    assert theirs.config.label2id == {"negative": 0, "neutral": 1, "positive": 2}
    with torch.no_grad():
        torch.testing.assert_close(theirs.eval()(**inputs).logits, model(**inputs))
    # num_labels alone: LABEL_<i>, as transformers names them
    tokens = fh.AutoModelForTokenClassification.from_pretrained(
        tmp_path / "base", init_head=True, num_labels=4
    )
    with parity._quiet():
        reference = t.AutoModelForTokenClassification.from_pretrained(
            tmp_path / "base", num_labels=4
        )
    assert tokens.id2label == reference.config.id2label
    assert tokens(**inputs).shape == (2, 9, 4)


def test_a_head_of_another_label_count_is_refused_unless_init_head_starts_a_new_one(
    bert_seqcls,
):
    # bert_seqcls was saved with 3 labels; fine-tuning it for 5 needs a new classifier.
    with pytest.raises(
        fh.WeightsError, match="another label count: to train a new one, pass init_head=True"
    ) as err:
        fh.AutoModelForSequenceClassification.from_pretrained(bert_seqcls, num_labels=5)
    assert "classifier.weight: checkpoint [3, 32] vs model [5, 32]" in str(err.value)
    model = fh.AutoModelForSequenceClassification.from_pretrained(
        bert_seqcls, num_labels=5, init_head=True
    )
    assert set(model.load_report.initialized) == {"head.classifier.weight", "head.classifier.bias"}
    assert model.load_report.unexpected == []  # the old classifier is accounted for
    same = fh.AutoModelForSequenceClassification.from_pretrained(bert_seqcls)
    for name, value in same.state_dict().items():  # the encoder came from the checkpoint
        if not name.startswith("head."):
            assert torch.equal(value, model.state_dict()[name]), name
    # a mismatch outside the head is never papered over
    _rewrite(bert_seqcls, lambda t: t.update({"bert.pooler.dense.bias": torch.zeros(7)}))
    with pytest.raises(fh.WeightsError, match=r"pooler\.dense\.bias: checkpoint \[7\]") as err:
        fh.AutoModelForSequenceClassification.from_pretrained(bert_seqcls, init_head=True)
    assert "another label count" not in str(err.value)


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (fh.AutoModel, {"num_labels": 3}, "this model has no such head"),
        (fh.AutoModelForMaskedLM, {"id2label": ["a"]}, "this model has no such head"),
        (fh.AutoModelForSequenceClassification, {"num_labels": 0}, "integer >= 1, got 0"),
        (fh.AutoModelForSequenceClassification, {"num_labels": "3"}, "integer >= 1, got '3'"),
        (fh.AutoModelForSequenceClassification, {"id2label": "abc"}, "a list of names or"),
        (fh.AutoModelForSequenceClassification, {"id2label": {0: "a", 2: "b"}}, "0..N-1"),
        (fh.AutoModelForSequenceClassification, {"id2label": []}, "0..N-1"),
        (
            fh.AutoModelForSequenceClassification,
            {"num_labels": 2, "id2label": ["a", "b", "c"]},
            "num_labels=2 but id2label names 3 labels",
        ),
    ],
)
def test_bad_labels_are_refused_before_anything_is_read(bert_seqcls, cls, kwargs, message):
    with pytest.raises(fh.HfConfigError, match=re.escape(message)):
        cls.from_pretrained(bert_seqcls, **kwargs)
    with pytest.raises(fh.HfConfigError, match=re.escape(message)):
        cls.from_config(bert_seqcls, **kwargs)


def test_task_checkpoint_into_the_bare_encoder(bert_seqcls):
    base = fh.AutoModel.from_pretrained(bert_seqcls)
    assert base.load_report.unexpected == ["classifier.bias", "classifier.weight"]
    assert isinstance(base, fh.BertModel) and isinstance(base, fl.Graph)


def test_family_and_model_type_errors(bert_seqcls, tmp_path):
    with pytest.raises(
        fh.HfConfigError, match="RobertaForSequenceClassification loads model_type 'roberta'"
    ):
        fh.RobertaForSequenceClassification.from_pretrained(bert_seqcls)
    config = json.loads((bert_seqcls / "config.json").read_text())
    (bert_seqcls / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(fh.HfConfigError, match=r"unsupported model_type .gpt2.*bert.*deberta-v2"):
        fh.AutoModel.from_pretrained(bert_seqcls)
    with pytest.raises(fh.HfHubError, match=r"no config\.json"):
        fh.AutoModel.from_pretrained(tmp_path)


def test_legacy_bin_only_points_to_convert(bert_seqcls):
    (bert_seqcls / "model.safetensors").rename(bert_seqcls / "pytorch_model.bin")
    with pytest.raises(fh.HfHubError, match="fdl hf convert"):
        fh.AutoModel.from_pretrained(bert_seqcls)


def test_dtype_and_device(bert_seqcls):
    ref = fh.AutoModelForSequenceClassification.from_pretrained(bert_seqcls)
    model = fh.AutoModelForSequenceClassification.from_pretrained(
        bert_seqcls, dtype=torch.float64, device="cpu"
    )
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    ids = parity.sample_inputs()["input_ids"]
    assert torch.allclose(model(ids).float(), ref(ids), atol=1e-5)
    assert not model.training  # eval mode, like transformers


def test_fp16_checkpoint_keeps_its_dtype(bert_seqcls, tmp_path):
    model = fh.AutoModelForSequenceClassification.from_pretrained(bert_seqcls)
    model.half().save_pretrained(tmp_path / "half")
    assert json.loads((tmp_path / "half" / "config.json").read_text())["dtype"] == "float16"
    back = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path / "half")
    assert {p.dtype for p in back.parameters()} == {torch.float16}
    assert all(
        torch.equal(a, b) for a, b in zip(back.parameters(), model.parameters(), strict=True)
    )


def test_a_checkpoint_of_mixed_dtypes_loads_in_one_dtype_as_transformers_does(tmp_path):
    t = parity.transformers_module()
    parity.make_reference("bert", "seqcls", tmp_path).half().save_pretrained(tmp_path)
    # an fp16 checkpoint whose classifier was kept in fp32
    head = ("classifier.weight", "classifier.bias")
    _rewrite(tmp_path, lambda w: w.update({k: w[k].float() for k in head}))
    ids = parity.sample_inputs()["input_ids"]
    reference = t.AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    assert {p.dtype for p in model.parameters()} == {torch.float16}  # config.json's dtype
    with torch.no_grad():
        assert torch.equal(model(ids), reference(ids).logits)
    as_fp32 = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path, dtype=torch.float32)
    assert {p.dtype for p in as_fp32.parameters()} == {torch.float32}  # the argument wins
    fp32_classifier = load_file(tmp_path / "model.safetensors")["classifier.weight"]
    assert torch.equal(as_fp32.subgraph("head").classifier.weight, fp32_classifier)
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("dtype", None)
    config["torch_dtype"] = "float32"  # as transformers 4 wrote it: read the same
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    config.pop("torch_dtype")  # no dtype named: the checkpoint's dominant one
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    assert {p.dtype for p in model.parameters()} == {torch.float16}
    assert model(ids).dtype == torch.float16


def test_an_integer_tensor_for_a_float_weight_is_refused_before_anything_is_loaded(bert_seqcls):
    key = "bert.encoder.layer.0.output.dense.weight"
    _rewrite(bert_seqcls, lambda w: w.update({key: (w[key] * 100).to(torch.int64)}))
    model = fh.BertForSequenceClassification.from_config(bert_seqcls)
    before = _snapshot(model)
    with pytest.raises(fh.WeightsError) as err:
        load_into(model, model.family, bert_seqcls / "model.safetensors", "bert.")
    assert f"{key}: checkpoint I64 for a floating-point weight" in str(err.value)
    assert "nothing was loaded" in str(err.value) and "init_head" not in str(err.value)
    assert err.value.mismatched and not err.value.missing
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_export_writes_one_dtype_in_config(tmp_path):
    config = {**TINY_BERT, "torch_dtype": "float16"}  # as transformers 4 wrote it
    fh.AutoModel.from_config(config, dtype=torch.float16).save_pretrained(tmp_path / "half")
    as_fp32 = fh.AutoModel.from_pretrained(tmp_path / "half", dtype=torch.float32)
    written = json.loads((as_fp32.save_pretrained(tmp_path / "fp32") / "config.json").read_text())
    assert (written["dtype"], written["torch_dtype"]) == ("float32", "float32")
    back = fh.AutoModel.from_pretrained(tmp_path / "fp32")
    assert {p.dtype for p in back.parameters()} == {torch.float32}


def test_call_convention_is_the_same_for_every_family(tmp_path):
    inputs = parity.sample_inputs()
    for family in fh.FAMILIES:
        parity.make_reference(family, "tokcls", tmp_path / family)
        model = fh.AutoModelForTokenClassification.from_pretrained(tmp_path / family)
        by_position = model(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
        by_keyword = model(**inputs)
        assert torch.equal(by_position, by_keyword) and by_keyword.shape == (2, 9, 3)
        default_mask = model(input_ids=inputs["input_ids"])
        assert default_mask.shape == (2, 9, 3)


def test_a_sequence_longer_than_the_positions_is_a_clear_error(tmp_path):
    parity.make_reference("roberta", "base", tmp_path)  # 70 positions, padding_idx 1
    model = fh.AutoModel.from_pretrained(tmp_path)
    assert model(torch.randint(5, 90, (1, 68))).shape == (1, 68, 32)
    with pytest.raises(fh.HfError, match="69 tokens is longer than this model's 68 positions"):
        model(torch.randint(5, 90, (1, 69)))


@pytest.mark.parametrize("family", sorted(fh.FAMILIES))
def test_an_id_outside_the_embedding_tables_is_a_clear_error(family):
    config = {**TINY_BERT, "model_type": family, "type_vocab_size": 2}
    if family == "distilbert":
        config = {"model_type": family, "vocab_size": 100, "dim": 32, "n_layers": 1, "n_heads": 2,
                  "hidden_dim": 64}  # fmt: skip
    if family == "albert":
        config["embedding_size"] = 16
    model = fh.AutoModelForSequenceClassification.from_config(config)
    ok = torch.tensor([[2, 5, 99]])
    assert model(ok).shape == (1, 2)
    vocabulary = r"largest token id, 150, is outside this model's vocabulary \(vocab_size 100"
    with pytest.raises(fh.HfError, match=vocabulary):
        model(torch.tensor([[2, 150, 7]]))
    with pytest.raises(fh.HfError, match="a token id, -1, is outside"):
        model(torch.tensor([[2, -1, 7]]))
    if family != "distilbert":  # no token types: DistilBERT ignores them
        types = r"largest token type id, 2, is outside this model's token types \(type_vocab_size 2"
        with pytest.raises(fh.HfError, match=types):
            model(ok, token_type_ids=torch.tensor([[0, 0, 2]]))


def test_sharded_checkpoints_load(tmp_path):
    reference = parity.make_reference("bert", "mlm", tmp_path / "one")
    reference.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    shards = sorted(p.name for p in (tmp_path / "sharded").glob("model-*.safetensors"))
    assert len(shards) > 1 and (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    whole = fh.AutoModelForMaskedLM.from_pretrained(tmp_path / "one")
    model = fh.AutoModelForMaskedLM.from_pretrained(tmp_path / "sharded")
    ids = parity.sample_inputs()["input_ids"]
    assert torch.equal(model(ids), whole(ids))
    (tmp_path / "sharded" / shards[-1]).unlink()
    with pytest.raises(fh.HfHubError, match="missing"):
        fh.AutoModelForMaskedLM.from_pretrained(tmp_path / "sharded")
