"""A GAN with two optimizers (the shape of pytorch/examples dcgan, fully connected and tiny)."""

import argparse

import torch
from torch import nn


class Generator(nn.Module):
    def __init__(self, nz=8, out=32):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(nz, 64), nn.ReLU(True), nn.Linear(64, out), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, inp=32):
        super().__init__()
        self.main = nn.Sequential(
            nn.Linear(inp, 64), nn.LeakyReLU(0.2, inplace=True), nn.Linear(64, 1), nn.Sigmoid()
        )

    def forward(self, x):
        return self.main(x).view(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--niter", type=int, default=25)
    parser.add_argument("--nz", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    real_data = torch.rand(256, 32) * 2 - 1
    netG, netD = Generator(args.nz), Discriminator()
    criterion = nn.BCELoss()
    optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    for epoch in range(args.niter):
        for i in range(0, 256, 64):
            real = real_data[i : i + 64]
            netD.zero_grad()
            err_real = criterion(netD(real), torch.ones(64))
            err_real.backward()
            fake = netG(torch.randn(64, args.nz))
            err_fake = criterion(netD(fake.detach()), torch.zeros(64))
            err_fake.backward()
            optD.step()
            netG.zero_grad()
            err_g = criterion(netD(fake), torch.ones(64))
            err_g.backward()
            optG.step()
        print(f"[{epoch}] loss_D {(err_real + err_fake).item():.4f} loss_G {err_g.item():.4f}")
    torch.save(netG.state_dict(), "netG.pt")


if __name__ == "__main__":
    main()
