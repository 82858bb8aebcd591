"""Sub-pixel super-resolution (the shape of pytorch/examples super_resolution): convolutions
then nn.PixelShuffle, trained on locally generated low/high-resolution pairs."""

import argparse

import torch
import torch.nn.init as init
from torch import nn


class Net(nn.Module):
    def __init__(self, upscale_factor):
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 16, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(16, 16, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(16, upscale_factor**2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        return self.pixel_shuffle(self.conv3(x))

    def _initialize_weights(self):
        init.orthogonal_(self.conv1.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv2.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv3.weight)


def main():
    parser = argparse.ArgumentParser(description="super-resolution")
    parser.add_argument("--upscale_factor", type=int, required=True)
    parser.add_argument("--nEpochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    torch.manual_seed(123)
    high = torch.rand(16, 1, 8 * args.upscale_factor, 8 * args.upscale_factor)
    low = nn.functional.avg_pool2d(high, args.upscale_factor)
    model = Net(args.upscale_factor)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(1, args.nEpochs + 1):
        for i in range(0, 16, 4):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(low[i : i + 4]), high[i : i + 4])
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")
    torch.save(model, f"model_epoch_{args.nEpochs}.pth")


if __name__ == "__main__":
    main()
