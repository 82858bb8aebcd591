"""The parity matrix: 6 families × 5 heads against transformers, offline, eval mode, fp32.

Each cell: a tiny random transformers model saved with save_pretrained, loaded with
fl.hf.AutoModelFor*.from_pretrained, outputs compared (max abs diff < 1e-5); then the flodl model
is exported with save_pretrained and loaded back by transformers with no missing or unexpected
keys and the same outputs as transformers' own checkpoint of the model (transformers 5 reloads
that exactly; transformers 4 loses the tied bias of some MLM heads).
"""

from __future__ import annotations

import pytest
import torch

import flodl.hf as fh
from flodl.hf import parity


def transformers_major() -> int:
    return int(parity.transformers_module().__version__.split(".")[0])


@pytest.mark.parametrize("head", fh.HEADS)
@pytest.mark.parametrize("family", sorted(fh.FAMILIES))
def test_cell(family, head, tmp_path):
    cell = parity.run_cell(family, head, tmp_path)
    assert cell.error == ""
    if transformers_major() >= 5:  # reloads its own checkpoints exactly: the export is held to the
        assert cell.reference_diff < parity.TOLERANCE, cell  # reference's outputs themselves
    assert cell.load_diff < parity.TOLERANCE, cell
    assert cell.export_diff < parity.TOLERANCE, cell
    assert cell.missing == [] and cell.unexpected == []
    assert cell.ok


def test_the_comparison_sees_a_wrong_weight(tmp_path):
    """The matrix would catch a mis-mapped weight: one changed value moves the outputs."""
    parity.make_reference("roberta", "seqcls", tmp_path)
    reference = parity.transformers_module().AutoModelForSequenceClassification.from_pretrained(
        tmp_path
    )
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    inputs = parity.sample_inputs()
    expected = parity.outputs_of(reference.eval(), "seqcls", inputs)
    assert parity.max_diff(parity.outputs_of(model, "seqcls", inputs), expected) < 1e-5
    with torch.no_grad():
        model.subgraph("encoder").layer_1.output.dense.bias[0] += 0.1
    assert parity.max_diff(parity.outputs_of(model, "seqcls", inputs), expected) > 1e-4


@pytest.mark.parametrize(
    "variant",
    [
        {"share_att_key": False, "position_buckets": -1, "max_relative_positions": 16,
         "norm_rel_ebd": "none"},
        {"legacy": False},
        {"embedding_size": 16},
    ],
    ids=["separate-position-projections", "v3-mlm-layout", "factorised-embeddings"],
)  # fmt: skip
def test_deberta_variants(variant, tmp_path):
    """DeBERTa-v2's configuration switches (v2 vs v3 attention, MLM layouts) all match."""
    t = parity.transformers_module()
    if variant == {"legacy": False} and transformers_major() < 5:
        pytest.skip("transformers 4 ties this head's dense layer to the word embeddings")
    for head in ("base", "mlm"):
        cfg = parity.tiny_config("deberta-v2", head)
        for key, value in variant.items():
            setattr(cfg, key, value)
        torch.manual_seed(0)
        reference = getattr(t, parity.HF_AUTO[head]).from_config(cfg)
        parity._randomise(reference, 0)
        reference.eval().save_pretrained(tmp_path / head)
        model = getattr(fh, parity.HF_AUTO[head]).from_pretrained(tmp_path / head)
        inputs = parity.sample_inputs()
        got = parity.outputs_of(model, head, inputs)
        assert parity.max_diff(got, parity.outputs_of(reference, head, inputs)) < 1e-5
        model.save_pretrained(tmp_path / f"{head}-export")
        back, info = getattr(t, parity.HF_AUTO[head]).from_pretrained(
            tmp_path / f"{head}-export", output_loading_info=True
        )
        assert info["missing_keys"] == set() or not info["missing_keys"]
        assert not info["unexpected_keys"]
        assert parity.max_diff(parity.outputs_of(back.eval(), head, inputs), got) < 1e-5
