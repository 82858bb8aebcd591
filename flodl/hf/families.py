"""The six architectures: how each reads ``config.json``, builds its graph, and names its weights.

Every model is one ``fl.Graph`` with the same label paths whatever the family::

    embeddings            the embedding module (word, position, token-type, LayerNorm)
    encoder               a labelled child graph; its input ``attention_mask``
    encoder.layer_<i>     layer i (ALBERT: every layer is the one shared ``encoder.layer_0``)
    head                  a labelled child graph: pooler, classifier, span or vocabulary head
                          (absent from the bare DistilBERT and DeBERTa-v2 encoders: no pooler)

Each family's **name table** (:attr:`Family.table`) maps graph parameter names to the names
``transformers`` writes. Rows are prefixes; ``{i}`` is a layer index and ``{p}`` the backbone
prefix (``bert.``, ``roberta.``... for task heads, empty for the bare encoder). The first row
whose graph prefix matches a name rewrites it; see docs/hf.md for the tables in full.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from flodl.graph.builder import FlowBuilder
from flodl.graph.graph import Graph
from flodl.hf import deberta as D
from flodl.hf import layers as L
from flodl.hf.errors import HfConfigError

HEADS = ("base", "seqcls", "tokcls", "qa", "mlm")
HEAD_CLASS_SUFFIX = {
    "base": "Model",
    "seqcls": "ForSequenceClassification",
    "tokcls": "ForTokenClassification",
    "qa": "ForQuestionAnswering",
    "mlm": "ForMaskedLM",
}


# ---------------------------------------------------------------------------------- config
class Config:
    """``config.json`` as read: ``raw`` is the dict, the attributes the normalised fields."""

    def __init__(
        self,
        raw: dict[str, Any],
        aliases: dict[str, str] | None = None,
        defaults: dict[str, Any] | None = None,
    ) -> None:
        self.raw = dict(raw)
        self._aliases = aliases or {}
        # What the family's transformers config class assumes for a key config.json leaves out
        # (keyed by the config.json name): a checkpoint must build the same model either way.
        self._defaults = defaults or {}

    def get(self, key: str, default: Any = None) -> Any:
        key = self._aliases.get(key, key)
        value = self.raw.get(key)
        if value is None:
            value = self._defaults.get(key, default)
        return default if value is None else value

    def need(self, key: str) -> Any:
        real = self._aliases.get(key, key)
        value = self.get(key)
        if value is None:
            mt = self.raw.get("model_type", "?")
            raise HfConfigError(f"config.json ({mt}) has no {real!r}, which this model needs")
        return value

    # the fields every family has, under its own names
    @property
    def dim(self) -> int:
        return int(self.need("hidden_size"))

    @property
    def layers(self) -> int:
        return int(self.need("num_hidden_layers"))

    @property
    def heads(self) -> int:
        return int(self.need("num_attention_heads"))

    @property
    def inner(self) -> int:
        return int(self.need("intermediate_size"))

    @property
    def act(self) -> str:
        return str(self.get("hidden_act", "gelu"))

    @property
    def eps(self) -> float:
        return float(self.get("layer_norm_eps", 1e-12))

    @property
    def dropout(self) -> float:
        return float(self.get("hidden_dropout_prob", 0.1))

    @property
    def attn_dropout(self) -> float:
        return float(self.get("attention_probs_dropout_prob", 0.1))

    @property
    def vocab(self) -> int:
        return int(self.need("vocab_size"))

    @property
    def max_positions(self) -> int:
        return int(self.get("max_position_embeddings", 512))

    @property
    def type_vocab(self) -> int:
        return int(self.get("type_vocab_size", 2))

    @property
    def pad_token_id(self) -> int | None:
        # An explicit null means no padding row; a missing key is the family's default.
        value = (
            self.raw["pad_token_id"]
            if "pad_token_id" in self.raw
            else (self._defaults.get("pad_token_id"))
        )
        return None if value is None else int(value)

    @property
    def tied_decoder(self) -> bool:
        """Whether the masked-LM decoder is the word-embedding matrix (``tie_word_embeddings``)."""
        return bool(self.get("tie_word_embeddings", True))

    @property
    def init_std(self) -> float:
        return float(self.get("initializer_range", 0.02))

    @property
    def id2label(self) -> dict[int, str]:
        raw = self.raw.get("id2label") or {}
        labels = {int(k): str(v) for k, v in raw.items()}
        n = self.raw.get("num_labels")
        if n is not None and len(labels) != int(n):
            labels = {i: labels.get(i, f"LABEL_{i}") for i in range(int(n))}
        return labels or {0: "LABEL_0", 1: "LABEL_1"}

    @property
    def num_labels(self) -> int:
        return len(self.id2label)


# ---------------------------------------------------------------------------------- name tables
Table = list[tuple[str, str]]


def _pattern(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)"))


def rename(name: str, table: Table, prefix: str, *, to_hf: bool) -> str | None:
    """Map one parameter name through a name table (None when no row matches)."""
    for graph_side, hf_side in table:
        src, dst = (graph_side, hf_side) if to_hf else (hf_side, graph_side)
        src, dst = src.replace("{p}", prefix), dst.replace("{p}", prefix)
        m = _pattern(src).match(name)
        if m:
            i = m.groupdict().get("i")
            return (dst.replace("{i}", i) if i is not None else dst) + name[m.end() :]
    return None


# ---------------------------------------------------------------------------------- families
@dataclass
class Family:
    """One architecture: its ``model_type``, backbone prefix, class names and builders."""

    model_type: str
    prefix: str  # the backbone attribute in transformers' task models: bert, roberta...
    class_prefix: str  # BertModel, BertForSequenceClassification...
    config_aliases: dict[str, str]
    embeddings: Callable[[Config], nn.Module]
    layer: Callable[[Config], nn.Module]
    heads: dict[str, Callable[[Config, nn.Module], FlowBuilder | None]]
    table: Table
    encoder_entry: Callable[[Config], nn.Module] | None = None
    shared_layer: bool = False
    mask_token: str = "[MASK]"
    custom_encoder: Callable[[Config], Graph] | None = None
    embeddings_take_mask: bool = False
    table_variant: Callable[[Config], Table] | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    # An untied masked-LM decoder (tie_word_embeddings: false): the HF prefix of its own
    # weight and bias, and the head's bias that transformers ties to the decoder's (written
    # with the same values, read when the decoder's is absent); None when the layout has none.
    untied_decoder: Callable[[Config], tuple[str, str | None] | None] | None = None

    def table_for(self, raw: dict[str, Any]) -> Table:
        """The name table for this configuration (DeBERTa's MLM head has two layouts; an untied
        masked-LM decoder has its own weight)."""
        cfg = self.config(raw)
        table = self.table_variant(cfg) if self.table_variant else self.table
        untied = self.decoder_names(cfg)
        return [("head.decoder.", untied[0]), *table] if untied else table

    def decoder_names(self, cfg: Config) -> tuple[str, str | None] | None:
        """The untied decoder's HF prefix and its tied-bias alias, or None when it is tied."""
        if cfg.tied_decoder or self.untied_decoder is None:
            return None
        return self.untied_decoder(cfg)

    def class_name(self, head: str) -> str:
        return self.class_prefix + HEAD_CLASS_SUFFIX[head]

    def config(self, raw: dict[str, Any]) -> Config:
        return Config(raw, self.config_aliases, self.defaults)

    def build(self, cfg: Config, head: str) -> Graph:
        """The graph for ``head`` (one of ``base``, ``seqcls``, ``tokcls``, ``qa``, ``mlm``)."""
        embeddings = self.embeddings(cfg)
        encoder = self.custom_encoder(cfg) if self.custom_encoder else self._encoder(cfg)
        refs = {"token_type_ids": "token_type_ids"}
        if self.embeddings_take_mask:
            refs["attention_mask"] = "attention_mask"
        flow = (
            FlowBuilder()
            .input("attention_mask", "token_type_ids")
            .through(embeddings)
            .using(**refs)
            .tag("embeddings")
            .through(encoder)
            .using("attention_mask")
            .tag("hidden_states")
        )
        if head == "base":
            head_flow = self.heads["base"](cfg, embeddings)
            if head_flow is not None:
                flow = flow.fork(head_flow.label("head").build()).tag("pooled")
        else:
            head_flow = self.heads[head](cfg, embeddings)
            assert head_flow is not None
            flow = flow.through(head_flow.label("head").build())
        graph = flow.build()
        L.scaled_init(graph, cfg.init_std)
        return graph

    def _encoder(self, cfg: Config) -> Graph:
        flow = FlowBuilder(self.encoder_entry(cfg)) if self.encoder_entry else FlowBuilder()
        if self.encoder_entry:
            flow = flow.tag("embedding_hidden_mapping_in")
        flow = flow.input("attention_mask")
        shared = self.layer(cfg) if self.shared_layer else None
        for i in range(cfg.layers):
            layer = shared if shared is not None else self.layer(cfg)
            flow = flow.through(layer).using("attention_mask").tag(f"layer_{i}")
        return flow.label("encoder").build()


