"""``HfModel``: a HuggingFace encoder as an ``fl.Graph``, and its task-specific subclasses.

A model is built by :class:`~flodl.hf.families.Family` with ``FlowBuilder`` and then given one of
the classes below, which add the HuggingFace conveniences on top of everything a Graph does
(label paths, freezing, checkpoints, observation): ``from_pretrained``, ``save_pretrained``, the
``model(input_ids, attention_mask=None, token_type_ids=None)`` call, and ``predict`` /
``fill_mask`` through the model's tokenizer.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch

from flodl.graph.graph import Graph
from flodl.hf import hub
from flodl.hf.errors import HfConfigError, HfError, HfHubError, TokenizerError
from flodl.hf.families import FAMILIES, Family, family_of
from flodl.hf.tokenizer import HfTokenizer
from flodl.hf.weights import LoadReport, export_tensors, load_into

_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}


def _read_config(source: dict[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    if isinstance(source, dict):
        return dict(source)
    path = Path(source)
    if path.is_dir():
        path = path / hub.CONFIG
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise HfConfigError(f"cannot read {path}: {err}") from err
    if not isinstance(raw, dict):
        raise HfConfigError(f"{path} is not a JSON object")
    return raw


Labels = Mapping[int, str] | Sequence[str]


def _with_labels(
    raw: dict[str, Any], head_kind: str, owner: str, num_labels: int | None, id2label: Any
) -> dict[str, Any]:
    """``raw`` with the classification labels asked for (``transformers``' ``num_labels=`` and
    ``id2label=``): ``id2label`` names them (a list, or a mapping of 0..N-1), ``num_labels`` alone
    gives ``LABEL_<i>`` names; both must agree."""
    if num_labels is None and id2label is None:
        return raw
    if head_kind not in ("seqcls", "tokcls"):
        raise HfConfigError(
            f"{owner}: num_labels and id2label set a classification head's labels; this model "
            "has no such head (use a ...ForSequenceClassification or ...ForTokenClassification)"
        )
    if num_labels is not None and (
        isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1
    ):
        raise HfConfigError(f"{owner}: num_labels must be an integer >= 1, got {num_labels!r}")
    if id2label is None:
        names = {i: f"LABEL_{i}" for i in range(int(num_labels or 0))}
    else:
        if isinstance(id2label, str) or not isinstance(id2label, Mapping | Sequence):
            raise HfConfigError(
                f"{owner}: id2label must be a list of names or a mapping index -> name, got "
                f"{type(id2label).__name__}"
            )
        items = id2label.items() if isinstance(id2label, Mapping) else enumerate(id2label)
        try:
            names = {int(i): str(name) for i, name in items}
        except (TypeError, ValueError):
            raise HfConfigError(f"{owner}: id2label's indices must be integers") from None
        if sorted(names) != list(range(len(names))) or not names:
            raise HfConfigError(
                f"{owner}: id2label must name the labels 0..N-1 once each, got indices "
                f"{sorted(names)}"
            )
        if num_labels is not None and num_labels != len(names):
            raise HfConfigError(
                f"{owner}: num_labels={num_labels} but id2label names {len(names)} labels"
            )
    out = dict(raw)
    out["num_labels"] = len(names)
    out["id2label"] = {str(i): name for i, name in names.items()}
    out["label2id"] = {name: i for i, name in names.items()}
    return out


class HfModel(Graph):
    """Base class of every ``flodl.hf`` model (an ``fl.Graph``); use a task class or an Auto class.

    Label paths: ``embeddings``, ``encoder``, ``encoder.layer_<i>``, ``head`` (see docs/hf.md).

    >>> import torch, flodl as fl, flodl.hf
    >>> config = {"model_type": "bert", "vocab_size": 30, "hidden_size": 8,
    ...           "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 16,
    ...           "id2label": {"0": "no", "1": "yes"}}
    >>> model = fl.hf.AutoModelForSequenceClassification.from_config(config)
    >>> type(model).__name__, isinstance(model, fl.Graph)
    ('BertForSequenceClassification', True)
    >>> model(torch.tensor([[2, 5, 7, 3]])).shape
    torch.Size([1, 2])
    >>> model.freeze("embeddings") > 0, model.validate_path("encoder.layer_1").kind.name
    (True, 'TAG')
    """

    head_kind: ClassVar[str] = "base"
    family_type: ClassVar[str | None] = None  # set on the per-family classes

    config: dict[str, Any]
    tokenizer: HfTokenizer | None
    load_report: LoadReport | None

    # ------------------------------------------------------------------ construction
    @classmethod
    def _family_for(cls, raw: dict[str, Any]) -> Family:
        family = family_of(raw)
        if cls.family_type is not None and family.model_type != cls.family_type:
            raise HfConfigError(
                f"{cls.__name__} loads model_type {cls.family_type!r}, but config.json says "
                f"{family.model_type!r}; use {family.class_name(cls.head_kind)} or the Auto class"
            )
        return family

    @classmethod
    def _build(cls, raw: dict[str, Any]) -> HfModel:
        family = cls._family_for(raw)
        target = model_class(family.model_type, cls.head_kind)
        cfg = family.config(raw)
        graph = family.build(cfg, cls.head_kind)
        graph.__class__ = target
        model: HfModel = graph  # type: ignore[assignment]
        model.config = dict(raw)
        model.tokenizer = None
        model.load_report = None
        return model

    @classmethod
    def from_config(
        cls, config: dict[str, Any] | str | os.PathLike[str], *, device: Any = None,
        dtype: torch.dtype | None = None, num_labels: int | None = None,
        id2label: Labels | None = None,
    ) -> HfModel:  # fmt: skip
        """A freshly initialised model (no weights read) from a ``config.json`` dict or path;
        ``num_labels`` / ``id2label`` set a classification head's labels over the config's."""
        raw = _with_labels(_read_config(config), cls.head_kind, cls.__name__, num_labels, id2label)
        model = cls._build(raw)
        return model.to(device=device, dtype=dtype)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike[str],
        *,
        revision: str | None = None,
        device: Any = None,
        dtype: torch.dtype | None = None,
        init_head: bool = False,
        num_labels: int | None = None,
        id2label: Labels | None = None,
    ) -> HfModel:
        """Load a model directory or hub id (``config.json`` + ``model.safetensors``
        [+ ``tokenizer.json``]).

        Every key and shape is checked before any weight is written; missing keys and shape
        mismatches raise :class:`~flodl.hf.errors.WeightsError`, extra keys are reported in
        ``model.load_report.unexpected``. ``init_head=True`` starts the task head from a fresh
        initialisation where the checkpoint has none (a base checkpoint, for fine-tuning) or
        one of other shapes (another label count). ``num_labels`` / ``id2label`` (a list of
        names, or index -> name) set a classification head's labels over ``config.json``'s, as
        in ``transformers``. ``dtype`` defaults to the checkpoint's; the model is returned in
        eval mode, like ``transformers``.
        """
        files = hub.resolve(name_or_path, revision)
        return cls._from_files(
            files,
            device=device,
            dtype=dtype,
            init_head=init_head,
            labels=(num_labels, id2label),
        )

    @classmethod
    def _from_files(
        cls,
        files: hub.ModelFiles,
        *,
        device: Any,
        dtype: torch.dtype | None,
        init_head: bool,
        labels: tuple[int | None, Any] = (None, None),
    ) -> HfModel:
        name_or_path = files.source
        raw = _with_labels(_read_config(files.config), cls.head_kind, cls.__name__, *labels)
        if not files.weights:
            hint = (
                f"; it has {hub.LEGACY_WEIGHTS}: convert it with `fdl hf convert {name_or_path}`"
                if files.legacy_weights is not None
                else ""
            )
            raise HfHubError(f"{files.source} has no {hub.WEIGHTS} (nor sharded weights){hint}")
        family = cls._family_for(raw)
        model = cls._build(raw)
        prefix = "" if cls.head_kind == "base" else family.prefix + "."
        # The bare encoder's only head is its pooler: like transformers, a checkpoint without
        # one (saved from a task model that never used it) gets a freshly initialised pooler.
        model.load_report = load_into(
            model,
            family,
            files.weights,
            prefix,
            init_head=init_head or cls.head_kind == "base",
            num_labels=(
                family.config(raw).num_labels if cls.head_kind in ("seqcls", "tokcls") else None
            ),
            source=files.source,
        )
        if files.tokenizer is not None:
            model.tokenizer = HfTokenizer.from_file(files.tokenizer)
        model.eval()
        return model.to(device=device, dtype=dtype)

    # ------------------------------------------------------------------ description
    @property
    def family(self) -> Family:
        """The architecture (``model_type``, name table...)."""
        return FAMILIES[self.config["model_type"]]

    @property
    def hf_class_name(self) -> str:
        """The ``transformers`` class this model corresponds to (``BertForMaskedLM``...)."""
        return self.family.class_name(self.head_kind)

    @property
    def id2label(self) -> dict[int, str]:
        """Class index → label name, from ``config.json`` (``LABEL_<i>`` when it has none)."""
        return self.family.config(self.config).id2label

    # ------------------------------------------------------------------ running
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> Any:
        """``model(input_ids, attention_mask=None, token_type_ids=None)`` (``[B, S]`` ints).

        A missing mask attends to every token; missing token types are zeros (families without
        segment embeddings ignore them)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        return self._forward_fn(
            self, input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )

    @contextlib.contextmanager
    def _inference(self) -> Iterator[None]:
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode():
                yield
        finally:
            self.train(was_training)

    def _tokenizer(self) -> HfTokenizer:
        if self.tokenizer is None:
            raise TokenizerError(
                f"{type(self).__name__} has no tokenizer: load it from a directory with "
                "tokenizer.json, or set model.tokenizer = fl.hf.HfTokenizer.from_file(path)"
            )
        return self.tokenizer

    # ------------------------------------------------------------------ export
    def save_pretrained(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``model.safetensors`` + ``config.json`` (+ ``tokenizer.json``) in HuggingFace's
        layout, which ``transformers.AutoModelFor*.from_pretrained`` loads with no missing or
        unexpected keys. Returns the directory."""
        from safetensors.torch import save_file

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        prefix = "" if self.head_kind == "base" else self.family.prefix + "."
        save_file(export_tensors(self, self.family, prefix), str(out / hub.WEIGHTS),
                  metadata={"format": "pt"})  # fmt: skip
        config = dict(self.config)
        config["architectures"] = [self.hf_class_name]
        if self.head_kind in ("seqcls", "tokcls"):
            labels = self.id2label
            config["id2label"] = {str(i): name for i, name in labels.items()}
            config["label2id"] = {name: i for i, name in labels.items()}
        dtype = next(self.parameters()).dtype
        name = next((k for k, v in _DTYPES.items() if v == dtype), None)
        if name is not None:
            config["dtype"] = name
        (out / hub.CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if self.tokenizer is not None:
            self.tokenizer.save(out / hub.TOKENIZER)
        return out

    # Every task class overrides these with its own signature; any ``HfModel`` has them, so a
    # model typed ``HfModel`` (what the Auto classes return) can be called through them.
    def predict(self, *args: Any, **kwargs: Any) -> Any:
        """The task head's prediction (``predict(texts)``, or ``predict(question, context)``
        for question answering); a model without one raises :class:`HfError`."""
        raise HfError(self._no_head("predict"))

    def fill_mask(self, *args: Any, **kwargs: Any) -> Any:
        """A masked-language-modelling head's candidates (``fill_mask(text)``); a model without
        one raises :class:`HfError`."""
        raise HfError(self._no_head("fill_mask"))

    def _no_head(self, method: str) -> str:
        return (
            f"{type(self).__name__}.{method}: this model's head ({self.head_kind!r}) has no "
            f"{method}(); load a task class such as fl.hf.AutoModelForSequenceClassification "
            "(predict) or fl.hf.AutoModelForMaskedLM (fill_mask)"
        )


class SequenceClassifierMixin:
    head_kind: ClassVar[str] = "seqcls"

    def predict(self, texts: list[str] | str, top_k: int = 1) -> list[list[tuple[str, float]]]:
        """Per text, the ``top_k`` ``(label, score)`` pairs, highest softmax score first."""
        model: HfModel = self  # type: ignore[assignment]
        texts = [texts] if isinstance(texts, str) else list(texts)
        enc = model._tokenizer().encode(texts)
        labels = model.id2label
        with model._inference():
            probs = model(**enc.inputs(model.device)).float().softmax(-1)
        k = max(1, min(top_k, probs.shape[-1]))
        scores, indices = probs.topk(k, dim=-1)
        return [
            [
                (labels.get(int(i), f"LABEL_{int(i)}"), float(s))
                for s, i in zip(row_s, row_i, strict=True)
            ]
            for row_s, row_i in zip(scores, indices, strict=True)
        ]


class TokenClassifierMixin:
    head_kind: ClassVar[str] = "tokcls"

    def predict(self, texts: list[str] | str, top_k: int = 1) -> list[list[tuple[str, str, float]]]:
        """Per text, ``(token, label, score)`` for every sub-token of the text (special and
        padding tokens left out). ``top_k`` is accepted for a uniform call; one label per
        token is returned."""
        model: HfModel = self  # type: ignore[assignment]
        texts = [texts] if isinstance(texts, str) else list(texts)
        enc = model._tokenizer().encode(texts)
        labels = model.id2label
        with model._inference():
            probs = model(**enc.inputs(model.device)).float().softmax(-1)
        scores, indices = probs.max(-1)
        out = []
        for b in range(len(texts)):
            row = []
            for t, token in enumerate(enc.tokens[b]):
                if enc.attention_mask[b, t] == 0 or enc.sequence_ids[b][t] is None:
                    continue
                i = int(indices[b, t])
                row.append((token, labels.get(i, f"LABEL_{i}"), float(scores[b, t])))
            out.append(row)
        return out


class QuestionAnsweringMixin:
    head_kind: ClassVar[str] = "qa"

    def predict(
        self, question: str, context: str, max_answer_tokens: int = 30
    ) -> tuple[str, float]:
        """The best answer span in ``context`` and its score (start × end probability over the
        context tokens); the question cannot answer itself."""
        model: HfModel = self  # type: ignore[assignment]
        enc = model._tokenizer().encode([question], pairs=[context])
        with model._inference():
            start, end = model(**enc.inputs(model.device))
        seq = enc.sequence_ids[0]
        ctx = [t for t, s in enumerate(seq) if s == 1 and enc.attention_mask[0, t] == 1]
        if not ctx:
            return "", 0.0
        index = torch.tensor(ctx)
        p_start = start[0].float().cpu()[index].softmax(-1)
        p_end = end[0].float().cpu()[index].softmax(-1)
        scores = p_start[:, None] * p_end[None, :]
        n = len(ctx)
        allowed = torch.ones(n, n, dtype=torch.bool).triu() & ~torch.ones(
            n, n, dtype=torch.bool
        ).triu(max_answer_tokens)
        scores = scores.masked_fill(~allowed, 0.0)
        best = int(scores.argmax())
        s, e = divmod(best, n)
        offsets = enc.offsets[0]
        return context[offsets[ctx[s]][0] : offsets[ctx[e]][1]], float(scores[s, e])


class MaskedLMMixin:
    head_kind: ClassVar[str] = "mlm"

    def fill_mask(self, text: str, top_k: int = 5) -> list[tuple[str, float]]:
        """The ``top_k`` ``(token, score)`` candidates for the mask token in ``text``
        (``[MASK]`` or ``<mask>``, whichever the tokenizer has)."""
        model: HfModel = self  # type: ignore[assignment]
        tok = model._tokenizer()
        candidates = [model.family.mask_token, "[MASK]", "<mask>"]
        mask = next((c for c in candidates if tok.token_to_id(c) is not None), None)
        if mask is None:
            raise TokenizerError("the tokenizer has no mask token ([MASK] or <mask>)")
        mask_id = tok.token_to_id(mask)
        assert mask_id is not None  # found among the candidates above
        enc = tok.encode([text])
        where = (enc.input_ids[0] == mask_id).nonzero().flatten()
        if len(where) == 0:
            raise TokenizerError(f"no {mask} token in {text!r}")
        with model._inference():
            logits = model(**enc.inputs(model.device))
        probs = logits[0, int(where[0])].float().softmax(-1)
        scores, ids = probs.topk(min(top_k, probs.shape[-1]))
        return [
            (tok.id_to_token(int(i)) or str(int(i)), float(s))
            for s, i in zip(scores, ids, strict=True)
        ]


# ---------------------------------------------------------------------------------- classes
_REGISTRY: dict[tuple[str, str], type[HfModel]] = {}
_MIXINS = {
    "base": (),
    "seqcls": (SequenceClassifierMixin,),
    "tokcls": (TokenClassifierMixin,),
    "qa": (QuestionAnsweringMixin,),
    "mlm": (MaskedLMMixin,),
}
_DOCS = {
    "base": "the bare encoder: returns the last hidden states ``[B, S, H]`` (the pooled first "
    "token, where the family has a pooler, is tagged ``pooled``)",
    "seqcls": "sequence classification: returns logits ``[B, num_labels]``; ``predict(texts)``",
    "tokcls": "token classification: returns logits ``[B, S, num_labels]``; ``predict(texts)``",
    "qa": "extractive question answering: returns ``(start_logits, end_logits)``, each "
    "``[B, S]``; ``predict(question, context)``",
    "mlm": "masked language modelling: returns logits ``[B, S, vocab]``; ``fill_mask(text)``",
}


def _make_class(family: Family, head: str) -> type[HfModel]:
    name = family.class_name(head)
    doc = (
        f"{family.class_prefix} {_DOCS[head]}.\n\n"
        f"An ``fl.Graph``; ``{name}.from_pretrained(name_or_path)`` loads a "
        f"``model_type: {family.model_type}`` checkpoint (see docs/hf.md)."
    )
    cls = type(name, (*_MIXINS[head], HfModel), {
        "__doc__": doc, "__module__": __name__, "head_kind": head,
        "family_type": family.model_type,
    })  # fmt: skip
    _REGISTRY[(family.model_type, head)] = cls
    return cls


def model_class(model_type: str, head: str) -> type[HfModel]:
    """The concrete class for a family and head (``("bert", "seqcls")`` →
    ``BertForSequenceClassification``)."""
    try:
        return _REGISTRY[(model_type, head)]
    except KeyError:
        raise HfConfigError(f"no {head} model for model_type {model_type!r}") from None


for _family in FAMILIES.values():
    for _head in _MIXINS:
        globals()[_family.class_name(_head)] = _make_class(_family, _head)

# The names, spelled out for readers and linters (the loop above defines them).
BertModel = _REGISTRY[("bert", "base")]
BertForSequenceClassification = _REGISTRY[("bert", "seqcls")]
BertForTokenClassification = _REGISTRY[("bert", "tokcls")]
BertForQuestionAnswering = _REGISTRY[("bert", "qa")]
BertForMaskedLM = _REGISTRY[("bert", "mlm")]
RobertaModel = _REGISTRY[("roberta", "base")]
RobertaForSequenceClassification = _REGISTRY[("roberta", "seqcls")]
RobertaForTokenClassification = _REGISTRY[("roberta", "tokcls")]
RobertaForQuestionAnswering = _REGISTRY[("roberta", "qa")]
RobertaForMaskedLM = _REGISTRY[("roberta", "mlm")]
DistilBertModel = _REGISTRY[("distilbert", "base")]
DistilBertForSequenceClassification = _REGISTRY[("distilbert", "seqcls")]
DistilBertForTokenClassification = _REGISTRY[("distilbert", "tokcls")]
DistilBertForQuestionAnswering = _REGISTRY[("distilbert", "qa")]
DistilBertForMaskedLM = _REGISTRY[("distilbert", "mlm")]
AlbertModel = _REGISTRY[("albert", "base")]
AlbertForSequenceClassification = _REGISTRY[("albert", "seqcls")]
AlbertForTokenClassification = _REGISTRY[("albert", "tokcls")]
AlbertForQuestionAnswering = _REGISTRY[("albert", "qa")]
AlbertForMaskedLM = _REGISTRY[("albert", "mlm")]
XLMRobertaModel = _REGISTRY[("xlm-roberta", "base")]
XLMRobertaForSequenceClassification = _REGISTRY[("xlm-roberta", "seqcls")]
XLMRobertaForTokenClassification = _REGISTRY[("xlm-roberta", "tokcls")]
XLMRobertaForQuestionAnswering = _REGISTRY[("xlm-roberta", "qa")]
XLMRobertaForMaskedLM = _REGISTRY[("xlm-roberta", "mlm")]
DebertaV2Model = _REGISTRY[("deberta-v2", "base")]
DebertaV2ForSequenceClassification = _REGISTRY[("deberta-v2", "seqcls")]
DebertaV2ForTokenClassification = _REGISTRY[("deberta-v2", "tokcls")]
DebertaV2ForQuestionAnswering = _REGISTRY[("deberta-v2", "qa")]
DebertaV2ForMaskedLM = _REGISTRY[("deberta-v2", "mlm")]


# ---------------------------------------------------------------------------------- auto
class _Auto:
    head_kind: ClassVar[str] = "base"

    def __init__(self) -> None:
        raise TypeError(f"use {type(self).__name__}.from_pretrained(name_or_path)")

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike[str],
        *,
        revision: str | None = None,
        device: Any = None,
        dtype: torch.dtype | None = None,
        init_head: bool = False,
        num_labels: int | None = None,
        id2label: Labels | None = None,
    ) -> HfModel:
        """Load any supported family, chosen by ``config.json``'s ``model_type`` (the options
        are :meth:`HfModel.from_pretrained`'s)."""
        files = hub.resolve(name_or_path, revision)
        family = family_of(_read_config(files.config))
        target = model_class(family.model_type, cls.head_kind)
        return target._from_files(
            files,
            device=device,
            dtype=dtype,
            init_head=init_head,
            labels=(num_labels, id2label),
        )

    @classmethod
    def from_config(
        cls, config: dict[str, Any] | str | os.PathLike[str], *, device: Any = None,
        dtype: torch.dtype | None = None, num_labels: int | None = None,
        id2label: Labels | None = None,
    ) -> HfModel:  # fmt: skip
        """A freshly initialised model of the family ``config.json``'s ``model_type`` names."""
        raw = _read_config(config)
        target = model_class(family_of(raw).model_type, cls.head_kind)
        return target.from_config(
            raw, device=device, dtype=dtype, num_labels=num_labels, id2label=id2label
        )


class AutoModel(_Auto):
    """The bare encoder of any supported family: ``AutoModel.from_pretrained(dir_or_id)``."""

    head_kind = "base"


class AutoModelForSequenceClassification(_Auto):
    """Sequence classification for any supported family (dispatch on ``model_type``)."""

    head_kind = "seqcls"


class AutoModelForTokenClassification(_Auto):
    """Token classification for any supported family (dispatch on ``model_type``)."""

    head_kind = "tokcls"


class AutoModelForQuestionAnswering(_Auto):
    """Extractive question answering for any supported family (dispatch on ``model_type``)."""

    head_kind = "qa"


class AutoModelForMaskedLM(_Auto):
    """Masked language modelling for any supported family (dispatch on ``model_type``)."""

    head_kind = "mlm"
