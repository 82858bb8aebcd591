"""The torch modules the encoder graphs are made of: embeddings, attention layers and task heads.

Submodule names follow HuggingFace's own (``attention.self.query``, ``LayerNorm``,
``classifier``...), so the name table between a graph and a checkpoint only rewrites prefixes.
Every module computes exactly what the matching ``transformers`` module computes in eval mode
(same operation order, same epsilon), which is what keeps the outputs within 1e-5 of it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from flodl.graph.fx_tracing import transforming
from flodl.hf.errors import HfConfigError, HfError


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def _quick_gelu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(1.702 * x)


_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_fast": _gelu_tanh,
    "quick_gelu": _quick_gelu,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "tanh": torch.tanh,
}


class Activation(nn.Module):
    """An activation named as ``config.json`` names it (``hidden_act``): gelu, gelu_new, relu..."""

    def __init__(self, name: str) -> None:
        super().__init__()
        if name not in _ACTIVATIONS:
            known = ", ".join(sorted(_ACTIVATIONS))
            raise HfConfigError(f"unsupported activation {name!r} (supported: {known})")
        self.name = name
        self.fn = _ACTIVATIONS[name]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)

    def extra_repr(self) -> str:
        return self.name


def attention_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[B, S]`` 1/0 mask → additive ``[B, 1, 1, S]`` bias (0 where attended, dtype min else)."""
    bias = (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
    return bias


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    b, s, _ = x.shape
    return x.view(b, s, heads, -1).transpose(1, 2)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    b, h, s, d = x.shape
    return x.transpose(1, 2).reshape(b, s, h * d)


def check_length(input_ids: torch.Tensor, limit: int) -> None:
    """A clear error for a sequence longer than the position table (instead of an index error)."""
    if input_ids.shape[-1] > limit:
        raise HfError(
            f"a sequence of {input_ids.shape[-1]} tokens is longer than this model's {limit} "
            "positions (max_position_embeddings): truncate it, e.g. "
            "HfTokenizer.from_file(path, max_length=...)"
        )


def check_ids(ids: torch.Tensor, size: int, what: str, table: str, key: str) -> None:
    """A clear error for an id outside an embedding table of ``size`` rows (instead of an
    ``IndexError`` from inside ``F.embedding``): ``what`` names the ids, ``table`` the table and
    ``key`` its config.json size. One min/max pass, on plain CPU tensors only: on an accelerator
    reading it back would synchronise every forward (the device's own assertion reports it
    there), and a proxy, fake or transformed tensor (fx, torch.compile, tracing, vmap) has no
    values to read."""
    if (
        type(ids) is not torch.Tensor
        or ids.device.type != "cpu"
        or ids.numel() == 0
        or torch.compiler.is_compiling()
        or torch.jit.is_tracing()
        or transforming()
    ):
        return
    low, high = (int(v) for v in torch.aminmax(ids))
    if high >= size or low < 0:
        which = f"the largest {what}, {high}," if high >= size else f"a {what}, {low},"
        raise HfError(
            f"{which} is outside this model's {table} ({key} {size}: ids 0..{size - 1}); "
            "encode with the model's own tokenizer"
        )


# ---------------------------------------------------------------------------------- embeddings
class Embeddings(nn.Module):
    """Word + absolute position (+ token type) embeddings, LayerNorm, dropout.

    ``position_offset`` is RoBERTa's convention: positions count non-padding tokens from
    ``padding_idx + 1``, and padding tokens take ``padding_idx``; ``None`` counts from 0.
    """

    word_embeddings: nn.Embedding
    token_type_embeddings: nn.Embedding | None

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        max_positions: int,
        type_vocab_size: int,
        eps: float,
        dropout: float,
        pad_token_id: int | None = None,
        roberta_positions: bool = False,
    ) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, dim, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(
            max_positions, dim, padding_idx=pad_token_id if roberta_positions else None
        )
        if type_vocab_size > 0:
            self.token_type_embeddings = nn.Embedding(type_vocab_size, dim)
        else:
            self.token_type_embeddings = None
        self.LayerNorm = nn.LayerNorm(dim, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.roberta_positions = roberta_positions
        self.padding_idx = pad_token_id if pad_token_id is not None else 0
        # RoBERTa's positions start after padding_idx, so it fits padding_idx + 1 fewer tokens
        self.max_length = max_positions - (self.padding_idx + 1 if roberta_positions else 0)

    def positions(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.roberta_positions:
            mask = input_ids.ne(self.padding_idx).int()
            return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + self.padding_idx
        return torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        check_length(input_ids, self.max_length)
        size = self.word_embeddings.num_embeddings
        check_ids(input_ids, size, "token id", "vocabulary", "vocab_size")
        x = self.word_embeddings(input_ids)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            size = self.token_type_embeddings.num_embeddings
            check_ids(token_type_ids, size, "token type id", "token types", "type_vocab_size")
            x = x + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(self.positions(input_ids))
        return self.dropout(self.LayerNorm(x))


# ---------------------------------------------------------------------------------- attention
class SelfAttention(nn.Module):
    """Multi-head scaled dot-product attention over ``query``/``key``/``value`` projections."""

    def __init__(self, dim: int, heads: int, dropout: float, names: tuple[str, str, str]) -> None:
        super().__init__()
        if dim % heads:
            raise HfConfigError(f"hidden size {dim} is not a multiple of {heads} attention heads")
        self.heads = heads
        self.dropout_p = dropout
        self._names = names
        for name in names:
            self.add_module(name, nn.Linear(dim, dim))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        q_lin, k_lin, v_lin = (getattr(self, n) for n in self._names)
        q = _split_heads(q_lin(x), self.heads)
        k = _split_heads(k_lin(x), self.heads)
        v = _split_heads(v_lin(x), self.heads)
        p = self.dropout_p if self.training else 0.0
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)
        return _merge_heads(ctx)


class DenseNorm(nn.Module):
    """``LayerNorm(dropout(dense(x)) + residual)``: BERT's ``attention.output`` and ``output``."""

    def __init__(self, d_in: int, d_out: int, eps: float, dropout: float) -> None:
        super().__init__()
        self.dense = nn.Linear(d_in, d_out)
        self.LayerNorm = nn.LayerNorm(d_out, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    def __init__(self, dim: int, heads: int, eps: float, dropout: float, attn_dropout: float):
        super().__init__()
        self.self = SelfAttention(dim, heads, attn_dropout, ("query", "key", "value"))
        self.output = DenseNorm(dim, dim, eps, dropout)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x, bias), x)


