"""DeBERTa-v2 / v3: disentangled attention (content and relative position, scored separately).

Each layer adds to the content-to-content scores a content-to-position term (queries against
relative-position keys) and a position-to-content term (relative-position queries against keys),
with relative distances put in log-spaced buckets. The relative-position table (``rel_embeddings``
+ its LayerNorm) is computed once per forward by the encoder's ``rel_embeddings`` node and read
by every layer. Operations follow ``transformers``' order (scale applied to the keys, masked
scores filled with the dtype minimum), which is what keeps the outputs within 1e-5.

Not supported (a clear error at build time): ``conv_kernel_size > 0`` (DeBERTa-v2 xlarge's
convolution layer) and a custom ``attention_head_size``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from flodl.hf import layers as L
from flodl.hf.errors import HfConfigError


def log_bucket_position(
    relative_pos: torch.Tensor, bucket_size: int, max_position: int
) -> torch.Tensor:
    """Relative distances → log-spaced buckets (exact within ``bucket_size // 2``)."""
    sign = torch.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = torch.where(
        (relative_pos < mid) & (relative_pos > -mid),
        torch.tensor(mid - 1).type_as(relative_pos),
        torch.abs(relative_pos),
    )
    log_pos = (
        torch.ceil(
            torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid)) * (mid - 1)
        )
        + mid
    )
    return torch.where(abs_pos <= mid, relative_pos.type_as(log_pos), log_pos * sign)


def relative_positions(
    size: int, bucket_size: int, max_position: int, device: torch.device
) -> torch.Tensor:
    """``[1, S, S]`` relative positions ``i - j`` (bucketed when ``bucket_size > 0``)."""
    ids = torch.arange(size, dtype=torch.long, device=device)
    rel = ids[:, None] - ids[None, :]
    if bucket_size > 0 and max_position > 0:
        rel = log_bucket_position(rel, bucket_size, max_position)
    return rel.to(torch.long).unsqueeze(0)


