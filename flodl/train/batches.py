"""Turning sample indices into a batch of tensors, whatever the dataset looks like."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from flodl.train.errors import TrainerConfigError


def dataset_len(dataset: Any) -> int:
    if isinstance(dataset, torch.Tensor):
        return dataset.shape[0]
    if (
        isinstance(dataset, (tuple, list))
        and dataset
        and all(isinstance(t, torch.Tensor) for t in dataset)
    ):
        lengths = {t.shape[0] for t in dataset}
        if len(lengths) != 1:
            raise TrainerConfigError(
                f"dataset tensors disagree on their first dimension: {sorted(lengths)}"
            )
        return lengths.pop()
    try:
        return len(dataset)
    except TypeError:
        raise TrainerConfigError(
            f"the dataset ({type(dataset).__name__}) has no len(); pass tensors, a torch Dataset "
            "or an object with __len__ and get_batch(indices)"
        ) from None


def fetch_batch(dataset: Any, indices: Sequence[int], device: torch.device) -> list[torch.Tensor]:
    """The samples at ``indices`` as a list of batched tensors on ``device``.

    Accepts a tensor, a tuple/list of tensors, an object with ``get_batch(indices)``, or a
    map-style dataset whose items are tensors or tuples of tensors (stacked position-wise).
    """
    index = torch.as_tensor(list(indices), dtype=torch.long)
    if isinstance(dataset, torch.Tensor):
        parts = [dataset[index]]
    elif isinstance(dataset, (tuple, list)) and dataset and isinstance(dataset[0], torch.Tensor):
        parts = [t[index] for t in dataset]
    elif hasattr(dataset, "get_batch"):
        got = dataset.get_batch(list(indices))
        parts = [got] if isinstance(got, torch.Tensor) else list(got)
    elif hasattr(dataset, "tensors"):  # torch.utils.data.TensorDataset
        parts = [t[index] for t in dataset.tensors]
    else:
        items = [dataset[i] for i in indices]
        if isinstance(items[0], torch.Tensor):
            parts = [torch.stack(items)]
        else:
            parts = [
                torch.stack([torch.as_tensor(item[p]) for item in items])
                for p in range(len(items[0]))
            ]
    return [p.to(device, non_blocking=True) for p in parts]
