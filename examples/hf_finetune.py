"""Fine-tune a HuggingFace encoder as an fl.Graph: sentiment on a synthetic dataset.

    python examples/hf_finetune.py                       # a tiny BERT made here, no download
    python examples/hf_finetune.py --model bert-base-uncased --init-head   # a real checkpoint
    python examples/hf_finetune.py --builder             # the same training, fl.Trainer.builder
    python examples/hf_finetune.py --builder --ranks 2   # ... on two CPU processes

Without ``--model`` a tiny BERT (random weights, 2 layers) and a WordPiece tokenizer are written
to ``OUT/base`` and fine-tuned from there. The loop freezes the embeddings by label path, gives
the encoder a lower learning rate than the head, trains with ``fl.Trainer.setup_head`` (the same
code on CPU, one GPU or N ranks under torchrun), then exports the fine-tuned model with
``save_pretrained`` (``OUT/finetuned``), which ``transformers`` loads as is.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
from pathlib import Path

import torch
import torch.nn.functional as F

import flodl as fl
import flodl.hf

POSITIVE = ["good", "great", "wonderful", "lovely", "excellent", "fun"]
NEGATIVE = ["bad", "awful", "boring", "terrible", "dull", "poor"]
SUBJECTS = ["the movie", "this film", "the story", "the music", "the ending", "the cast"]
LABELS = {0: "negative", 1: "positive"}


def synthetic_dataset(n: int, seed: int = 0) -> tuple[list[str], list[int]]:
    """Sentences like "the movie was really great" labelled by their adjective."""
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(n):
        label = rng.randrange(2)
        word = rng.choice(POSITIVE if label else NEGATIVE)
        adverb = rng.choice(["", "really ", "very ", "quite "])
        texts.append(f"{rng.choice(SUBJECTS)} was {adverb}{word}")
        labels.append(label)
    return texts, labels


def make_tiny_model(directory: Path) -> Path:
    """A tiny random BERT and its WordPiece tokenizer, in HuggingFace's layout."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = sorted({w for s in SUBJECTS for w in s.split()} | set(POSITIVE) | set(NEGATIVE))
    words += ["was", "really", "very", "quite"]
    vocab = {token: i for i, token in enumerate(special + words)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.add_special_tokens(special)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    config = {
        "model_type": "bert",
        "vocab_size": len(vocab),
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "pad_token_id": 0,
        "id2label": {str(k): v for k, v in LABELS.items()},
    }
    torch.manual_seed(0)
    model = fl.hf.AutoModelForSequenceClassification.from_config(config)
    model.tokenizer = fl.hf.HfTokenizer(tok)
    return model.save_pretrained(directory)


def load(model_path: str | Path, init_head: bool, device=None) -> fl.hf.HfModel:
    """The checkpoint with this task's labels (a base one gets a new head with them)."""
    return fl.hf.AutoModelForSequenceClassification.from_pretrained(
        model_path, init_head=init_head, id2label=[LABELS[0], LABELS[1]], device=device
    )


def accuracy(model: fl.hf.HfModel, texts: list[str], labels: list[int]) -> float:
    predictions = model.predict(texts)
    names = [LABELS[y] for y in labels]
    return sum(p[0][0] == y for p, y in zip(predictions, names, strict=True)) / len(texts)


def train_setup_head(model: fl.hf.HfModel, texts, labels, steps: int, batch: int) -> list[float]:
    """Your loop: fl.Trainer.setup_head, forward, loss, backward, model.step()."""
    model.freeze("embeddings")
    fl.Trainer.setup_head(
        model,
        lambda groups: torch.optim.AdamW(groups, lr=1e-3),
        param_groups={"encoder": 1e-3, "head": 3e-3},
    )
    losses = []
    for step in range(steps):
        lo = (step * batch) % len(texts)
        enc = model.tokenizer.encode(texts[lo : lo + batch])
        target = torch.tensor(labels[lo : lo + batch], device=model.device)
        loss = F.cross_entropy(model(**enc.inputs(model.device)), target)
        loss.backward()
        model.step()
        losses.append(loss.item())
    model.eval()
    return losses


def load_on(model_path: Path, init_head: bool, device) -> fl.hf.HfModel:
    """The model factory of the builder path: each rank loads the checkpoint on its device (a
    new head starts the same on every rank: rank 0's weights are copied to all anyway)."""
    torch.manual_seed(0)
    return load(model_path, init_head, device)


def classification_step(model: fl.hf.HfModel, batch) -> torch.Tensor:
    ids, mask, target = batch
    return F.cross_entropy(model(ids, attention_mask=mask), target)


def adamw(params) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=2e-3)


def train_builder(
    model_path: Path, init_head: bool, texts, labels, epochs: int, batch: int, ranks: int
):
    """The framework's loop: fl.Trainer.builder over the tokenized dataset (``ranks`` CPU
    processes when > 1; the factories are module-level so spawned ranks can import them)."""
    tokenizer = fl.hf.HfTokenizer.from_file(model_path)
    enc = tokenizer.encode(texts)
    factory = functools.partial(load_on, model_path, init_head)
    builder = (
        fl.Trainer.builder(factory, adamw, classification_step)
        .dataset((enc.input_ids, enc.attention_mask, torch.tensor(labels)))
        .batch_size(batch)
        .num_epochs(epochs)
    )
    if ranks > 1:
        builder.devices(["cpu"] * ranks)
    handle = builder.run()
    for metrics in iter(handle.next_metrics, None):
        print(f"epoch {metrics.epoch}: loss {metrics.avg_loss:.4f}")
    model = handle.join().load_into(load_on(model_path, init_head, "cpu"))
    print(f"trained on {handle.world_size} rank(s)")
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a model directory or hub id (default: a tiny BERT)")
    parser.add_argument("--init-head", action="store_true", help="the checkpoint has no head")
    parser.add_argument("--out", default="hf-finetune-output", help="where to write models")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--builder", action="store_true", help="train with fl.Trainer.builder")
    parser.add_argument("--ranks", type=int, default=1, help="with --builder: CPU processes")
    args = parser.parse_args()
    out = Path(args.out)
    model_path = Path(args.model) if args.model else make_tiny_model(out / "base")
    texts, labels = synthetic_dataset(512)
    test_texts, test_labels = synthetic_dataset(128, seed=1)

    if args.builder:
        epochs = max(1, args.steps * args.batch // len(texts))
        model = train_builder(
            model_path, args.init_head, texts, labels, epochs, args.batch, args.ranks
        )
    else:
        model = load(model_path, args.init_head)
        print(f"accuracy before: {accuracy(model, test_texts, test_labels):.2f}")
        losses = train_setup_head(model, texts, labels, args.steps, args.batch)
        print(f"loss: first {losses[0]:.4f} last {sum(losses[-5:]) / 5:.4f}")
    print(f"accuracy after: {accuracy(model, test_texts, test_labels):.2f}")
    print("predict:", model.predict(["the movie was really wonderful"])[0])
    exported = model.save_pretrained(out / "finetuned")
    config = json.loads((exported / "config.json").read_text())
    print(f"exported {config['architectures'][0]} to {exported}")


if __name__ == "__main__":
    main()
