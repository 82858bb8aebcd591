"""flodl port of original.py: two graphs, two optimizers, the same manual loop (a GAN stays a
manual loop: fl.Trainer runs one model and one loss); the Monitor logs both losses."""

import argparse
import time

import torch
from torch import nn

import flodl as fl


def build_generator(nz=8, out=32) -> fl.Graph:
    return (
        fl.FlowBuilder(nn.Linear(nz, 64))
        .through(nn.ReLU(True))
        .through(nn.Linear(64, out))
        .through(nn.Tanh())
        .label("generator")
        .build()
    )


def build_discriminator(inp=32) -> fl.Graph:
    return (
        fl.FlowBuilder(nn.Linear(inp, 64))
        .through(nn.LeakyReLU(0.2, inplace=True))
        .through(nn.Linear(64, 1))
        .through(nn.Sigmoid())
        .through(nn.Flatten(0))  # .view(-1)
        .label("discriminator")
        .build()
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--niter", type=int, default=25)
    parser.add_argument("--nz", type=int, default=8)
    args = parser.parse_args()
    fl.manual_seed(0)
    real_data = torch.rand(256, 32) * 2 - 1
    net_g, net_d = build_generator(args.nz), build_discriminator()
    criterion = nn.BCELoss()
    opt_d = fl.optim.Adam(net_d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = fl.optim.Adam(net_g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    monitor = fl.Monitor(args.niter, stream=None, gpu=False)
    for epoch in range(args.niter):
        start = time.perf_counter()
        for i in range(0, 256, 64):
            real = real_data[i : i + 64]
            net_d.zero_grad()
            err_real = criterion(net_d(real), torch.ones(64))
            err_real.backward()
            fake = net_g(torch.randn(64, args.nz))
            err_fake = criterion(net_d(fake.detach()), torch.zeros(64))
            err_fake.backward()
            opt_d.step()
            net_g.zero_grad()
            err_g = criterion(net_d(fake), torch.ones(64))
            err_g.backward()
            opt_g.step()
        losses = {"loss_d": (err_real + err_fake).item(), "loss_g": err_g.item()}
        monitor.log(epoch, time.perf_counter() - start, losses)
    monitor.finish()
    net_g.save_checkpoint("netG.fdl")


if __name__ == "__main__":
    main()