def _bert_embeddings(cfg: Config) -> nn.Module:
    return L.Embeddings(cfg.vocab, cfg.dim, cfg.max_positions, cfg.type_vocab, cfg.eps,
                        cfg.dropout, cfg.pad_token_id)  # fmt: skip


def _roberta_embeddings(cfg: Config) -> nn.Module:
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else 1
    return L.Embeddings(cfg.vocab, cfg.dim, cfg.max_positions, cfg.type_vocab, cfg.eps,
                        cfg.dropout, pad, roberta_positions=True)  # fmt: skip


def _check_absolute(cfg: Config) -> None:
    kind = cfg.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise HfConfigError(f"position_embedding_type {kind!r} is not supported (only 'absolute')")


def _check_encoder(cfg: Config) -> None:
    # transformers' BERT, RoBERTa and XLM-R attend causally with is_decoder (ALBERT, DistilBERT
    # and DeBERTa-v2 ignore it); these graphs attend both ways
    if cfg.get("is_decoder", False):
        raise HfConfigError(
            f"{cfg.raw.get('model_type', '?')} with is_decoder: true (causal self-attention) is "
            "not supported (only the bidirectional encoder)"
        )


def _bert_layer(cfg: Config) -> nn.Module:
    _check_absolute(cfg)
    _check_encoder(cfg)
    return L.BertLayer(cfg.dim, cfg.heads, cfg.inner, cfg.act, cfg.eps, cfg.dropout,
                       cfg.attn_dropout)  # fmt: skip


