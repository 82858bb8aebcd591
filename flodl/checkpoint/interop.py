"""Conversion between ``.fdl`` and safetensors (needs the optional ``safetensors`` package)."""

from __future__ import annotations

import os
from typing import Any

from flodl.checkpoint import api, codec, listeners
from flodl.checkpoint.errors import CheckpointError
from flodl.checkpoint.streams import Destination, PathLike, Source, open_destination, open_source

HASH_KEY = "flodl.structural_hash"


def _safetensors() -> Any:
    try:
        import safetensors.torch
    except ImportError:
        raise CheckpointError(
            "safetensors is not installed — pip install safetensors to convert to and from it"
        ) from None
    return safetensors


def fdl_to_safetensors(src: Source, dst: Destination) -> None:
    """Write every entry of ``src`` to safetensors (atomically for a path).

    Tied weights become independent copies (safetensors cannot share storage); the structural
    hash, if any, is kept in the metadata under ``flodl.structural_hash``.
    """
    st = _safetensors()
    with open_source(src) as reader:
        decoded = codec.decode(reader)
    digest = decoded.header.structural_hash
    data = st.torch.save(decoded.tensors, metadata={HASH_KEY: digest} if digest else None)
    with listeners.writing(dst), open_destination(dst, compress=False) as f:
        f.write(data)


def safetensors_to_fdl(src: PathLike, dst: Destination, *, checksum: bool = True) -> None:
    """Write every tensor of the ``.safetensors`` file ``src`` to ``dst`` in the ``.fdl`` format."""
    st = _safetensors()
    try:
        with st.safe_open(os.fspath(src), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    except (OSError, st.SafetensorError) as exc:
        raise CheckpointError(
            f"cannot read safetensors file: {exc}", source=os.fspath(src)
        ) from exc
    api.save_checkpoint(dst, tensors, None, metadata.get(HASH_KEY), checksum=checksum)
