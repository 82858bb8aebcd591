"""``HfTokenizer``: a ``tokenizer.json`` (the ``tokenizers`` library) producing model inputs.

One wrapper serves every family: the file carries the model's own normaliser, pre-tokenizer and
post-processor (``[CLS] ... [SEP]`` or ``<s> ... </s>``). Batches are padded to the longest text
(with the file's padding settings, else its ``[PAD]``/``<pad>`` token) and truncated to
``max_length`` when one is given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from flodl.hf.errors import TokenizerError

_PAD_CANDIDATES = ("[PAD]", "<pad>")


@dataclass
class Encoding:
    """A tokenized batch: ``input_ids``, ``attention_mask``, ``token_type_ids`` (``[B, S]``
    int64), per-text ``tokens``, ``offsets`` (character spans) and ``sequence_ids``
    (0 first text, 1 second, None for special tokens)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor
    tokens: list[list[str]]
    offsets: list[list[tuple[int, int]]]
    sequence_ids: list[list[int | None]]

    def inputs(self, device: Any = None) -> dict[str, torch.Tensor]:
        """The model's keyword inputs, moved to ``device``: ``model(**enc.inputs())``."""
        return {
            "input_ids": self.input_ids.to(device),
            "attention_mask": self.attention_mask.to(device),
            "token_type_ids": self.token_type_ids.to(device),
        }


class HfTokenizer:
    """A fast tokenizer read from ``tokenizer.json``.

    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> raw = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "hi": 2}, unk_token="[UNK]"))
    >>> raw.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> tok = HfTokenizer(raw)
    >>> tok.encode(["hi", "hi hi"]).input_ids.tolist()
    [[2, 0], [2, 2]]
    """

    def __init__(self, tokenizer: Any, max_length: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        if tokenizer.padding is None:
            pad = next((t for t in _PAD_CANDIDATES if tokenizer.token_to_id(t) is not None), None)
            if pad is not None:
                tokenizer.enable_padding(pad_id=tokenizer.token_to_id(pad), pad_token=pad)
            else:
                tokenizer.enable_padding()
        if max_length is not None:
            tokenizer.enable_truncation(max_length)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], max_length: int | None = None) -> HfTokenizer:
        """Read ``tokenizer.json`` (a file, or a directory holding one)."""
        try:
            from tokenizers import Tokenizer
        except ImportError as err:  # pragma: no cover - the hf extra installs it
            raise TokenizerError("tokenization needs tokenizers: pip install 'flodl[hf]'") from err
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.is_file():
            raise TokenizerError(f"no tokenizer file at {path}")
        return cls(Tokenizer.from_file(str(path)), max_length)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``tokenizer.json`` (the form ``transformers``' ``AutoTokenizer`` reads)."""
        self.tokenizer.save(str(path))

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    def id_to_token(self, index: int) -> str | None:
        return self.tokenizer.id_to_token(index)

    def encode(self, texts: list[str] | str, pairs: list[str] | None = None) -> Encoding:
        """Tokenize a batch (``pairs``: the second text of each pair, e.g. QA contexts)."""
        if isinstance(texts, str):
            texts = [texts]
        if pairs is not None:
            if len(pairs) != len(texts):
                raise TokenizerError(f"{len(texts)} texts but {len(pairs)} pair texts")
            batch = self.tokenizer.encode_batch(list(zip(texts, pairs, strict=True)))
        else:
            batch = self.tokenizer.encode_batch(list(texts))
        return Encoding(
            input_ids=torch.tensor([e.ids for e in batch], dtype=torch.long),
            attention_mask=torch.tensor([e.attention_mask for e in batch], dtype=torch.long),
            token_type_ids=torch.tensor([e.type_ids for e in batch], dtype=torch.long),
            tokens=[list(e.tokens) for e in batch],
            offsets=[[tuple(o) for o in e.offsets] for e in batch],
            sequence_ids=[list(e.sequence_ids) for e in batch],
        )