def _classifier_dropout(cfg: Config) -> float:
    return float(cfg.get("classifier_dropout", cfg.dropout))


def _pooler_head(cfg: Config, _emb: nn.Module) -> FlowBuilder:
    return FlowBuilder(L.Pooler(cfg.dim)).tag("pooler")


def _token_head(dropout: float) -> Callable[[Config, nn.Module], FlowBuilder]:
    def head(cfg: Config, _emb: nn.Module) -> FlowBuilder:
        return (
            FlowBuilder(nn.Dropout(dropout if dropout >= 0 else _classifier_dropout(cfg)))
            .through(nn.Linear(cfg.dim, cfg.num_labels))
            .tag("classifier")
        )

    return head


def _span_head(dropout_key: str | None = None) -> Callable[[Config, nn.Module], FlowBuilder]:
    def head(cfg: Config, _emb: nn.Module) -> FlowBuilder:
        p = float(cfg.get(dropout_key, 0.0)) if dropout_key else 0.0
        return (
            FlowBuilder(nn.Dropout(p))
            .through(nn.Linear(cfg.dim, 2))
            .tag("qa_outputs")
            .through(L.SplitSpan())
            .tag("span")
        )

    return head


def _decoder(cfg: Config, emb: nn.Module, in_dim: int, tied: bool) -> nn.Module:
    """The vocabulary projection: the word embeddings themselves, or (``tie_word_embeddings:
    false``) a matrix of its own, as the checkpoint has it."""
    word = emb.word_embeddings
    assert isinstance(word, nn.Embedding)
    return L.TiedDecoder(word) if tied else nn.Linear(in_dim, word.num_embeddings)


def _mlm_head(act: Callable[[Config], str], out_dim: Callable[[Config], int]):
    def head(cfg: Config, emb: nn.Module) -> FlowBuilder:
        return (
            FlowBuilder(L.Transform(cfg.dim, out_dim(cfg), act(cfg), cfg.eps))
            .tag("transform")
            .through(_decoder(cfg, emb, out_dim(cfg), cfg.tied_decoder))
            .tag("decoder")
        )

    return head


