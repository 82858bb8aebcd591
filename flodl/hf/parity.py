"""The parity matrix: every family × head against ``transformers`` on tiny random models.

For each cell a tiny random model is created locally with ``transformers`` (no download), saved
with ``save_pretrained``, loaded with ``flodl.hf``, and both are run in eval mode, fp32, on the
same padded batch: ``load_diff`` is the largest absolute difference of the outputs. The flodl
model is then exported with ``save_pretrained`` and read back by ``transformers``:
``missing``/``unexpected`` are the keys it reports and ``export_diff`` the output difference from
what ``transformers`` makes of its own checkpoint of the reference. That is the reference itself
wherever ``transformers`` reloads its own checkpoints exactly; ``reference_diff`` says how far its
own save and reload is from the reference (transformers 4 loses the tied bias of some MLM heads),
so a cell blames flodl only for what flodl's export changes.

``transformers`` is a development dependency (the reference), imported only here, and only when
the matrix runs (``fdl hf parity``, the tests).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from flodl.hf.errors import HfError

TOLERANCE = 1e-5
HF_AUTO = {
    "base": "AutoModel",
    "seqcls": "AutoModelForSequenceClassification",
    "tokcls": "AutoModelForTokenClassification",
    "qa": "AutoModelForQuestionAnswering",
    "mlm": "AutoModelForMaskedLM",
}
VOCAB = 99
NUM_LABELS = 3


@dataclass
class Cell:
    """One family × head comparison."""

    family: str
    head: str
    load_diff: float = float("nan")
    export_diff: float = float("nan")
    reference_diff: float = float("nan")  # transformers' own save and reload vs the reference
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return (
            not self.error
            and self.load_diff < TOLERANCE
            and self.export_diff < TOLERANCE
            and not self.missing
            and not self.unexpected
        )


def transformers_module() -> Any:
    """``transformers``, or an :class:`HfError` saying how to install it."""
    try:
        import transformers
    except ImportError as err:
        raise HfError(
            "the parity reference needs transformers: pip install transformers "
            "(a development dependency; flodl.hf itself never imports it)"
        ) from err
    transformers.logging.set_verbosity_error()
    with contextlib.suppress(Exception):
        transformers.utils.logging.disable_progress_bar()
    return transformers


def tiny_config(family: str, head: str) -> Any:
    """A tiny random ``transformers`` config for ``family`` (2 layers, hidden 32, 4 heads)."""
    t = transformers_module()
    labels = 2 if head == "qa" else NUM_LABELS
    common = {"vocab_size": VOCAB, "num_labels": labels}
    bert_like = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 37,
        "max_position_embeddings": 64,
    }
    if family == "bert":
        return t.BertConfig(**common, **bert_like)
    if family == "roberta":
        return t.RobertaConfig(**common, **{**bert_like, "max_position_embeddings": 70})
    if family == "xlm-roberta":
        return t.XLMRobertaConfig(**common, **{**bert_like, "max_position_embeddings": 70})
    if family == "albert":
        return t.AlbertConfig(**common, **bert_like, embedding_size=16)
    if family == "distilbert":
        return t.DistilBertConfig(**common, dim=32, n_layers=2, n_heads=4, hidden_dim=37,
                                  max_position_embeddings=64)  # fmt: skip
    if family == "deberta-v2":
        return t.DebertaV2Config(
            **common,
            **bert_like,
            relative_attention=True,
            position_buckets=16,
            max_relative_positions=-1,
            pos_att_type=["p2c", "c2p"],
            position_biased_input=False,
            norm_rel_ebd="layer_norm",
            share_att_key=True,
            type_vocab_size=0,
        )
    raise HfError(f"no tiny config for family {family!r}")


def make_reference(family: str, head: str, directory: str | os.PathLike[str], seed: int = 0) -> Any:
    """Create, save (``save_pretrained``) and return a tiny random ``transformers`` model."""
    t = transformers_module()
    torch.manual_seed(seed)
    with _quiet():
        model = getattr(t, HF_AUTO[head]).from_config(tiny_config(family, head))
        _randomise(model, seed)
        model.eval()
        model.save_pretrained(directory)
    return model


def _randomise(model: torch.nn.Module, seed: int) -> None:
    """Non-trivial values everywhere (biases and LayerNorms are 0/1 at initialisation, which
    would hide a bias or a norm wired to the wrong place)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)


def sample_inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """A padded batch of 2 × 9 token ids (the second row has 3 padding positions)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (2, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    ids[1, 6:] = 1  # RoBERTa's padding id: positions must skip it
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def outputs_of(model: Any, head: str, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """A model's outputs as a list of tensors (both flodl and transformers models)."""
    from flodl.hf.model import HfModel

    kwargs = dict(inputs)
    if "token_type_ids" not in inspect.signature(model.forward).parameters:
        kwargs.pop("token_type_ids")  # DistilBERT's forward has no such argument
    with torch.no_grad():
        if isinstance(model, HfModel):
            out = model(**inputs)
            return list(out) if isinstance(out, tuple) else [out]
        out = model(**kwargs)
    if head == "base":
        return [out.last_hidden_state]
    if head == "qa":
        return [out.start_logits, out.end_logits]
    return [out.logits]


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """The largest absolute difference between two output lists."""
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape:
            return float("inf")
        worst = max(worst, (x.float() - y.float()).abs().max().item())
    return worst


def run_cell(family: str, head: str, workdir: str | os.PathLike[str], seed: int = 0) -> Cell:
    """Compare one cell (see the module docstring); errors are recorded, not raised."""
    import flodl.hf as fh

    t = transformers_module()
    cell = Cell(family, head)
    src = Path(workdir) / f"{family}-{head}"
    out = Path(workdir) / f"{family}-{head}-export"
    try:
        reference = make_reference(family, head, src, seed)
        inputs = sample_inputs(seed)
        expected = outputs_of(reference, head, inputs)
        auto = getattr(fh, HF_AUTO[head])
        with _quiet():
            model = auto.from_pretrained(src)
        got = outputs_of(model, head, inputs)
        cell.load_diff = max_diff(got, expected)
        model.save_pretrained(out)
        with _quiet():
            back, info = getattr(t, HF_AUTO[head]).from_pretrained(out, output_loading_info=True)
            own = getattr(t, HF_AUTO[head]).from_pretrained(src)
        back.eval()
        cell.missing = sorted(info.get("missing_keys", []))
        cell.unexpected = sorted(info.get("unexpected_keys", []))
        own_outputs = outputs_of(own.eval(), head, inputs)
        cell.reference_diff = max_diff(own_outputs, expected)
        cell.export_diff = max_diff(outputs_of(back, head, inputs), own_outputs)
    except Exception as err:  # a failing cell is reported in the matrix, the others still run
        cell.error = f"{type(err).__name__}: {err}"
    return cell


def run_matrix(
    families: list[str] | None = None,
    heads: list[str] | None = None,
    workdir: str | os.PathLike[str] | None = None,
) -> list[Cell]:
    """Every cell of ``families`` × ``heads`` (all of them by default)."""
    from flodl.hf.families import FAMILIES, HEADS

    families = list(families or FAMILIES)
    heads = list(heads or HEADS)
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="flodl-hf-parity-"))
        return [run_cell(f, h, workdir) for f in families for h in heads]


@contextlib.contextmanager
def _quiet():
    """Silence transformers' and flodl.hf's progress bars and load warnings."""
    loggers = [logging.getLogger(n) for n in ("flodl.hf", "transformers")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
