"""Classify texts with a HuggingFace model loaded as a flodl graph (added by `fdl add hf`).

    python examples/hf_classify.py distilbert-base-uncased-finetuned-sst-2-english "I love it"
    python examples/hf_classify.py path/to/model-dir "first text" "second text" --top-k 2

The model is an fl.Graph: freeze("embeddings"), parameters_at("encoder.layer_0"),
fl.Trainer.setup_head(model, ...) and model.save_pretrained(dir) all work on it.
"""

from __future__ import annotations

import argparse

import flodl as fl
import flodl.hf


def main() -> None:
    parser = argparse.ArgumentParser(description="Classify texts with a HuggingFace model.")
    parser.add_argument("model", help="a model directory or a hub id")
    parser.add_argument("texts", nargs="+", help="the texts to classify")
    parser.add_argument("--top-k", type=int, default=1, help="labels per text")
    args = parser.parse_args()
    model = fl.hf.AutoModelForSequenceClassification.from_pretrained(args.model)
    print(model.tree_summary())
    for text, labels in zip(args.texts, model.predict(args.texts, top_k=args.top_k), strict=True):
        shown = ", ".join(f"{label} {score:.3f}" for label, score in labels)
        print(f"{text!r}: {shown}")


if __name__ == "__main__":
    main()