def _bert_seqcls(cfg: Config, emb: nn.Module) -> FlowBuilder:
    return (
        FlowBuilder(L.Pooler(cfg.dim))
        .tag("pooler")
        .through(nn.Dropout(_classifier_dropout(cfg)))
        .through(nn.Linear(cfg.dim, cfg.num_labels))
        .tag("classifier")
    )


# transformers' BertConfig sizes, shared by RoBERTa and XLM-R (vocab sizes differ)
_BERT_SIZES = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
}

_BERT_TABLE: Table = [
    ("embeddings.", "{p}embeddings."),
    ("encoder.layer_{i}.", "{p}encoder.layer.{i}."),
    ("head.pooler.", "{p}pooler."),
    ("head.classifier.", "classifier."),
    ("head.qa_outputs.", "qa_outputs."),
    ("head.transform.", "cls.predictions.transform."),
    ("head.decoder.bias", "cls.predictions.bias"),
]

BERT = Family(
    model_type="bert",
    prefix="bert",
    class_prefix="Bert",
    config_aliases={},
    embeddings=_bert_embeddings,
    layer=_bert_layer,
    heads={
        "base": _pooler_head,
        "seqcls": _bert_seqcls,
        "tokcls": _token_head(-1),
        "qa": _span_head(),
        "mlm": _mlm_head(lambda c: c.act, lambda c: c.dim),
    },
    table=_BERT_TABLE,
    defaults={**_BERT_SIZES, "vocab_size": 30522, "pad_token_id": 0},
    untied_decoder=lambda cfg: ("cls.predictions.decoder.", "cls.predictions.bias"),
)


def _roberta_seqcls(cfg: Config, emb: nn.Module) -> FlowBuilder:
    return FlowBuilder(
        L.RobertaClassificationHead(cfg.dim, cfg.num_labels, _classifier_dropout(cfg))
    ).tag("classifier")


_ROBERTA_TABLE: Table = [
    ("embeddings.", "{p}embeddings."),
    ("encoder.layer_{i}.", "{p}encoder.layer.{i}."),
    ("head.pooler.", "{p}pooler."),
    ("head.classifier.", "classifier."),
    ("head.qa_outputs.", "qa_outputs."),
    ("head.transform.dense.", "lm_head.dense."),
    ("head.transform.LayerNorm.", "lm_head.layer_norm."),
    ("head.decoder.bias", "lm_head.bias"),
]

_ROBERTA_HEADS: dict[str, Callable[[Config, nn.Module], FlowBuilder | None]] = {
    "base": _pooler_head,
    "seqcls": _roberta_seqcls,
    "tokcls": _token_head(-1),
    "qa": _span_head(),
    "mlm": _mlm_head(lambda c: "gelu", lambda c: c.dim),
}

ROBERTA = Family(
    model_type="roberta",
    prefix="roberta",
    class_prefix="Roberta",
    config_aliases={},
    embeddings=_roberta_embeddings,
    layer=_bert_layer,
    heads=_ROBERTA_HEADS,
    table=_ROBERTA_TABLE,
    mask_token="<mask>",
    defaults={**_BERT_SIZES, "vocab_size": 50265, "pad_token_id": 1},
    untied_decoder=lambda cfg: ("lm_head.decoder.", "lm_head.bias"),
)

XLM_ROBERTA = Family(
    model_type="xlm-roberta",
    prefix="roberta",
    class_prefix="XLMRoberta",
    config_aliases={},
    embeddings=_roberta_embeddings,
    layer=_bert_layer,
    heads=_ROBERTA_HEADS,
    table=_ROBERTA_TABLE,
    mask_token="<mask>",
    defaults={**_BERT_SIZES, "vocab_size": 30522, "pad_token_id": 1},
    untied_decoder=lambda cfg: ("lm_head.decoder.", "lm_head.bias"),
)


# DistilBERT: other config names, no token types, no pooler
_DISTIL_ALIASES = {
    "hidden_size": "dim",
    "num_hidden_layers": "n_layers",
    "num_attention_heads": "n_heads",
    "intermediate_size": "hidden_dim",
    "hidden_act": "activation",
    "hidden_dropout_prob": "dropout",
    "attention_probs_dropout_prob": "attention_dropout",
}


