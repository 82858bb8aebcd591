"""An LSTM classifier: the LSTM's tuple output, the last hidden state classified."""

import torch
from torch import nn


class LSTMClassifier(nn.Module):
    def __init__(self, vocab=50, embed=16, hidden=24, classes=4):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, tokens):
        _out, (h, _c) = self.lstm(self.embedding(tokens))
        return self.fc(self.dropout(h[-1]))


class Tagger(nn.Module):
    """Per-step outputs and the final state, with an optional initial state."""

    def __init__(self, features=6, hidden=12):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 3)

    def forward(self, x, state=None):
        out, state = self.lstm(x, state)
        return torch.log_softmax(self.head(out), dim=-1), state