class Intermediate(nn.Module):
    def __init__(self, dim: int, inner: int, act: str) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, inner)
        self.act = Activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))


class BertLayer(nn.Module):
    """One post-norm transformer layer as BERT, RoBERTa and XLM-R write it.

    Called as ``layer(hidden, attention_mask)`` with the ``[B, S]`` 1/0 mask.
    """

    def __init__(self, dim: int, heads: int, inner: int, act: str, eps: float, dropout: float,
                 attn_dropout: float) -> None:  # fmt: skip
        super().__init__()
        self.attention = BertAttention(dim, heads, eps, dropout, attn_dropout)
        self.intermediate = Intermediate(dim, inner, act)
        self.output = DenseNorm(inner, dim, eps, dropout)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        a = self.attention(x, attention_bias(attention_mask, x.dtype))
        return self.output(self.intermediate(a), a)


class DistilBertAttention(SelfAttention):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__(dim, heads, dropout, ("q_lin", "k_lin", "v_lin"))
        self.out_lin = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return self.out_lin(super().forward(x, bias))


class DistilBertFFN(nn.Module):
    def __init__(self, dim: int, inner: int, act: str, dropout: float) -> None:
        super().__init__()
        self.lin1 = nn.Linear(dim, inner)
        self.lin2 = nn.Linear(inner, dim)
        self.activation = Activation(act)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.lin2(self.activation(self.lin1(x))))