def _distil_embeddings(cfg: Config) -> nn.Module:
    if cfg.get("sinusoidal_pos_embds", False):
        raise HfConfigError("DistilBERT with sinusoidal_pos_embds is not supported")
    return L.Embeddings(cfg.vocab, cfg.dim, cfg.max_positions, 0, 1e-12, cfg.dropout,
                        cfg.pad_token_id)  # fmt: skip


def _distil_layer(cfg: Config) -> nn.Module:
    return L.DistilBertLayer(cfg.dim, cfg.heads, cfg.inner, cfg.act, cfg.dropout,
                             cfg.attn_dropout)  # fmt: skip


def _distil_seqcls(cfg: Config, emb: nn.Module) -> FlowBuilder:
    return (
        FlowBuilder(L.FirstToken())
        .through(nn.Linear(cfg.dim, cfg.dim))
        .tag("pre_classifier")
        .through(nn.ReLU())
        .through(nn.Dropout(float(cfg.get("seq_classif_dropout", 0.2))))
        .through(nn.Linear(cfg.dim, cfg.num_labels))
        .tag("classifier")
    )


def _distil_mlm(cfg: Config, emb: nn.Module) -> FlowBuilder:
    return (
        FlowBuilder(L.Transform(cfg.dim, cfg.dim, cfg.act, 1e-12))
        .tag("transform")
        .through(_decoder(cfg, emb, cfg.dim, cfg.tied_decoder))
        .tag("decoder")
    )


DISTILBERT = Family(
    model_type="distilbert",
    prefix="distilbert",
    class_prefix="DistilBert",
    config_aliases=_DISTIL_ALIASES,
    embeddings=_distil_embeddings,
    layer=_distil_layer,
    heads={
        "base": lambda cfg, emb: None,
        "seqcls": _distil_seqcls,
        "tokcls": lambda cfg, emb: _token_head(cfg.dropout)(cfg, emb),
        "qa": _span_head("qa_dropout"),
        "mlm": _distil_mlm,
    },
    table=[
        ("embeddings.", "{p}embeddings."),
        ("encoder.layer_{i}.", "{p}transformer.layer.{i}."),
        ("head.pre_classifier.", "pre_classifier."),
        ("head.classifier.", "classifier."),
        ("head.qa_outputs.", "qa_outputs."),
        ("head.transform.dense.", "vocab_transform."),
        ("head.transform.LayerNorm.", "vocab_layer_norm."),
        ("head.decoder.bias", "vocab_projector.bias"),
    ],
    defaults={
        "vocab_size": 30522,
        "dim": 768,
        "n_layers": 6,
        "n_heads": 12,
        "hidden_dim": 3072,
        "pad_token_id": 0,
        "qa_dropout": 0.1,
    },
    untied_decoder=lambda cfg: ("vocab_projector.", None),
)


# ALBERT: factorised embeddings, one layer shared by every depth
def _albert_embeddings(cfg: Config) -> nn.Module:
    groups, inner = int(cfg.get("num_hidden_groups", 1)), int(cfg.get("inner_group_num", 1))
    if groups != 1 or inner != 1:
        raise HfConfigError(
            f"ALBERT with num_hidden_groups={groups}, inner_group_num={inner} is not supported "
            "(only the released layout: one group of one shared layer)"
        )
    return L.Embeddings(cfg.vocab, int(cfg.need("embedding_size")), cfg.max_positions,
                        cfg.type_vocab, cfg.eps, cfg.dropout, cfg.pad_token_id)  # fmt: skip


def _albert_layer(cfg: Config) -> nn.Module:
    _check_absolute(cfg)
    return L.AlbertLayer(cfg.dim, cfg.heads, cfg.inner, cfg.act, cfg.eps, cfg.dropout,
                         cfg.attn_dropout)  # fmt: skip


def _albert_dropout(cfg: Config) -> float:
    return float(cfg.get("classifier_dropout_prob", cfg.dropout))


def _albert_seqcls(cfg: Config, emb: nn.Module) -> FlowBuilder:
    return (
        FlowBuilder(L.Pooler(cfg.dim))
        .tag("pooler")
        .through(nn.Dropout(_albert_dropout(cfg)))
        .through(nn.Linear(cfg.dim, cfg.num_labels))
        .tag("classifier")
    )