class DebertaEmbeddings(nn.Module):
    """Word (+ absolute position when ``position_biased_input``) (+ token type) embeddings,
    an optional projection to the hidden size, LayerNorm, then padding positions zeroed."""

    def __init__(self, vocab: int, embedding_size: int, dim: int, max_positions: int,
                 type_vocab: int, position_biased: bool, eps: float, dropout: float,
                 pad_token_id: int | None) -> None:  # fmt: skip
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, embedding_size, padding_idx=pad_token_id)
        self.position_embeddings = (
            nn.Embedding(max_positions, embedding_size) if position_biased else None
        )
        self.token_type_embeddings = (
            nn.Embedding(type_vocab, embedding_size) if type_vocab > 0 else None
        )
        self.embed_proj = (
            nn.Linear(embedding_size, dim, bias=False) if embedding_size != dim else None
        )
        self.LayerNorm = nn.LayerNorm(dim, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if self.position_embeddings is not None:
            L.check_length(input_ids, self.position_embeddings.num_embeddings)
        size = self.word_embeddings.num_embeddings
        L.check_ids(input_ids, size, "token id", "vocabulary", "vocab_size")
        x = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
            x = x + self.position_embeddings(positions)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            types = self.token_type_embeddings.num_embeddings
            L.check_ids(token_type_ids, types, "token type id", "token types", "type_vocab_size")
            x = x + self.token_type_embeddings(token_type_ids)
        if self.embed_proj is not None:
            x = self.embed_proj(x)
        x = self.LayerNorm(x)
        if attention_mask is not None:
            x = x * attention_mask.unsqueeze(2).to(x.dtype)
        return self.dropout(x)


class RelativeEmbeddings(nn.Module):
    """The relative-position table every layer reads: ``LayerNorm(rel_embeddings.weight)``.

    Used as a side branch (``fork``) of the encoder: it ignores the hidden states it is given.
    """

    def __init__(self, size: int, dim: int, eps: float, norm: bool) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(size, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=eps) if norm else None

    def forward(self, _hidden: torch.Tensor) -> torch.Tensor:
        table = self.embeddings.weight
        return self.LayerNorm(table) if self.LayerNorm is not None else table


class DisentangledSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, attn_dropout: float, dropout: float,
                 pos_att_type: list[str], share_att_key: bool, relative: bool,
                 buckets: int, max_relative: int) -> None:  # fmt: skip
        super().__init__()
        if dim % heads:
            raise HfConfigError(f"hidden size {dim} is not a multiple of {heads} attention heads")
        self.heads = heads
        self.query_proj = nn.Linear(dim, dim)
        self.key_proj = nn.Linear(dim, dim)
        self.value_proj = nn.Linear(dim, dim)
        self.pos_att_type = list(pos_att_type)
        self.share_att_key = share_att_key
        self.relative = relative
        self.buckets = buckets
        self.max_relative = max_relative
        self.span = buckets if buckets > 0 else max_relative
        if relative and not share_att_key:
            if "c2p" in self.pos_att_type:
                self.pos_key_proj = nn.Linear(dim, dim)
            if "p2c" in self.pos_att_type:
                self.pos_query_proj = nn.Linear(dim, dim)
        self.pos_dropout = nn.Dropout(dropout)
        self.dropout = nn.Dropout(attn_dropout)
        self._positions: dict[tuple[int, torch.device], torch.Tensor] = {}

    def _relative_positions(self, size: int, device: torch.device) -> torch.Tensor:
        """``[1, 1, S, S]`` bucketed relative positions, computed once per length and device."""
        key = (size, device)
        if key not in self._positions:
            rel = relative_positions(size, self.buckets, self.max_relative, device)
            self._positions = {key: rel.unsqueeze(1)}  # keep one: lengths vary batch to batch
        return self._positions[key]

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        x = x.view(b, s, self.heads, -1)
        return x.permute(0, 2, 1, 3).contiguous().view(-1, s, x.size(-1))

    def forward(
        self, x: torch.Tensor, mask2d: torch.Tensor, rel_embeddings: torch.Tensor | None
    ) -> torch.Tensor:
        q = self._heads(self.query_proj(x))
        k = self._heads(self.key_proj(x))
        v = self._heads(self.value_proj(x))
        factor = 1 + ("c2p" in self.pos_att_type) + ("p2c" in self.pos_att_type)
        scale = math.sqrt(q.size(-1) * factor)
        scale_t = torch.sqrt(torch.tensor(q.size(-1), dtype=torch.float) * factor)
        scores = torch.bmm(q, k.transpose(-1, -2) / scale_t.to(dtype=q.dtype))
        if self.relative and rel_embeddings is not None:
            scores = scores + self._bias(q, k, self.pos_dropout(rel_embeddings), scale)
        s = scores.size(-1)
        scores = scores.view(-1, self.heads, s, s)
        scores = scores.masked_fill(~mask2d, torch.finfo(q.dtype).min)
        probs = self.dropout(scores.softmax(-1))
        ctx = torch.bmm(probs.view(-1, s, s), v)
        ctx = ctx.view(-1, self.heads, s, ctx.size(-1)).permute(0, 2, 1, 3).contiguous()
        return ctx.view(*ctx.shape[:-2], -1)

    def _bias(
        self, q: torch.Tensor, k: torch.Tensor, rel: torch.Tensor, _scale: float
    ) -> torch.Tensor:
        size = q.size(-2)
        rel_pos = self._relative_positions(size, q.device)
        span = self.span
        rel = rel[0 : span * 2, :].unsqueeze(0)
        repeat = q.size(0) // self.heads
        if self.share_att_key:
            pos_q = self._heads(self.query_proj(rel)).repeat(repeat, 1, 1)
            pos_k = self._heads(self.key_proj(rel)).repeat(repeat, 1, 1)
        else:
            if "c2p" in self.pos_att_type:
                pos_k = self._heads(self.pos_key_proj(rel)).repeat(repeat, 1, 1)
            if "p2c" in self.pos_att_type:
                pos_q = self._heads(self.pos_query_proj(rel)).repeat(repeat, 1, 1)
        factor = 1 + ("c2p" in self.pos_att_type) + ("p2c" in self.pos_att_type)
        score: torch.Tensor | float = 0.0
        if "c2p" in self.pos_att_type:
            scale = torch.sqrt(torch.tensor(pos_k.size(-1), dtype=torch.float) * factor)
            c2p = torch.bmm(q, pos_k.transpose(-1, -2))
            c2p_pos = torch.clamp(rel_pos + span, 0, span * 2 - 1)
            index = c2p_pos.squeeze(0).expand([q.size(0), q.size(1), rel_pos.size(-1)])
            c2p = torch.gather(c2p, dim=-1, index=index)
            score = score + c2p / scale.to(dtype=c2p.dtype)
        if "p2c" in self.pos_att_type:
            scale = torch.sqrt(torch.tensor(pos_q.size(-1), dtype=torch.float) * factor)
            p2c_pos = torch.clamp(-rel_pos + span, 0, span * 2 - 1)
            p2c = torch.bmm(k, pos_q.transpose(-1, -2))
            index = p2c_pos.squeeze(0).expand([q.size(0), k.size(-2), k.size(-2)])
            p2c = torch.gather(p2c, dim=-1, index=index).transpose(-1, -2)
            score = score + p2c / scale.to(dtype=p2c.dtype)
        return score  # type: ignore[return-value]


class DebertaAttention(nn.Module):
    def __init__(self, attention: DisentangledSelfAttention, dim: int, eps: float, dropout: float):
        super().__init__()
        self.self = attention
        self.output = L.DenseNorm(dim, dim, eps, dropout)

    def forward(
        self, x: torch.Tensor, mask2d: torch.Tensor, rel: torch.Tensor | None
    ) -> torch.Tensor:
        return self.output(self.self(x, mask2d, rel), x)


class DebertaLayer(nn.Module):
    """One DeBERTa-v2 layer: ``layer(hidden, attention_mask, rel_embeddings)``."""

    def __init__(self, attention: DisentangledSelfAttention, dim: int, inner: int, act: str,
                 eps: float, dropout: float) -> None:  # fmt: skip
        super().__init__()
        self.attention = DebertaAttention(attention, dim, eps, dropout)
        self.intermediate = L.Intermediate(dim, inner, act)
        self.output = L.DenseNorm(inner, dim, eps, dropout)

    def forward(
        self,
        x: torch.Tensor,
        attention_mask: torch.Tensor,
        rel_embeddings: torch.Tensor | None = None,
    ) -> torch.Tensor:
        m = attention_mask[:, None, None, :].bool()
        mask2d = m & m.transpose(-1, -2)  # [B, 1, S, S]: query and key both real tokens
        a = self.attention(x, mask2d, rel_embeddings)
        return self.output(self.intermediate(a), a)


class ContextPooler(nn.Module):
    """DeBERTa's pooler: ``act(dense(dropout(h[:, 0])))`` (``pooler_hidden_act``, gelu)."""

    def __init__(self, dim: int, act: str, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(dim, dim)
        self.activation = L.Activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(self.dropout(x[:, 0])))
