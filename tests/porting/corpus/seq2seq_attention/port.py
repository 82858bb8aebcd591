"""flodl port of original.py: the encoder output is tagged and read by the attention step."""

import torch
from torch import nn

import flodl as fl


class RNNOutput(nn.Module):
    """A GRU that returns only its output sequence (drops the final hidden state)."""

    def __init__(self, dim):
        super().__init__()
        self.gru = nn.GRU(dim, dim, batch_first=True)

    def forward(self, x):
        return self.gru(x)[0]


class CrossAttention(nn.Module):
    """decoded + attention(decoded, memory, memory)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.attention = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, decoded, memory):
        return decoded + self.attention(decoded, memory, memory)[0]


fl.manual_seed(0)
model = (
    fl.FlowBuilder(nn.Embedding(20, 16))
    .through(RNNOutput(16))
    .tag("memory")
    .through(RNNOutput(16))
    .through(CrossAttention(16, 2))
    .using("memory")
    .through(nn.Linear(16, 20))
    .build()
)
tokens = torch.randint(0, 20, (4, 7))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):
    optimizer.zero_grad()
    logits = model(tokens)
    nn.functional.cross_entropy(logits.reshape(-1, 20), tokens.reshape(-1)).backward()
    optimizer.step()