ALBERT = Family(
    model_type="albert",
    prefix="albert",
    class_prefix="Albert",
    config_aliases={},
    embeddings=_albert_embeddings,
    layer=_albert_layer,
    encoder_entry=lambda cfg: nn.Linear(int(cfg.need("embedding_size")), cfg.dim),
    shared_layer=True,
    heads={
        "base": _pooler_head,
        "seqcls": _albert_seqcls,
        "tokcls": lambda cfg, emb: _token_head(_albert_dropout(cfg))(cfg, emb),
        "qa": _span_head(),
        "mlm": _mlm_head(lambda c: c.act, lambda c: int(c.need("embedding_size"))),
    },
    table=[
        ("embeddings.", "{p}embeddings."),
        ("encoder.embedding_hidden_mapping_in.", "{p}encoder.embedding_hidden_mapping_in."),
        ("encoder.layer_0.", "{p}encoder.albert_layer_groups.0.albert_layers.0."),
        ("head.pooler.dense.", "{p}pooler."),
        ("head.classifier.", "classifier."),
        ("head.qa_outputs.", "qa_outputs."),
        ("head.decoder.bias", "predictions.bias"),
        ("head.transform.", "predictions."),
    ],
    defaults={
        "vocab_size": 30000,
        "embedding_size": 128,
        "hidden_size": 4096,
        "num_hidden_layers": 12,
        "num_attention_heads": 64,
        "intermediate_size": 16384,
        "pad_token_id": 0,
        "hidden_act": "gelu_new",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "classifier_dropout_prob": 0.1,
    },
    untied_decoder=lambda cfg: ("predictions.decoder.", "predictions.bias"),
)


# DeBERTa-v2/v3: disentangled attention, relative-position table shared by every layer
def _deberta_check(cfg: Config) -> None:
    if int(cfg.get("conv_kernel_size", 0)) > 0:
        raise HfConfigError(
            "DeBERTa-v2 with conv_kernel_size > 0 (the xlarge models' convolution layer) is not "
            "supported"
        )
    head_size = cfg.get("attention_head_size")
    if head_size is not None and int(head_size) * cfg.heads != cfg.dim:
        raise HfConfigError("DeBERTa-v2 with a custom attention_head_size is not supported")


def _deberta_relative(cfg: Config) -> tuple[bool, int, int]:
    relative = bool(cfg.get("relative_attention", False))
    max_rel = int(cfg.get("max_relative_positions", -1))
    if max_rel < 1:
        max_rel = cfg.max_positions
    buckets = int(cfg.get("position_buckets", -1))
    return relative, buckets, max_rel


def _pos_att_type(cfg: Config) -> list[str]:
    value = cfg.get("pos_att_type", [])
    if isinstance(value, str):
        value = [v.strip() for v in value.lower().split("|")]
    return [str(v) for v in value]


def _deberta_embeddings(cfg: Config) -> nn.Module:
    _deberta_check(cfg)
    return D.DebertaEmbeddings(
        cfg.vocab,
        int(cfg.get("embedding_size", cfg.dim)),
        cfg.dim,
        cfg.max_positions,
        int(cfg.get("type_vocab_size", 0)),
        bool(cfg.get("position_biased_input", True)),
        cfg.eps,
        cfg.dropout,
        cfg.pad_token_id if cfg.pad_token_id is not None else 0,
    )


def _deberta_layer(cfg: Config) -> nn.Module:
    relative, buckets, max_rel = _deberta_relative(cfg)
    attention = D.DisentangledSelfAttention(
        cfg.dim, cfg.heads, cfg.attn_dropout, cfg.dropout, _pos_att_type(cfg),
        bool(cfg.get("share_att_key", False)), relative, buckets, max_rel,
    )  # fmt: skip
    return D.DebertaLayer(attention, cfg.dim, cfg.inner, cfg.act, cfg.eps, cfg.dropout)


def _deberta_encoder(cfg: Config) -> Graph:
    relative, buckets, max_rel = _deberta_relative(cfg)
    flow = FlowBuilder().input("attention_mask")
    refs: tuple[str, ...] = ("attention_mask",)
    if relative:
        norm = "layer_norm" in str(cfg.get("norm_rel_ebd", "none")).lower()
        size = (buckets if buckets > 0 else max_rel) * 2
        table = D.RelativeEmbeddings(size, cfg.dim, cfg.eps, norm)
        flow = flow.fork(table).tag("rel_embeddings")
        refs = ("attention_mask", "rel_embeddings")
    for i in range(cfg.layers):
        flow = flow.through(_deberta_layer(cfg)).using(*refs).tag(f"layer_{i}")
    return flow.label("encoder").build()


