"""A character-level corpus (Shakespeare-style): next-character prediction windows."""

from __future__ import annotations

from pathlib import Path

import torch

from flodl.data.datasets.base import InMemoryDataset
from flodl.data.errors import DatasetFormatError


class CharCorpus(InMemoryDataset):
    """Non-overlapping windows of ``seq_len`` characters: ``input`` and ``target`` (shifted by one).

    The vocabulary is the sorted set of characters of the text; both fields are int64
    ``[N, seq_len]`` with ``N = (len(text) - 1) // seq_len``. Pass a path (UTF-8 text file) or
    the text itself.

    >>> import flodl as fl
    >>> ds = fl.data.CharCorpus.from_text("hello world", seq_len=4)
    >>> len(ds), ds.vocab
    (2, ' dehlorw')
    >>> ds.decode(ds[0]["input"]), ds.decode(ds[0]["target"])
    ('hell', 'ello')
    """

    def __init__(self, path: str | Path, *, seq_len: int, vocab: str | None = None) -> None:
        path = Path(path)
        if not path.is_file():
            raise DatasetFormatError(f"CharCorpus: {path} does not exist")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise DatasetFormatError(f"CharCorpus: {path} is not UTF-8 text") from exc
        self._init(text, seq_len, vocab, str(path))

    @classmethod
    def from_text(cls, text: str, *, seq_len: int, vocab: str | None = None) -> CharCorpus:
        corpus = cls.__new__(cls)
        corpus._init(text, seq_len, vocab, "the text")
        return corpus

    def _init(self, text: str, seq_len: int, vocab: str | None, where: str) -> None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise DatasetFormatError(f"CharCorpus: seq_len must be an integer ≥ 1, got {seq_len!r}")
        count = (len(text) - 1) // seq_len
        if count < 1:
            raise DatasetFormatError(
                f"CharCorpus: {where} has {len(text)} characters, too few for one window of"
                f" {seq_len} plus its target — use a shorter seq_len or a longer text"
            )
        self.vocab = vocab if vocab is not None else "".join(sorted(set(text)))
        self._lookup = {ch: i for i, ch in enumerate(self.vocab)}
        missing = set(text) - self._lookup.keys()
        if missing:
            raise DatasetFormatError(
                f"CharCorpus: {where} uses characters outside the vocabulary: {sorted(missing)[:10]}"
            )
        codes = self.encode(text[: count * seq_len + 1])
        inputs = codes[: count * seq_len].reshape(count, seq_len)
        targets = codes[1 : count * seq_len + 1].reshape(count, seq_len)
        super().__init__({"input": inputs, "target": targets})

    def encode(self, text: str) -> torch.Tensor:
        """Character codes of ``text`` (int64)."""
        return torch.tensor([self._lookup[ch] for ch in text], dtype=torch.int64)

    def decode(self, codes: torch.Tensor) -> str:
        """The text of a 1-D tensor of codes."""
        return "".join(self.vocab[i] for i in codes.tolist())
