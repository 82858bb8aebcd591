"""Fine-tuning a loaded head: fl.Trainer.builder in-process, and the worked example."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import flodl as fl
import flodl.hf as fh
from flodl.hf import parity

from .helpers import tiny_bert


def test_builder_trains_a_head(tmp_path):
    tiny_bert(tmp_path, "seqcls", labels=["no", "yes"])
    tok = fh.HfTokenizer.from_file(tmp_path)
    texts = ["good film", "great movie", "bad film", "awful movie"] * 8
    labels = torch.tensor([1, 1, 0, 0] * 8)
    enc = tok.encode(texts)

    def make_model(device):
        return fh.AutoModelForSequenceClassification.from_pretrained(tmp_path, device=device)

    def train_step(model, batch):
        ids, mask, target = batch
        return F.cross_entropy(model(ids, attention_mask=mask), target)

    handle = (
        fl.Trainer.builder(make_model, lambda p: torch.optim.AdamW(p, lr=3e-3), train_step)
        .dataset(lambda: (enc.input_ids, enc.attention_mask, labels))
        .batch_size(8)
        .num_epochs(6)
        .seed(0)
        .run()
    )
    state = handle.join()
    losses = [m.avg_loss for m in handle.history]
    assert len(losses) == 6 and losses[-1] < losses[0] * 0.5
    model = state.load_into(make_model("cpu")).eval()
    predictions = [p[0][0] for p in model.predict(["good film", "awful movie"])]
    assert predictions == ["yes", "no"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode",
    [
        [],
        ["--builder"],
        pytest.param(["--builder", "--ranks", "2"], marks=pytest.mark.multiproc),
    ],
    ids=["setup_head", "builder", "builder-2-ranks"],
)
def test_the_worked_example(mode, repo_root, tmp_path):
    from tests.conftest import clean_env

    result = subprocess.run(
        [sys.executable, str(repo_root / "examples" / "hf_finetune.py"), "--out", str(tmp_path),
         *mode],
        capture_output=True, text=True, timeout=300, env=clean_env(OMP_NUM_THREADS="1"),
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    if "--ranks" in mode:
        assert "trained on 2 rank(s)" in result.stdout
    accuracy = float(re.search(r"accuracy after: ([\d.]+)", result.stdout).group(1))
    assert accuracy >= 0.9, result.stdout
    t = parity.transformers_module()
    exported = tmp_path / "finetuned"
    reference, info = t.AutoModelForSequenceClassification.from_pretrained(
        exported, output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    model = fh.AutoModelForSequenceClassification.from_pretrained(exported)
    enc = model.tokenizer.encode(["the movie was great"])
    with torch.no_grad():
        expected = reference.eval()(**enc.inputs()).logits
    assert torch.allclose(model(**enc.inputs()), expected, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [[], ["--builder"]], ids=["setup_head", "builder"])
def test_the_worked_example_from_a_base_checkpoint(mode, repo_root, tmp_path):
    # A base checkpoint (an encoder with no classifier, as bert-base-uncased) with --init-head:
    # a new head with the task's labels, trained to the same accuracy, exported with them.
    from tests.conftest import clean_env

    spec = importlib.util.spec_from_file_location(
        "hf_finetune", repo_root / "examples" / "hf_finetune.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    bare = fh.AutoModel.from_pretrained(example.make_tiny_model(tmp_path / "tiny"))
    base = bare.save_pretrained(tmp_path / "base")  # encoder and tokenizer, no classifier
    config = json.loads((base / "config.json").read_text())
    for key in ("id2label", "label2id", "num_labels"):  # nor labels, as bert-base-uncased
        config.pop(key, None)
    (base / "config.json").write_text(json.dumps(config))
    result = subprocess.run(
        [sys.executable, str(repo_root / "examples" / "hf_finetune.py"), "--out", str(tmp_path),
         "--model", str(base), "--init-head", *mode],
        capture_output=True, text=True, timeout=300, env=clean_env(OMP_NUM_THREADS="1"),
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    accuracy = float(re.search(r"accuracy after: ([\d.]+)", result.stdout).group(1))
    assert accuracy >= 0.9, result.stdout
    config = json.loads((tmp_path / "finetuned" / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"}