def _deberta_seqcls(cfg: Config, emb: nn.Module) -> FlowBuilder:
    pooler_dim = int(cfg.get("pooler_hidden_size", cfg.dim))
    if pooler_dim != cfg.dim:
        raise HfConfigError("DeBERTa-v2 with pooler_hidden_size != hidden_size is not supported")
    return (
        FlowBuilder(
            D.ContextPooler(
                cfg.dim,
                str(cfg.get("pooler_hidden_act", "gelu")),
                float(cfg.get("pooler_dropout", 0.0)),
            )
        )
        .tag("pooler")
        .through(nn.Dropout(float(cfg.get("cls_dropout", cfg.dropout))))
        .through(nn.Linear(cfg.dim, cfg.num_labels))
        .tag("classifier")
    )


_DEBERTA_TABLE: Table = [
    ("embeddings.", "{p}embeddings."),
    ("encoder.rel_embeddings.embeddings.", "{p}encoder.rel_embeddings."),
    ("encoder.rel_embeddings.LayerNorm.", "{p}encoder.LayerNorm."),
    ("encoder.layer_{i}.", "{p}encoder.layer.{i}."),
    ("head.pooler.", "pooler."),
    ("head.classifier.", "classifier."),
    ("head.qa_outputs.", "qa_outputs."),
    ("head.decoder.bias", "cls.predictions.bias"),
    ("head.transform.", "cls.predictions.transform."),
]


def _deberta_table(cfg: Config) -> Table:
    if cfg.get("legacy", True):
        return _DEBERTA_TABLE
    return [
        *_DEBERTA_TABLE[:-2],
        ("head.decoder.bias", "lm_predictions.lm_head.bias"),
        ("head.transform.", "lm_predictions.lm_head."),
    ]


def _deberta_mlm(cfg: Config, emb: nn.Module) -> FlowBuilder:
    legacy = cfg.get("legacy", True)
    out = int(cfg.get("embedding_size", cfg.dim)) if legacy else cfg.dim
    # the v3 layout always multiplies by the word embeddings, whatever tie_word_embeddings says
    tied = cfg.tied_decoder or not legacy
    return (
        FlowBuilder(L.Transform(cfg.dim, out, cfg.act, cfg.eps))
        .tag("transform")
        .through(_decoder(cfg, emb, out, tied))
        .tag("decoder")
    )


DEBERTA_V2 = Family(
    model_type="deberta-v2",
    prefix="deberta",
    class_prefix="DebertaV2",
    config_aliases={},
    embeddings=_deberta_embeddings,
    layer=_deberta_layer,
    heads={
        "base": lambda cfg, emb: None,
        "seqcls": _deberta_seqcls,
        "tokcls": lambda cfg, emb: _token_head(cfg.dropout)(cfg, emb),
        "qa": _span_head(),
        "mlm": _deberta_mlm,
    },
    table=_DEBERTA_TABLE,
    table_variant=_deberta_table,
    custom_encoder=_deberta_encoder,
    embeddings_take_mask=True,
    mask_token="[MASK]",
    defaults={
        "vocab_size": 128100,
        "hidden_size": 1536,
        "num_hidden_layers": 24,
        "num_attention_heads": 24,
        "intermediate_size": 6144,
        "pad_token_id": 0,
        "layer_norm_eps": 1e-7,
        "type_vocab_size": 0,
    },
    untied_decoder=lambda cfg: (
        ("cls.predictions.decoder.", "cls.predictions.bias") if cfg.get("legacy", True) else None
    ),
)

FAMILIES: dict[str, Family] = {
    f.model_type: f for f in (BERT, ROBERTA, DISTILBERT, ALBERT, XLM_ROBERTA, DEBERTA_V2)
}


def family_of(config: dict[str, Any]) -> Family:
    """The family a ``config.json`` names in ``model_type``."""
    model_type = config.get("model_type")
    if model_type is None:
        raise HfConfigError("config.json has no 'model_type': cannot tell the architecture")
    if model_type not in FAMILIES:
        known = ", ".join(sorted(FAMILIES))
        raise HfConfigError(f"unsupported model_type {model_type!r} (supported: {known})")
    return FAMILIES[model_type]
