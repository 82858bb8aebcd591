"""DistributedDataParallel training meant for `torchrun --nproc-per-node N` (plain PyTorch).

Run without torchrun it falls back to a single process (world size 1, gloo).
"""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29531")
dist.init_process_group(
    "gloo", rank=int(os.environ.get("RANK", 0)), world_size=int(os.environ.get("WORLD_SIZE", 1))
)
torch.manual_seed(0)

dataset = TensorDataset(torch.randn(128, 10), torch.randn(128, 1))
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=16, sampler=sampler)
model = DistributedDataParallel(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

for epoch in range(2):
    sampler.set_epoch(epoch)
    for features, target in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(features), target).backward()
        optimizer.step()

if dist.get_rank() == 0:
    torch.save(model.module.state_dict(), "ddp.pt")
dist.destroy_process_group()
