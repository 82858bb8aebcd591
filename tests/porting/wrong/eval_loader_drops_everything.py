"""Silent behaviour change (fixed): fl.data.DataLoader drops the last partial batch by default;
256 test samples with batch 1000 give no batch (build() refuses it; fdl check warns). Line 9."""

import torch

import flodl as fl

images, labels = torch.randn(256, 4), torch.randint(0, 2, (256,))
test_loader = fl.data.DataLoader.from_tensors(image=images, label=labels).batch_size(1000).build()
print("batches:", len(test_loader))
