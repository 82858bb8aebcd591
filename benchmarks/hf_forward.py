"""flodl.hf graphs vs transformers: the same HuggingFace model's forward, same weights, same run.

A random-weight model is made from a config with ``transformers`` (no download), saved, and loaded
twice by ``transformers`` (the second copy is the A/A noise floor) and once by
``fl.hf.AutoModel*.from_pretrained``. Each case runs one forward under ``torch.inference_mode()``
in eval mode, fp32, on a padded batch of 8 sequences of 128 tokens (the last quarter of half the
rows is padding), on one CPU thread, timed with the process CPU clock, interleaved.

``ratio`` is flodl / transformers (1.00 = identical, < 1 = flodl faster); ``a_a_ratio`` is the
second transformers copy / the first, in the same rounds. Goal: ratio <= 1.00 within the floor.

Usage: ``python benchmarks/hf_forward.py [--quick | --smoke] [--rounds N] [--out DIR]``.
``--smoke`` runs a tiny model for one round (the tests run it: the script works, nothing more).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import interleaved, ratio, write_report

import flodl.hf as fh
from flodl.hf.parity import transformers_module

MODELS = {
    # name: (family, head, config overrides)
    "bert-base seqcls": ("bert", "AutoModelForSequenceClassification", {}),
    "bert L4 H256 seqcls": (
        "bert",
        "AutoModelForSequenceClassification",
        {
            "num_hidden_layers": 4,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "intermediate_size": 1024,
        },
    ),
    "distilbert-base tokcls": ("distilbert", "AutoModelForTokenClassification", {}),
    "deberta-v3 L6 seqcls": (
        "deberta-v2",
        "AutoModelForSequenceClassification",
        {
            "relative_attention": True,
            "position_buckets": 256,
            "max_relative_positions": -1,
            "pos_att_type": ["p2c", "c2p"],
            "position_biased_input": False,
            "norm_rel_ebd": "layer_norm",
            "share_att_key": True,
            "type_vocab_size": 0,
            "vocab_size": 30522,
            "num_hidden_layers": 6,
        },
    ),
}
SMOKE = {
    "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "intermediate_size": 37, "dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 37,
}  # fmt: skip


def make_config(family: str, overrides: dict[str, object]):
    t = transformers_module()
    cls = {"bert": t.BertConfig, "distilbert": t.DistilBertConfig, "deberta-v2": t.DebertaV2Config}[
        family
    ]
    config = cls(num_labels=3)
    for key, value in overrides.items():
        if hasattr(config, key):
            setattr(config, key, value)
    return config


def batch(vocab: int, size: int = 8, length: int = 128) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab, (size, length), generator=g)
    mask = torch.ones_like(ids)
    mask[::2, length * 3 // 4 :] = 0
    return {"input_ids": ids, "attention_mask": mask}


def cases_for(family: str, auto: str, overrides: dict, workdir: Path, length: int):
    t = transformers_module()
    torch.manual_seed(0)
    reference = getattr(t, auto).from_config(make_config(family, overrides)).eval()
    reference.save_pretrained(workdir)
    twin = getattr(t, auto).from_pretrained(workdir).eval()
    model = getattr(fh, auto).from_pretrained(workdir)
    inputs = batch(reference.config.vocab_size, length=length)
    with torch.inference_mode():
        diff = (model(**inputs) - reference(**inputs).logits).abs().max().item()

    def run(m):
        def case() -> None:
            with torch.inference_mode():
                m(**inputs)

        return case

    return {
        "transformers": run(reference),
        "transformers (A/A)": run(twin),
        "flodl": run(model),
    }, diff


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--smoke", action="store_true", help="tiny model, one round")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--models", default="", help="comma-separated names (default: all)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rounds = 1 if args.smoke else 3 if args.quick else args.rounds
    models = {"tiny bert seqcls": MODELS["bert-base seqcls"]} if args.smoke else MODELS
    if args.models:
        wanted = [m.strip() for m in args.models.split(",")]
        unknown = [m for m in wanted if m not in MODELS]
        if unknown:
            parser.error(f"unknown model(s) {unknown}; known: {list(MODELS)}")
        models = {m: MODELS[m] for m in wanted}
    out = args.out
    if args.smoke and out is None:
        out = Path(__file__).resolve().parent / "results" / "smoke"
    rows = []
    for name, (family, auto, overrides) in models.items():
        overrides = {**overrides, **SMOKE} if args.smoke else overrides
        with tempfile.TemporaryDirectory() as tmp:
            cases, diff = cases_for(family, auto, overrides, Path(tmp), 16 if args.smoke else 128)
            results = interleaved(cases, rounds=rounds, inner=1, warmup=1, clock=time.process_time)
        rows.append(
            {
                "model": name,
                "transformers_ms": results["transformers"].median_s * 1e3,
                "flodl_ms": results["flodl"].median_s * 1e3,
                "ratio": ratio(results, "flodl", "transformers"),
                "a_a_ratio": ratio(results, "transformers (A/A)", "transformers"),
                "max_abs_diff": diff,
            }
        )
        print(rows[-1], flush=True)
    smoke = (
        "SMOKE RUN (tiny model, one round: checks the script, measures nothing); "
        if args.smoke
        else ""
    )
    path = write_report(
        "flodl.hf forward vs transformers (CPU, one thread)",
        rows,
        "hf_forward",
        f"{smoke}batch 8 x 128 tokens (padded), eval, fp32, inference_mode; median of per-round medians "
        f"over {rounds} interleaved rounds (process CPU time); ratio = flodl / transformers, "
        "a_a_ratio = a second transformers copy / the first",
        results_dir=out,
    )
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main()
