"""config.json read as transformers reads it: untied decoders, per-family defaults, labels, dtypes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

import flodl.hf as fh
from flodl.hf import parity

from .helpers import tiny_bert, wordpiece_tokenizer


def _reference(family, head, directory, **config):
    """A tiny random transformers model with ``config`` changes, saved to ``directory``."""
    t = parity.transformers_module()
    cfg = parity.tiny_config(family, head)
    for key, value in config.items():
        setattr(cfg, key, value)
    torch.manual_seed(0)
    model = getattr(t, parity.HF_AUTO[head]).from_config(cfg)
    parity._randomise(model, 0)
    model.eval().save_pretrained(directory)
    return model


def _drop_from_config(directory, *keys):
    path = directory / "config.json"
    config = json.loads(path.read_text())
    for key in keys:
        config.pop(key, None)
    path.write_text(json.dumps(config))


# ------------------------------------------------------------------ untied masked-LM decoder
@pytest.mark.parametrize("family", sorted(fh.FAMILIES))
def test_untied_mlm_decoder_loads_and_round_trips(family, tmp_path):
    t = parity.transformers_module()
    reference = _reference(family, "mlm", tmp_path / "src", tie_word_embeddings=False)
    model = fh.AutoModelForMaskedLM.from_pretrained(tmp_path / "src")
    assert model.load_report.unexpected == []
    inputs = parity.sample_inputs()
    got = parity.outputs_of(model, "mlm", inputs)
    assert parity.max_diff(got, parity.outputs_of(reference, "mlm", inputs)) < 1e-5
    model.save_pretrained(tmp_path / "out")
    back, info = t.AutoModelForMaskedLM.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert parity.max_diff(parity.outputs_of(back.eval(), "mlm", inputs), got) < 1e-5


def test_untied_decoder_bias_read_from_the_tied_name(tmp_path):
    """A checkpoint that stores the decoder's bias once, as ``cls.predictions.bias``."""
    reference = _reference("bert", "mlm", tmp_path, tie_word_embeddings=False)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["cls.predictions.bias"] = tensors.pop("cls.predictions.decoder.bias")
    save_file(tensors, tmp_path / "model.safetensors")
    model = fh.AutoModelForMaskedLM.from_pretrained(tmp_path)
    inputs = parity.sample_inputs()
    expected = parity.outputs_of(reference, "mlm", inputs)
    assert parity.max_diff(parity.outputs_of(model, "mlm", inputs), expected) < 1e-5


def test_tied_decoder_is_still_the_embedding_matrix(tmp_path):
    _reference("bert", "mlm", tmp_path)
    model = fh.AutoModelForMaskedLM.from_pretrained(tmp_path)
    decoder = model.subgraph("head").decoder
    assert decoder.weight is model.embeddings.word_embeddings.weight


# ------------------------------------------------------------------ defaults of missing keys
def test_albert_without_hidden_act_uses_gelu_new(tmp_path):
    _reference("albert", "base", tmp_path)
    _drop_from_config(tmp_path, "hidden_act")
    t = parity.transformers_module()
    reference = t.AutoModel.from_pretrained(tmp_path).eval()
    assert reference.config.hidden_act == "gelu_new"
    model = fh.AutoModel.from_pretrained(tmp_path)
    inputs = parity.sample_inputs()
    got = parity.outputs_of(model, "base", inputs)
    assert parity.max_diff(got, parity.outputs_of(reference, "base", inputs)) < 1e-6


def test_deberta_without_layer_norm_eps_uses_1e_7(tmp_path):
    _reference("deberta-v2", "base", tmp_path)
    _drop_from_config(tmp_path, "layer_norm_eps")
    model = fh.AutoModel.from_pretrained(tmp_path)
    assert model.embeddings.LayerNorm.eps == 1e-7


