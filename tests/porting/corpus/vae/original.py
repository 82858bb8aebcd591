"""A VAE whose forward returns (recon, mu, logvar) (the shape of pytorch/examples vae/main.py)."""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class VAE(nn.Module):
    def __init__(self, dim=64, hidden=32, latent=8):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, dim)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x, reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = torch.rand(128, 64)
    model = VAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        for i in range(0, 128, 32):
            batch = data[i : i + 32]
            optimizer.zero_grad()
            recon, mu, logvar = model(batch)
            loss = loss_function(recon, batch, mu, logvar)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item() / 32:.4f}")
    with torch.no_grad():
        sample = model.decode(torch.randn(16, 8))
    print("sample", tuple(sample.shape))


if __name__ == "__main__":
    main()
