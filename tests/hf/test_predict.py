"""predict / fill_mask through tokenizer.json (a tiny WordPiece tokenizer built locally)."""

from __future__ import annotations

import pickle

import pytest
import torch

import flodl.hf as fh
from flodl.hf import parity

from .helpers import VOCAB, tiny_bert, wordpiece_tokenizer


def test_sequence_classification_predict(tmp_path):
    tiny_bert(tmp_path, "seqcls", labels=["negative", "neutral", "positive"])
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    texts = ["I love this movie", "an awful film"]
    results = model.predict(texts, top_k=3)
    assert len(results) == 2
    enc = model.tokenizer.encode(texts)
    with torch.no_grad():
        probs = model(**enc.inputs()).softmax(-1)
    for row, p in zip(results, probs, strict=True):
        assert [label for label, _ in row] == [
            model.id2label[int(i)] for i in p.argsort(descending=True)
        ]
        scores = [s for _, s in row]
        assert scores == sorted(scores, reverse=True)
        assert sum(scores) == pytest.approx(1.0, abs=1e-5)
    top1 = model.predict("I love this movie")
    assert len(top1) == 1 and len(top1[0]) == 1 and top1[0][0] == results[0][0]
    assert model.training is False


@pytest.mark.parametrize(
    "config",
    [
        {"num_labels": 3},
        {"num_labels": 1},
        {"num_labels": 3, "problem_type": "multi_label_classification"},
        {"num_labels": 1, "problem_type": "regression"},
        {"num_labels": 2, "problem_type": "regression"},
    ],
    ids=["softmax", "one-label-sigmoid", "multi-label-sigmoid", "regression", "regression-2"],
)
def test_sequence_scores_are_the_text_classification_pipelines(config, tmp_path):
    t = parity.transformers_module()
    cfg = t.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=37, **config)  # fmt: skip
    torch.manual_seed(0)
    reference = t.BertForSequenceClassification(cfg)
    parity._randomise(reference, 0)
    reference.save_pretrained(tmp_path)
    wordpiece_tokenizer().save(str(tmp_path / "tokenizer.json"))
    tokenizer = t.PreTrainedTokenizerFast(
        tokenizer_file=str(tmp_path / "tokenizer.json"), pad_token="[PAD]"
    )
    pipe = t.pipeline("text-classification", model=str(tmp_path), tokenizer=tokenizer)
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    n = config["num_labels"]
    for text in ("I love this movie", "an awful film"):
        expected = pipe(text, top_k=n)
        got = model.predict(text, top_k=n)[0]
        assert [label for label, _ in got] == [e["label"] for e in expected]
        assert [s for _, s in got] == pytest.approx([e["score"] for e in expected], abs=1e-5)


def test_predict_restores_training_mode(tmp_path):
    tiny_bert(tmp_path, "seqcls")
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    model.train()
    first = model.predict(["good film"])
    assert model.training
    assert model.predict(["good film"]) == first  # dropout off inside predict


def test_token_classification_predict(tmp_path):
    tiny_bert(tmp_path, "tokcls", labels=["O", "B-LOC", "I-LOC"])
    model = fh.AutoModelForTokenClassification.from_pretrained(tmp_path)
    out = model.predict(["fab lives in paris", "the seine"])
    assert [t for t, _, _ in out[0]] == ["fab", "lives", "in", "paris"]  # no [CLS]/[SEP]/[PAD]
    assert [t for t, _, _ in out[1]] == ["the", "seine"]
    enc = model.tokenizer.encode(["fab lives in paris"])
    with torch.no_grad():
        probs = model(**enc.inputs()).softmax(-1)[0]
    for k, (_, label, score) in enumerate(out[0], start=1):
        assert label == model.id2label[int(probs[k].argmax())]
        assert score == pytest.approx(float(probs[k].max()), abs=1e-6)


def test_question_answering_predict(tmp_path):
    tiny_bert(tmp_path, "qa")
    model = fh.AutoModelForQuestionAnswering.from_pretrained(tmp_path)
    context = "the seine flows through paris"
    answer, score = model.predict("where does the river flow", context)
    assert answer and answer in context and 0.0 < score <= 1.0
    # brute force over every span of context tokens
    enc = model.tokenizer.encode(["where does the river flow"], pairs=[context])
    with torch.no_grad():
        start, end = model(**enc.inputs())
    ctx = [i for i, s in enumerate(enc.sequence_ids[0]) if s == 1]
    ps, pe = start[0, ctx].softmax(-1), end[0, ctx].softmax(-1)
    best = max((float(ps[a] * pe[b]), a, b) for a in range(len(ctx)) for b in range(a, len(ctx)))
    offsets = enc.offsets[0]
    assert score == pytest.approx(best[0], rel=1e-5)
    assert answer == context[offsets[ctx[best[1]]][0] : offsets[ctx[best[2]]][1]]


