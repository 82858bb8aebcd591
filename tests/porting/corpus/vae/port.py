"""flodl port of original.py: a forward returning (recon, mu, logvar) is `.output(...)`; the
decoder is its own graph, reused for sampling (`model.decode(z)` in the original)."""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

import flodl as fl


class Reparameterize(nn.Module):
    """mu + eps * std, with logvar arriving as a ref (the original's reparameterize)."""

    def forward(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std


def build_model(dim=64, hidden=32, latent=8) -> tuple[fl.Graph, fl.Graph]:
    """(the VAE, its decoder); the decoder's weights are the VAE's."""
    fc1 = nn.Linear(dim, hidden)
    fc21, fc22 = nn.Linear(hidden, latent), nn.Linear(hidden, latent)
    fc3, fc4 = nn.Linear(latent, hidden), nn.Linear(hidden, dim)
    decoder = (
        fl.FlowBuilder(fc3).through(nn.ReLU()).through(fc4).through(nn.Sigmoid()).label("decoder")
    ).build()
    vae = (
        fl.FlowBuilder(fc1)
        .through(nn.ReLU())
        .fork(fc22)
        .tag("logvar")
        .through(fc21)
        .tag("mu")
        .through(Reparameterize())
        .using("logvar")
        .through(decoder)
        .tag("recon")
        .output("recon", "mu", "logvar")
        .build()
    )
    return vae, decoder


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x, reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    fl.manual_seed(0)
    data = torch.rand(128, 64)
    model, decoder = build_model()
    optimizer = fl.optim.Adam(model.parameters(), lr=1e-3)
    monitor = fl.Monitor(args.epochs, stream=None, gpu=False)
    for epoch in range(args.epochs):
        start = time.perf_counter()
        for i in range(0, 128, 32):
            batch = data[i : i + 32]
            optimizer.zero_grad()
            recon, mu, logvar = model(batch)
            loss = loss_function(recon, batch, mu, logvar)
            loss.backward()
            optimizer.step()
        monitor.log(epoch, time.perf_counter() - start, {"loss": loss.item() / 32})
    monitor.finish()
    with torch.no_grad():
        sample = decoder(torch.randn(16, 8))
    print("sample", tuple(sample.shape))


if __name__ == "__main__":
    main()
