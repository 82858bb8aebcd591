"""Tiny local HuggingFace models and tokenizers for the flodl.hf tests (no network)."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from flodl.hf import parity

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [
    *("the", "a", "is", "of", "in", "to", "and", "paris", "france", "capital", "city"),
    *("river", "seine", "flows", "through", "where", "does", "what", "good", "bad", "great"),
    *("awful", "movie", "film", "love", "hate", "fab", "lives", "latent", "writes", "code"),
    *("rust", "python", "deep", "learning", "framework"),
]
VOCAB = SPECIAL + WORDS + ["##s", "##ing", "##ed"]


def wordpiece_tokenizer() -> Tokenizer:
    """A BERT-style WordPiece tokenizer over a few dozen words ([CLS] a [SEP] b [SEP])."""
    vocab = {token: i for i, token in enumerate(VOCAB)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.add_special_tokens(SPECIAL)  # kept whole: "[MASK]" is one token, never lowercased
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return tok


def tiny_bert(directory: Path, head: str, *, labels: list[str] | None = None, seed: int = 0,
              tokenizer: bool = True, family: str = "bert") -> Path:  # fmt: skip
    """Save a tiny random transformers model (vocab = :data:`VOCAB`) and its tokenizer.json."""
    t = parity.transformers_module()
    cfg = parity.tiny_config(family, head)
    cfg.vocab_size = len(VOCAB)
    cfg.pad_token_id = 0
    if labels is not None:
        cfg.id2label = dict(enumerate(labels))
        cfg.label2id = {name: i for i, name in enumerate(labels)}
    torch.manual_seed(seed)
    model = getattr(t, parity.HF_AUTO[head]).from_config(cfg)
    parity._randomise(model, seed)
    model.save_pretrained(directory)
    if tokenizer:
        wordpiece_tokenizer().save(str(directory / "tokenizer.json"))
    return directory
