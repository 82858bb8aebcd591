"""Unchecked value (fixed): a loop variable over a flodl iterable is checked: line 10."""

import torch

import flodl as fl

loader = fl.data.DataLoader.from_tensors(x=torch.randn(8, 2)).batch_size(4).drop_last(False)
loader = loader.shuffle(False).build()
for batch in loader.epoch(0):
    print(batch.gett("x").shape)