@pytest.mark.parametrize("family", ["bert", "albert", "distilbert"])
def test_missing_pad_token_id_defaults_to_0(family, tmp_path):
    """transformers' padding row 0 never receives a gradient; flodl's must not either."""
    _reference(family, "seqcls", tmp_path)
    _drop_from_config(tmp_path, "pad_token_id")
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    word = model.embeddings.word_embeddings
    assert word.padding_idx == 0
    F.cross_entropy(model(torch.tensor([[2, 0, 7, 9, 3]])), torch.tensor([1])).backward()
    assert word.weight.grad[0].abs().sum() == 0


def test_defaults_follow_the_family(tmp_path):
    """A config with only the sizes builds what transformers' config class would."""
    sizes = {"vocab_size": 30, "hidden_size": 8, "num_hidden_layers": 1,
             "num_attention_heads": 2, "intermediate_size": 16}  # fmt: skip
    roberta = fh.AutoModel.from_config({"model_type": "roberta", **sizes})
    assert roberta.embeddings.word_embeddings.padding_idx == 1
    distil = fh.AutoModelForQuestionAnswering.from_config(
        {"model_type": "distilbert", "vocab_size": 30, "dim": 8, "n_layers": 1, "n_heads": 2,
         "hidden_dim": 16}
    )  # fmt: skip
    dropouts = [m.p for m in distil.subgraph("head").modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts == [0.1]  # DistilBertConfig.qa_dropout
    explicit = fh.AutoModel.from_config({"model_type": "bert", **sizes, "pad_token_id": None})
    assert explicit.embeddings.word_embeddings.padding_idx is None


_TINY = {"vocab_size": 30, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
         "intermediate_size": 16}  # fmt: skip


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"model_type": "bert", "position_embedding_type": "relative_key"}, "relative_key"),
        ({"model_type": "albert", "embedding_size": 8, "position_embedding_type": "relative_key"},
         "relative_key"),
        ({"model_type": "bert", "is_decoder": True}, "is_decoder"),
        ({"model_type": "roberta", "is_decoder": True}, "is_decoder"),
        ({"model_type": "xlm-roberta", "is_decoder": True}, "is_decoder"),
    ],
    ids=["bert-relative", "albert-relative", "bert-decoder", "roberta-decoder", "xlmr-decoder"],
)  # fmt: skip
def test_unsupported_configurations_are_refused_at_build(config, message):
    with pytest.raises(fh.HfConfigError, match=message):
        fh.AutoModel.from_config({**_TINY, **config})


@pytest.mark.parametrize("family", ["albert", "distilbert", "deberta-v2"])
def test_is_decoder_changes_nothing_where_transformers_ignores_it(family, tmp_path):
    reference = _reference(family, "base", tmp_path, is_decoder=True)
    model = fh.AutoModel.from_pretrained(tmp_path)
    inputs = parity.sample_inputs()
    expected = parity.outputs_of(reference, "base", inputs)
    assert parity.max_diff(parity.outputs_of(model, "base", inputs), expected) < 1e-5


_SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 37}  # fmt: skip
_MINIMAL = {
    "bert": _SIZES,
    "roberta": _SIZES,
    "xlm-roberta": _SIZES,
    "albert": {**_SIZES, "embedding_size": 16},
    "albert-v1": {**_SIZES, "embedding_size": 16, "hidden_dropout_prob": 0.1},  # albert-*-v1
    "distilbert": {"dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 37},
    "deberta-v2": {**_SIZES, "relative_attention": True, "pos_att_type": ["p2c", "c2p"]},
}


def _dropout_calls(model, head, inputs):
    """The probability of every dropout module call of a train-mode forward, in order, and the
    outputs (seeded)."""
    calls = []
    hooks = [
        m.register_forward_hook(lambda m, i, o: calls.append(m.p))
        for m in model.modules()
        if isinstance(m, torch.nn.Dropout) and m.p > 0
    ]
    torch.manual_seed(1)
    with torch.no_grad():
        outputs = parity.outputs_of(model.train(), head, inputs)
    for hook in hooks:
        hook.remove()
    return calls, outputs


@pytest.mark.parametrize(
    ("family", "head"),
    [(f, h) for f in _MINIMAL for h in ("seqcls", "tokcls", "qa")]
    + [("albert-v1", h) for h in ("base", "mlm")],
)
def test_training_mode_dropouts_are_transformers_own(family, head, tmp_path):
    """A config.json with only the sizes: every key left out takes the transformers config
    class's default, and training mode drops out where transformers does, with the same
    probabilities, in the same order (so the same seed gives the same outputs)."""
    t = parity.transformers_module()
    config = {"model_type": family.removesuffix("-v1"), "vocab_size": parity.VOCAB,
              **_MINIMAL[family]}  # fmt: skip
    cls = parity.HF_AUTO[head]
    torch.manual_seed(0)
    getattr(t, cls).from_config(t.AutoConfig.for_model(**config)).save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(config))  # the defaults left out
    reference = getattr(t, cls).from_pretrained(tmp_path)
    model = getattr(fh, cls).from_pretrained(tmp_path)
    inputs = parity.sample_inputs()
    expected_calls, expected = _dropout_calls(reference, head, inputs)
    calls, outputs = _dropout_calls(model, head, inputs)
    assert calls == expected_calls
    assert parity.max_diff(outputs, expected) < 1e-5


# ------------------------------------------------------------------ labels and dtypes
def test_num_labels_of_the_same_count_keeps_the_checkpoints_names(tmp_path):
    _reference("bert", "seqcls", tmp_path, id2label={0: "neg", 1: "pos", 2: "mixed"},
               label2id={"neg": 0, "pos": 1, "mixed": 2})  # fmt: skip
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path, num_labels=3)
    assert model.id2label == {0: "neg", 1: "pos", 2: "mixed"}
    other = fh.AutoModelForSequenceClassification.from_pretrained(
        tmp_path, num_labels=2, init_head=True
    )
    assert other.id2label == {0: "LABEL_0", 1: "LABEL_1"}


def test_a_fresh_head_takes_the_checkpoints_dtype(tmp_path):
    t = parity.transformers_module()
    t.AutoModel.from_config(parity.tiny_config("bert", "base")).to(torch.bfloat16).save_pretrained(
        tmp_path
    )
    model = fh.AutoModelForSequenceClassification.from_pretrained(
        tmp_path, init_head=True, num_labels=3
    )
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model(torch.tensor([[2, 7, 9, 3]])).shape == (1, 3)
    as_fp32 = fh.AutoModelForSequenceClassification.from_pretrained(
        tmp_path, init_head=True, dtype=torch.float32
    )
    assert {p.dtype for p in as_fp32.parameters()} == {torch.float32}


# ------------------------------------------------------------------ tokenizer files
def test_export_carries_the_tokenizer_files_over(tmp_path):
    t = parity.transformers_module()
    tiny_bert(tmp_path / "src", "seqcls", tokenizer=False)
    fast = t.PreTrainedTokenizerFast(
        tokenizer_object=wordpiece_tokenizer(), model_max_length=16, pad_token="[PAD]",
        mask_token="[MASK]", cls_token="[CLS]", sep_token="[SEP]", unk_token="[UNK]",
    )  # fmt: skip
    written = {p.name for p in map(Path, fast.save_pretrained(tmp_path / "src"))}
    assert "tokenizer_config.json" in written
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path / "src")
    out = model.save_pretrained(tmp_path / "out")
    assert written <= {p.name for p in out.iterdir()}
    assert t.AutoTokenizer.from_pretrained(out).model_max_length == 16
    model.save_pretrained(tmp_path / "src")  # into its own source: the files stay as they are
    assert t.AutoTokenizer.from_pretrained(tmp_path / "src").model_max_length == 16
    model.tokenizer = fh.HfTokenizer(wordpiece_tokenizer())  # another tokenizer: not carried
    assert not (model.save_pretrained(tmp_path / "other") / "tokenizer_config.json").exists()