def test_fill_mask(tmp_path):
    tiny_bert(tmp_path, "mlm")
    model = fh.AutoModelForMaskedLM.from_pretrained(tmp_path)
    out = model.fill_mask("the capital of france is [MASK] .", top_k=5)
    assert len(out) == 5 and all(tok in VOCAB for tok, _ in out)
    scores = [s for _, s in out]
    assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1.0 + 1e-6
    with pytest.raises(fh.TokenizerError, match=r"no \[MASK\] token"):
        model.fill_mask("no mask here")


def test_no_tokenizer_is_a_clear_error(tmp_path):
    tiny_bert(tmp_path, "seqcls", tokenizer=False)
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    assert model.tokenizer is None
    with pytest.raises(fh.TokenizerError, match=r"tokenizer\.json"):
        model.predict(["good"])
    model.tokenizer = fh.HfTokenizer(wordpiece_tokenizer())
    assert len(model.predict(["good"])[0]) == 1


def test_export_copies_the_tokenizer_and_pickles(tmp_path):
    tiny_bert(tmp_path / "src", "seqcls")
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path / "src")
    model.save_pretrained(tmp_path / "out")
    assert (tmp_path / "out" / "tokenizer.json").is_file()
    back = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path / "out")
    assert back.predict(["good film"]) == model.predict(["good film"])
    t = parity.transformers_module()
    fast = t.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "out" / "tokenizer.json"))
    assert (
        fast("good film")["input_ids"] == model.tokenizer.encode("good film").input_ids[0].tolist()
    )
    twin = pickle.loads(pickle.dumps(model))
    assert twin.predict(["good film"]) == model.predict(["good film"])


def test_tokenizer_pairs_padding_and_truncation(tmp_path):
    wordpiece_tokenizer().save(str(tmp_path / "tokenizer.json"))
    tok = fh.HfTokenizer.from_file(tmp_path)
    enc = tok.encode(["where does the river flow"], pairs=["the seine flows"])
    assert enc.tokens[0][0] == "[CLS]" and enc.tokens[0].count("[SEP]") == 2
    assert enc.sequence_ids[0][0] is None and set(enc.sequence_ids[0][1:6]) == {0}
    assert enc.token_type_ids[0].tolist()[-4:] == [1, 1, 1, 1]
    batch = tok.encode(["good", "the movie was good"])
    assert batch.input_ids.shape == (2, 6) and batch.attention_mask[0].tolist() == [
        1,
        1,
        1,
        0,
        0,
        0,
    ]
    short = fh.HfTokenizer.from_file(tmp_path / "tokenizer.json", max_length=4)
    assert short.encode(["the movie was really good"]).input_ids.shape == (1, 4)
    with pytest.raises(fh.TokenizerError, match="1 texts but 2 pair texts"):
        tok.encode(["a"], pairs=["b", "c"])
    with pytest.raises(fh.TokenizerError, match="no tokenizer file"):
        fh.HfTokenizer.from_file(tmp_path / "missing.json")


def test_a_model_without_the_head_says_which_class_has_predict_or_fill_mask(tmp_path):
    tiny_bert(tmp_path, "base")
    bare = fh.AutoModel.from_pretrained(tmp_path)
    with pytest.raises(fh.HfError, match=r"head \('base'\) has no predict\(\); load a task class"):
        bare.predict(["text"])
    tiny_bert(tmp_path / "seqcls", "seqcls")
    classifier = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path / "seqcls")
    with pytest.raises(fh.HfError, match=r"has no fill_mask\(\).*AutoModelForMaskedLM"):
        classifier.fill_mask("a [MASK] film")


@pytest.mark.parametrize("head", ["seqcls", "tokcls"])
def test_predict_of_no_texts_is_empty(head, tmp_path):
    tiny_bert(tmp_path, head)
    auto = getattr(fh, parity.HF_AUTO[head])
    assert auto.from_pretrained(tmp_path).predict([]) == []


def test_ids_without_a_batch_dimension_are_refused_clearly():
    config = {"model_type": "bert", "vocab_size": 30, "hidden_size": 8, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 16}  # fmt: skip
    model = fh.AutoModelForSequenceClassification.from_config(config)
    with pytest.raises(fh.HfError, match=r"\[batch, seq\].*unsqueeze\(0\)"):
        model(torch.tensor([2, 5, 7]))
    with pytest.raises(fh.HfError, match=r"\[batch, seq\], got \[1, 1, 3\]"):
        model(torch.tensor([[[2, 5, 7]]]))
    assert model(torch.tensor([[2, 5, 7]])).shape == (1, 2)
