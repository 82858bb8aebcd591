"""flodl port of original.py: the CNN is a FlowBuilder graph, the schedule flodl's pure StepDecay,
the data fl.data.DataLoader (drop_last said explicitly: the 200-sample test set is smaller than
its batch), the epochs logged by fl.Monitor, the weights saved as .fdl."""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

import flodl as fl


def build_model() -> fl.Graph:
    # the same layers, created in the original's order (same seed -> same weights)
    conv1, conv2 = nn.Conv2d(1, 8, 3, 1), nn.Conv2d(8, 16, 3, 1)
    dropout1, dropout2 = nn.Dropout(0.25), nn.Dropout(0.5)
    fc1, fc2 = nn.Linear(2304, 32), nn.Linear(32, 10)
    return (
        fl.FlowBuilder(conv1)
        .through(nn.ReLU())
        .through(conv2)
        .through(nn.ReLU())
        .through(nn.MaxPool2d(2))
        .through(dropout1)
        .through(nn.Flatten(1))
        .through(fc1)
        .through(nn.ReLU())
        .through(dropout2)
        .through(fc2)
        .through(nn.LogSoftmax(dim=1))
        .build()
    )


def fake_mnist(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def main():
    parser = argparse.ArgumentParser(description="MNIST-style CNN (flodl)")
    parser.add_argument("--dataset", choices=["fake"], required=True)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=14)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--save-model", action="store_true")
    args = parser.parse_args()
    fl.manual_seed(1)
    images, labels = fake_mnist(512, 0)
    train_loader = (
        fl.data.DataLoader.from_tensors(image=images, label=labels)
        .batch_size(args.batch_size)
        .shuffle(True)
        .drop_last(False)
        .build()
    )
    test_images, test_labels = fake_mnist(200, 1)
    test_loader = (
        fl.data.DataLoader.from_tensors(image=test_images, label=test_labels)
        .batch_size(args.test_batch_size)
        .shuffle(False)
        .drop_last(False)  # flodl's default drops it: 200 < 1000 would evaluate nothing
        .build()
    )
    model = build_model()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    schedule = fl.optim.StepDecay(args.lr, step_size=1, gamma=args.gamma)
    monitor = fl.Monitor(args.epochs, stream=None, gpu=False)
    for epoch in range(args.epochs):
        fl.optim.set_lr(optimizer, schedule(epoch))
        start = time.perf_counter()
        model.train()
        for batch in train_loader.epoch(epoch):
            optimizer.zero_grad()
            loss = F.nll_loss(model(batch["image"]), batch["label"])
            loss.backward()
            optimizer.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for batch in test_loader.epoch(epoch):
                correct += model(batch["image"]).argmax(dim=1).eq(batch["label"]).sum().item()
        monitor.log(epoch, time.perf_counter() - start, {"loss": loss.item(), "correct": correct})
        print(f"epoch {epoch + 1}: loss {loss.item():.4f}, test accuracy {correct}/200")
    monitor.finish()
    if args.save_model:
        model.save_checkpoint("mnist_cnn.fdl")


if __name__ == "__main__":
    main()