class DistilBertLayer(nn.Module):
    """DistilBERT's post-norm layer (``sa_layer_norm``, ``output_layer_norm``)."""

    def __init__(self, dim: int, heads: int, inner: int, act: str, dropout: float,
                 attn_dropout: float) -> None:  # fmt: skip
        super().__init__()
        self.attention = DistilBertAttention(dim, heads, attn_dropout)
        self.sa_layer_norm = nn.LayerNorm(dim, eps=1e-12)
        self.ffn = DistilBertFFN(dim, inner, act, dropout)
        self.output_layer_norm = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        sa = self.sa_layer_norm(self.attention(x, attention_bias(attention_mask, x.dtype)) + x)
        return self.output_layer_norm(self.ffn(sa) + sa)


class AlbertAttention(SelfAttention):
    def __init__(self, dim: int, heads: int, eps: float, dropout: float, attn_dropout: float):
        super().__init__(dim, heads, attn_dropout, ("query", "key", "value"))
        self.dense = nn.Linear(dim, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=eps)
        self.output_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        ctx = super().forward(x, bias)
        return self.LayerNorm(x + self.output_dropout(self.dense(ctx)))


class AlbertLayer(nn.Module):
    """ALBERT's layer (``attention``, ``ffn``, ``ffn_output``, ``full_layer_layer_norm``)."""

    def __init__(self, dim: int, heads: int, inner: int, act: str, eps: float, dropout: float,
                 attn_dropout: float) -> None:  # fmt: skip
        super().__init__()
        self.attention = AlbertAttention(dim, heads, eps, dropout, attn_dropout)
        self.ffn = nn.Linear(dim, inner)
        self.ffn_output = nn.Linear(inner, dim)
        self.activation = Activation(act)
        self.full_layer_layer_norm = nn.LayerNorm(dim, eps=eps)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        a = self.attention(x, attention_bias(attention_mask, x.dtype))
        # no dropout after ffn_output: transformers' AlbertLayer has one but never applies it
        f = self.ffn_output(self.activation(self.ffn(a)))
        return self.full_layer_layer_norm(f + a)


# ---------------------------------------------------------------------------------- heads
class Pooler(nn.Module):
    """``tanh(dense(hidden[:, 0]))``: the first token's state through a dense layer."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x[:, 0]))


class FirstToken(nn.Module):
    """``hidden[:, 0]``: the first (``[CLS]``/``<s>``) token's state."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0]


class RobertaClassificationHead(nn.Module):
    """RoBERTa's sentence head: ``out_proj(dropout(tanh(dense(dropout(h[:, 0])))))``."""

    def __init__(self, dim: int, labels: int, dropout: float) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(dim, labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dropout(x[:, 0])
        return self.out_proj(self.dropout(torch.tanh(self.dense(x))))


class SplitSpan(nn.Module):
    """``[B, S, 2]`` span logits → ``(start_logits, end_logits)``, each ``[B, S]``."""

    def forward(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start, end = logits.split(1, dim=-1)
        return start.squeeze(-1).contiguous(), end.squeeze(-1).contiguous()


class TiedDecoder(nn.Module):
    """``x @ word_embeddings.T + bias``: the vocabulary projection tied to the input embeddings.

    ``weight`` is the embedding matrix itself (one Parameter, listed once by
    ``named_parameters``), so fine-tuning moves both together as in ``transformers``.
    """

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__()
        self.weight = embedding.weight
        self.bias = nn.Parameter(torch.zeros(embedding.num_embeddings))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class Transform(nn.Module):
    """The masked-LM transform before the vocabulary projection: ``LayerNorm(act(dense(h)))``."""

    def __init__(self, dim: int, out_dim: int, act: str, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, out_dim)
        self.activation = Activation(act)
        self.LayerNorm = nn.LayerNorm(out_dim, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.activation(self.dense(x)))


def scaled_init(module: nn.Module, std: float) -> None:
    """Initialise like ``transformers``: normal(0, std) weights, zero biases, unit LayerNorms."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
