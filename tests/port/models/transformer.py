"""A transformer encoder block: self-attention (a tuple output), residuals and LayerNorm."""

import torch.nn.functional as F
from torch import nn


class EncoderBlock(nn.Module):
    def __init__(self, d_model=32, heads=4, ff=64, dropout=0.1):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, heads, dropout=dropout, batch_first=True)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, ff)
        self.ff2 = nn.Linear(ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        attn_out, _ = self.attn(x, x, x, need_weights=False)
        x = self.norm1(x + self.drop(attn_out))
        x = self.norm2(x + self.drop(self.ff2(F.gelu(self.ff1(x)))))
        return x
