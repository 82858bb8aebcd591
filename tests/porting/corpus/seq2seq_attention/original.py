"""A GRU encoder-decoder whose decoder attends over the encoder outputs (plain PyTorch)."""

import torch
from torch import nn


class Seq2Seq(nn.Module):
    def __init__(self, vocab=20, dim=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.encoder = nn.GRU(dim, dim, batch_first=True)
        self.decoder = nn.GRU(dim, dim, batch_first=True)
        self.attention = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.out = nn.Linear(dim, vocab)

    def forward(self, tokens):
        memory, _ = self.encoder(self.embed(tokens))
        decoded, _ = self.decoder(memory)
        attended, _ = self.attention(decoded, memory, memory)
        return self.out(decoded + attended)


torch.manual_seed(0)
tokens = torch.randint(0, 20, (4, 7))
model = Seq2Seq()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):
    optimizer.zero_grad()
    logits = model(tokens)
    nn.functional.cross_entropy(logits.reshape(-1, 20), tokens.reshape(-1)).backward()
    optimizer.step()
