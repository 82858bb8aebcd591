"""``pytorch_model.bin`` → ``model.safetensors``, without unpickling arbitrary objects.

The pickle is read with ``torch.load(weights_only=True)`` only: a file that holds anything but
tensors and plain containers is refused instead of executed. Tensors that share memory (tied
weights) are written as separate copies, which is what safetensors requires.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from flodl.files import replacing
from flodl.hf.errors import ConvertError


def bin_to_safetensors(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Convert ``source`` (a pickled state dict) to the safetensors file ``target``.

    >>> import tempfile, pathlib, torch
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> torch.save({"w": torch.ones(2)}, d / "pytorch_model.bin")
    >>> bin_to_safetensors(d / "pytorch_model.bin", d / "model.safetensors").name
    'model.safetensors'
    """
    from safetensors.torch import save_file

    source, target = Path(source), Path(target)
    try:
        state = torch.load(source, map_location="cpu", weights_only=True)
    except Exception as err:  # UnpicklingError for anything that is not plain tensors
        raise ConvertError(
            f"{source}: cannot be read safely with torch.load(weights_only=True): {err}"
        ) from err
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ConvertError(f"{source}: not a state dict of named tensors")
    tensors = {k: v.detach().clone().contiguous() for k, v in state.items()}
    with replacing(target) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    return target
