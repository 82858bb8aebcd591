"""flodl port of original.py: FlowBuilder model, fl.data loader, Monitor, .fdl checkpoint."""

import time

import torch
from torch import nn

import flodl as fl

fl.manual_seed(0)
inputs, targets = torch.randn(256, 20), torch.randint(0, 3, (256,))
loader = (
    fl.data.DataLoader.from_tensors(x=inputs, y=targets)
    .batch_size(32)
    .shuffle(True)
    .drop_last(True)  # 256 = 8 x 32: nothing is dropped
    .seed(0)
    .build()
)

model = (
    fl.FlowBuilder(nn.Linear(20, 64))
    .through(nn.ReLU())
    .through(nn.Dropout(0.1))
    .through(nn.Linear(64, 3))
    .build()
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
monitor = fl.Monitor(3)

for epoch in range(3):
    start = time.perf_counter()
    model.train()
    for batch in loader.epoch(epoch):
        optimizer.zero_grad()
        loss = criterion(model(batch["x"]), batch["y"])
        loss.backward()
        optimizer.step()
    monitor.log(epoch, time.perf_counter() - start, {"loss": loss.item()})

monitor.finish()
model.save_checkpoint("mlp.fdl")
