"""A two-layer MLP classifier on synthetic data (plain PyTorch)."""

import torch
from torch import nn

torch.manual_seed(0)
inputs, targets = torch.randn(256, 20), torch.randint(0, 3, (256,))
loader = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(inputs, targets), batch_size=32, shuffle=True
)

model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 3))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()

for epoch in range(3):
    model.train()
    for features, labels in loader:
        optimizer.zero_grad()
        loss = criterion(model(features), labels)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")

torch.save(model.state_dict(), "mlp.pt")
