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
import shutil
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


def _config_dtype(raw: dict[str, Any]) -> torch.dtype | None:
    """The dtype ``config.json`` names: ``dtype``, else transformers 4's ``torch_dtype`` (as
    ``transformers`` 5 reads it, the one it loads a model in by default); None for none known."""
    for key in ("dtype", "torch_dtype"):
        if raw.get(key) is not None:
            return _DTYPES.get(str(raw[key]).removeprefix("torch."))
    return None


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
_REGISTRY: dict[tuple[str, str], type[HfModel]] = {}


def _check_label(owner: str, label: str | None) -> None:
    """``label=`` as ``FlowBuilder.label`` takes it: a path segment (non-empty, no dots)."""
    if label is not None and (not isinstance(label, str) or not label or "." in label):
        raise HfConfigError(
            f"{owner}: label must be a non-empty string without dots (a segment of label paths "
            f"such as 'bert.encoder'), got {label!r}"
        )


def _with_labels(
    raw: dict[str, Any], head_kind: str, owner: str, num_labels: int | None, id2label: Any
) -> dict[str, Any]:
    """``raw`` with the classification labels asked for (``transformers``' ``num_labels=`` and
    ``id2label=``): ``id2label`` names them (a list, or a mapping of 0..N-1), ``num_labels`` alone
    keeps the config's names when it has that many, else gives ``LABEL_<i>``; both must agree."""
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
        raw_names = {int(k): str(v) for k, v in (raw.get("id2label") or {}).items()}
        if sorted(raw_names) == sorted(names):  # the same count: transformers keeps the names
            names = dict(sorted(raw_names.items()))
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
    _tokenizer_files: tuple[list[Path], HfTokenizer | None]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        family_type = cls.__dict__.get("family_type")
        if family_type is not None:  # a concrete class: the one model_class() returns
            _REGISTRY[(family_type, cls.head_kind)] = cls

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
    def _build(cls, raw: dict[str, Any], label: str | None = None) -> HfModel:
        family = cls._family_for(raw)
        target = model_class(family.model_type, cls.head_kind)
        cfg = family.config(raw)
        graph = family.build(cfg, cls.head_kind)
        graph.__class__ = target
        model: HfModel = graph  # type: ignore[assignment]
        # What FlowBuilder.label would have given: nested in another graph, a labelled model is
        # its child (paths "bert.encoder...", children_graphs, tree_summary), not an anonymous
        # node. Given at creation only: a parent names its steps when it is built.
        model._label = label
        model.config = dict(raw)
        model.tokenizer = None
        model.load_report = None
        model._tokenizer_files = ([], None)
        return model

    @classmethod
    def from_config(
        cls, config: dict[str, Any] | str | os.PathLike[str], *, device: Any = None,
        dtype: torch.dtype | None = None, num_labels: int | None = None,
        id2label: Labels | None = None, label: str | None = None,
    ) -> HfModel:  # fmt: skip
        """A freshly initialised model (no weights read) from a ``config.json`` dict or path;
        ``num_labels`` / ``id2label`` set a classification head's labels over the config's,
        ``label`` the graph's label (as ``FlowBuilder.label``)."""
        _check_label(cls.__name__, label)
        raw = _with_labels(_read_config(config), cls.head_kind, cls.__name__, num_labels, id2label)
        model = cls._build(raw, label)
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
        label: str | None = None,
    ) -> HfModel:
        """Load a model directory or hub id (``config.json`` + ``model.safetensors``
        [+ ``tokenizer.json``]).

        Every key and shape is checked before any weight is written; missing keys and shape
        mismatches raise :class:`~flodl.hf.errors.WeightsError`, extra keys are reported in
        ``model.load_report.unexpected``. ``init_head=True`` starts the task head from a fresh
        initialisation where the checkpoint has none (a base checkpoint, for fine-tuning) or
        one of other shapes (another label count). ``num_labels`` / ``id2label`` (a list of
        names, or index -> name) set a classification head's labels over ``config.json``'s, as
        in ``transformers``. The whole model takes one dtype, as in ``transformers``: ``dtype``,
        else ``config.json``'s (``dtype``, or ``torch_dtype``), else the checkpoint's dominant
        floating dtype. ``label`` is the graph's label (as ``FlowBuilder.label``: nested in
        another graph, the model is then its labelled child). The model is returned in eval
        mode, like ``transformers``.
        """
        _check_label(cls.__name__, label)
        files = hub.resolve(name_or_path, revision)
        return cls._from_files(
            files,
            device=device,
            dtype=dtype,
            init_head=init_head,
            labels=(num_labels, id2label),
            label=label,
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
        label: str | None = None,
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
        model = cls._build(raw, label)
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
            # one dtype for the whole model, as transformers picks it: the argument, config.json's,
            # else the checkpoint's dominant one
            dtype=dtype if dtype is not None else _config_dtype(raw),
        )
        if files.tokenizer is not None:
            model.tokenizer = HfTokenizer.from_file(files.tokenizer)
        # carried over by save_pretrained while the model keeps the tokenizer it was loaded with
        model._tokenizer_files = (list(files.tokenizer_extras), model.tokenizer)
        model.eval()
        return model.to(device=device)

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
        if input_ids.dim() != 2:
            hint = " add a batch dimension: ids.unsqueeze(0)" if input_ids.dim() == 1 else ""
            raise HfError(
                f"{type(self).__name__} expects input_ids of shape [batch, seq], got "
                f"{list(input_ids.shape)};{hint or ' reshape it to [batch, seq]'}"
            )
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
        unexpected keys; the source's other tokenizer files (``tokenizer_config.json``,
        ``special_tokens_map.json``, vocabularies) come along while the model keeps the tokenizer
        it was loaded with. Returns the directory."""
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
        # one dtype: transformers 4 wrote (and reads) torch_dtype, transformers 5 dtype; a stale
        # one would load the export in the source's dtype
        for key in ("dtype", "torch_dtype"):
            if name is None:
                config.pop(key, None)
            elif key == "dtype" or key in config:
                config[key] = name
        (out / hub.CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if self.tokenizer is not None:
            self.tokenizer.save(out / hub.TOKENIZER)
        extras, loaded_with = getattr(self, "_tokenizer_files", ([], None))
        if self.tokenizer is loaded_with:
            for path in extras:
                target = out / path.name
                if path.is_file() and not (target.exists() and target.samefile(path)):
                    shutil.copyfile(path, target)
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
        """Per text, the ``top_k`` ``(label, score)`` pairs, highest score first.

        Scores as ``transformers``' text-classification pipeline gives them: the logits as they
        are for ``problem_type: regression``, a sigmoid per label for
        ``multi_label_classification`` or a single label, a softmax otherwise."""
        model: HfModel = self  # type: ignore[assignment]
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts:
            return []
        enc = model._tokenizer().encode(texts)
        labels = model.id2label
        problem = model.config.get("problem_type")
        with model._inference():
            logits = model(**enc.inputs(model.device)).float()
        if problem == "regression":
            probs = logits
        elif problem == "multi_label_classification" or logits.shape[-1] == 1:
            probs = logits.sigmoid()
        else:
            probs = logits.softmax(-1)
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
        if not texts:
            return []
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
# One class per family and head, written out (not made in a loop) so that readers, type checkers
# and `fdl api-ref` see them as the classes they are; each registers itself (__init_subclass__).


def model_class(model_type: str, head: str) -> type[HfModel]:
    """The concrete class for a family and head (``("bert", "seqcls")`` →
    ``BertForSequenceClassification``)."""
    try:
        return _REGISTRY[(model_type, head)]
    except KeyError:
        raise HfConfigError(f"no {head} model for model_type {model_type!r}") from None


class BertModel(HfModel):
    """BERT bare encoder: returns the last hidden states ``[B, S, H]``.

    The pooled first token is tagged ``pooled``. An ``fl.Graph``;
    ``BertModel.from_pretrained(name_or_path)`` loads a ``model_type: bert`` checkpoint (see
    docs/hf.md).
    """

    family_type = "bert"


class BertForSequenceClassification(SequenceClassifierMixin, HfModel):
    """BERT sequence classification: returns logits ``[B, num_labels]``.

    ``predict(texts, top_k=1)`` gives each text's ``(label, score)`` pairs. An ``fl.Graph``;
    ``BertForSequenceClassification.from_pretrained(name_or_path)`` loads a ``model_type: bert``
    checkpoint (see docs/hf.md).
    """

    family_type = "bert"


class BertForTokenClassification(TokenClassifierMixin, HfModel):
    """BERT token classification: returns logits ``[B, S, num_labels]``.

    ``predict(texts)`` gives each sub-token's ``(token, label, score)``. An ``fl.Graph``;
    ``BertForTokenClassification.from_pretrained(name_or_path)`` loads a ``model_type: bert``
    checkpoint (see docs/hf.md).
    """

    family_type = "bert"


class BertForQuestionAnswering(QuestionAnsweringMixin, HfModel):
    """BERT extractive question answering: returns ``(start_logits, end_logits)``.

    Each is ``[B, S]``; ``predict(question, context)`` gives ``(answer, score)``. An
    ``fl.Graph``; ``BertForQuestionAnswering.from_pretrained(name_or_path)`` loads a
    ``model_type: bert`` checkpoint (see docs/hf.md).
    """

    family_type = "bert"


class BertForMaskedLM(MaskedLMMixin, HfModel):
    """BERT masked language modelling: returns logits ``[B, S, vocab]``.

    ``fill_mask(text, top_k=5)`` gives the mask token's ``(token, score)`` candidates. An
    ``fl.Graph``; ``BertForMaskedLM.from_pretrained(name_or_path)`` loads a ``model_type: bert``
    checkpoint (see docs/hf.md).
    """

    family_type = "bert"


class RobertaModel(HfModel):
    """RoBERTa bare encoder: returns the last hidden states ``[B, S, H]``.

    The pooled first token is tagged ``pooled``. An ``fl.Graph``;
    ``RobertaModel.from_pretrained(name_or_path)`` loads a ``model_type: roberta`` checkpoint
    (see docs/hf.md).
    """

    family_type = "roberta"


class RobertaForSequenceClassification(SequenceClassifierMixin, HfModel):
    """RoBERTa sequence classification: returns logits ``[B, num_labels]``.

    ``predict(texts, top_k=1)`` gives each text's ``(label, score)`` pairs. An ``fl.Graph``;
    ``RobertaForSequenceClassification.from_pretrained(name_or_path)`` loads a ``model_type:
    roberta`` checkpoint (see docs/hf.md).
    """

    family_type = "roberta"


class RobertaForTokenClassification(TokenClassifierMixin, HfModel):
    """RoBERTa token classification: returns logits ``[B, S, num_labels]``.

    ``predict(texts)`` gives each sub-token's ``(token, label, score)``. An ``fl.Graph``;
    ``RobertaForTokenClassification.from_pretrained(name_or_path)`` loads a ``model_type:
    roberta`` checkpoint (see docs/hf.md).
    """

    family_type = "roberta"


class RobertaForQuestionAnswering(QuestionAnsweringMixin, HfModel):
    """RoBERTa extractive question answering: returns ``(start_logits, end_logits)``.

    Each is ``[B, S]``; ``predict(question, context)`` gives ``(answer, score)``. An
    ``fl.Graph``; ``RobertaForQuestionAnswering.from_pretrained(name_or_path)`` loads a
    ``model_type: roberta`` checkpoint (see docs/hf.md).
    """

    family_type = "roberta"


class RobertaForMaskedLM(MaskedLMMixin, HfModel):
    """RoBERTa masked language modelling: returns logits ``[B, S, vocab]``.

    ``fill_mask(text, top_k=5)`` gives the mask token's ``(token, score)`` candidates. An
    ``fl.Graph``; ``RobertaForMaskedLM.from_pretrained(name_or_path)`` loads a ``model_type:
    roberta`` checkpoint (see docs/hf.md).
    """

    family_type = "roberta"


class DistilBertModel(HfModel):
    """DistilBERT bare encoder: returns the last hidden states ``[B, S, H]``.

    An ``fl.Graph``; ``DistilBertModel.from_pretrained(name_or_path)`` loads a ``model_type:
    distilbert`` checkpoint (see docs/hf.md).
    """

    family_type = "distilbert"


class DistilBertForSequenceClassification(SequenceClassifierMixin, HfModel):
    """DistilBERT sequence classification: returns logits ``[B, num_labels]``.

    ``predict(texts, top_k=1)`` gives each text's ``(label, score)`` pairs. An ``fl.Graph``;
    ``DistilBertForSequenceClassification.from_pretrained(name_or_path)`` loads a ``model_type:
    distilbert`` checkpoint (see docs/hf.md).
    """

    family_type = "distilbert"


class DistilBertForTokenClassification(TokenClassifierMixin, HfModel):
    """DistilBERT token classification: returns logits ``[B, S, num_labels]``.

    ``predict(texts)`` gives each sub-token's ``(token, label, score)``. An ``fl.Graph``;
    ``DistilBertForTokenClassification.from_pretrained(name_or_path)`` loads a ``model_type:
    distilbert`` checkpoint (see docs/hf.md).
    """

    family_type = "distilbert"


class DistilBertForQuestionAnswering(QuestionAnsweringMixin, HfModel):
    """DistilBERT extractive question answering: returns ``(start_logits, end_logits)``.

    Each is ``[B, S]``; ``predict(question, context)`` gives ``(answer, score)``. An
    ``fl.Graph``; ``DistilBertForQuestionAnswering.from_pretrained(name_or_path)`` loads a
    ``model_type: distilbert`` checkpoint (see docs/hf.md).
    """

    family_type = "distilbert"


class DistilBertForMaskedLM(MaskedLMMixin, HfModel):
    """DistilBERT masked language modelling: returns logits ``[B, S, vocab]``.

    ``fill_mask(text, top_k=5)`` gives the mask token's ``(token, score)`` candidates. An
    ``fl.Graph``; ``DistilBertForMaskedLM.from_pretrained(name_or_path)`` loads a ``model_type:
    distilbert`` checkpoint (see docs/hf.md).
    """

    family_type = "distilbert"


class AlbertModel(HfModel):
    """ALBERT bare encoder: returns the last hidden states ``[B, S, H]``.

    The pooled first token is tagged ``pooled``. An ``fl.Graph``;
    ``AlbertModel.from_pretrained(name_or_path)`` loads a ``model_type: albert`` checkpoint (see
    docs/hf.md).
    """

    family_type = "albert"


class AlbertForSequenceClassification(SequenceClassifierMixin, HfModel):
    """ALBERT sequence classification: returns logits ``[B, num_labels]``.

    ``predict(texts, top_k=1)`` gives each text's ``(label, score)`` pairs. An ``fl.Graph``;
    ``AlbertForSequenceClassification.from_pretrained(name_or_path)`` loads a ``model_type:
    albert`` checkpoint (see docs/hf.md).
    """

    family_type = "albert"


class AlbertForTokenClassification(TokenClassifierMixin, HfModel):
    """ALBERT token classification: returns logits ``[B, S, num_labels]``.

    ``predict(texts)`` gives each sub-token's ``(token, label, score)``. An ``fl.Graph``;
    ``AlbertForTokenClassification.from_pretrained(name_or_path)`` loads a ``model_type:
    albert`` checkpoint (see docs/hf.md).
    """

    family_type = "albert"


class AlbertForQuestionAnswering(QuestionAnsweringMixin, HfModel):
    """ALBERT extractive question answering: returns ``(start_logits, end_logits)``.

    Each is ``[B, S]``; ``predict(question, context)`` gives ``(answer, score)``. An
    ``fl.Graph``; ``AlbertForQuestionAnswering.from_pretrained(name_or_path)`` loads a
    ``model_type: albert`` checkpoint (see docs/hf.md).
    """

    family_type = "albert"


class AlbertForMaskedLM(MaskedLMMixin, HfModel):
    """ALBERT masked language modelling: returns logits ``[B, S, vocab]``.

    ``fill_mask(text, top_k=5)`` gives the mask token's ``(token, score)`` candidates. An
    ``fl.Graph``; ``AlbertForMaskedLM.from_pretrained(name_or_path)`` loads a ``model_type:
    albert`` checkpoint (see docs/hf.md).
    """

    family_type = "albert"


class XLMRobertaModel(HfModel):
    """XLM-RoBERTa bare encoder: returns the last hidden states ``[B, S, H]``.

    The pooled first token is tagged ``pooled``. An ``fl.Graph``;
    ``XLMRobertaModel.from_pretrained(name_or_path)`` loads a ``model_type: xlm-roberta``
    checkpoint (see docs/hf.md).
    """

    family_type = "xlm-roberta"


class XLMRobertaForSequenceClassification(SequenceClassifierMixin, HfModel):
    """XLM-RoBERTa sequence classification: returns logits ``[B, num_labels]``.

    ``predict(texts, top_k=1)`` gives each text's ``(label, score)`` pairs. An ``fl.Graph``;
    ``XLMRobertaForSequenceClassification.from_pretrained(name_or_path)`` loads a ``model_type:
    xlm-roberta`` checkpoint (see docs/hf.md).
    """

    family_type = "xlm-roberta"


class XLMRobertaForTokenClassification(TokenClassifierMixin, HfModel):
    """XLM-RoBERTa token classification: returns logits ``[B, S, num_labels]``.

    ``predict(texts)`` gives each sub-token's ``(token, label, score)``. An ``fl.Graph``;
    ``XLMRobertaForTokenClassification.from_pretrained(name_or_path)`` loads a ``model_type:
    xlm-roberta`` checkpoint (see docs/hf.md).
    """

    family_type = "xlm-roberta"


class XLMRobertaForQuestionAnswering(QuestionAnsweringMixin, HfModel):
    """XLM-RoBERTa extractive question answering: returns ``(start_logits, end_logits)``.

    Each is ``[B, S]``; ``predict(question, context)`` gives ``(answer, score)``. An
    ``fl.Graph``; ``XLMRobertaForQuestionAnswering.from_pretrained(name_or_path)`` loads a
    ``model_type: xlm-roberta`` checkpoint (see docs/hf.md).
    """

    family_type = "xlm-roberta"


class XLMRobertaForMaskedLM(MaskedLMMixin, HfModel):
    """XLM-RoBERTa masked language modelling: returns logits ``[B, S, vocab]``.

    ``fill_mask(text, top_k=5)`` gives the mask token's ``(token, score)`` candidates. An
    ``fl.Graph``; ``XLMRobertaForMaskedLM.from_pretrained(name_or_path)`` loads a ``model_type:
    xlm-roberta`` checkpoint (see docs/hf.md).
    """

    family_type = "xlm-roberta"


class DebertaV2Model(HfModel):
    """DeBERTa-v2 bare encoder: returns the last hidden states ``[B, S, H]``.

    An ``fl.Graph``; ``DebertaV2Model.from_pretrained(name_or_path)`` loads a ``model_type:
    deberta-v2`` checkpoint (see docs/hf.md).
    """

    family_type = "deberta-v2"


class DebertaV2ForSequenceClassification(SequenceClassifierMixin, HfModel):
    """DeBERTa-v2 sequence classification: returns logits ``[B, num_labels]``.

    ``predict(texts, top_k=1)`` gives each text's ``(label, score)`` pairs. An ``fl.Graph``;
    ``DebertaV2ForSequenceClassification.from_pretrained(name_or_path)`` loads a ``model_type:
    deberta-v2`` checkpoint (see docs/hf.md).
    """

    family_type = "deberta-v2"


class DebertaV2ForTokenClassification(TokenClassifierMixin, HfModel):
    """DeBERTa-v2 token classification: returns logits ``[B, S, num_labels]``.

    ``predict(texts)`` gives each sub-token's ``(token, label, score)``. An ``fl.Graph``;
    ``DebertaV2ForTokenClassification.from_pretrained(name_or_path)`` loads a ``model_type:
    deberta-v2`` checkpoint (see docs/hf.md).
    """

    family_type = "deberta-v2"


class DebertaV2ForQuestionAnswering(QuestionAnsweringMixin, HfModel):
    """DeBERTa-v2 extractive question answering: returns ``(start_logits, end_logits)``.

    Each is ``[B, S]``; ``predict(question, context)`` gives ``(answer, score)``. An
    ``fl.Graph``; ``DebertaV2ForQuestionAnswering.from_pretrained(name_or_path)`` loads a
    ``model_type: deberta-v2`` checkpoint (see docs/hf.md).
    """

    family_type = "deberta-v2"


class DebertaV2ForMaskedLM(MaskedLMMixin, HfModel):
    """DeBERTa-v2 masked language modelling: returns logits ``[B, S, vocab]``.

    ``fill_mask(text, top_k=5)`` gives the mask token's ``(token, score)`` candidates. An
    ``fl.Graph``; ``DebertaV2ForMaskedLM.from_pretrained(name_or_path)`` loads a ``model_type:
    deberta-v2`` checkpoint (see docs/hf.md).
    """

    family_type = "deberta-v2"


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
        label: str | None = None,
    ) -> HfModel:
        """Load any supported family, chosen by ``config.json``'s ``model_type`` (the options
        are :meth:`HfModel.from_pretrained`'s)."""
        _check_label(cls.__name__, label)
        files = hub.resolve(name_or_path, revision)
        family = family_of(_read_config(files.config))
        target = model_class(family.model_type, cls.head_kind)
        return target._from_files(
            files,
            device=device,
            dtype=dtype,
            init_head=init_head,
            labels=(num_labels, id2label),
            label=label,
        )

    @classmethod
    def from_config(
        cls, config: dict[str, Any] | str | os.PathLike[str], *, device: Any = None,
        dtype: torch.dtype | None = None, num_labels: int | None = None,
        id2label: Labels | None = None, label: str | None = None,
    ) -> HfModel:  # fmt: skip
        """A freshly initialised model of the family ``config.json``'s ``model_type`` names."""
        raw = _read_config(config)
        target = model_class(family_of(raw).model_type, cls.head_kind)
        return target.from_config(
            raw, device=device, dtype=dtype, num_labels=num_labels, id2label=id2label, label=label
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
