"""A soft mixture-of-experts layer with a softmax router (plain PyTorch)."""

import torch
from torch import nn


class MoE(nn.Module):
    def __init__(self, dim=16, n_experts=4):
        super().__init__()
        self.router = nn.Linear(dim, n_experts)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, dim), nn.GELU()) for _ in range(n_experts)
        )

    def forward(self, x):
        weights = torch.softmax(self.router(x), dim=-1)
        outputs = torch.stack([expert(x) for expert in self.experts], dim=-1)
        return (outputs * weights.unsqueeze(-2)).sum(dim=-1)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), MoE(), nn.Linear(16, 1))
x, y = torch.randn(32, 8), torch.randn(32, 1)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(5):
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
