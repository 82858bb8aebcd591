"""Safe serialisation of small Python structures (optimizer and scheduler state, RNG states).

Plain JSON plus three tagged forms: ``{"__tuple__": [...]}``, ``{"__dict__": [[key, value], ...]}``
(keys may be ints, as in an optimizer's ``state``) and ``{"__tensor__": "entry name"}`` (the
tensor itself is a regular ``.fdl`` entry). No code is ever constructed while decoding.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from flodl.checkpoint.errors import CheckpointError

_SCALARS = (type(None), bool, int, float, str)
MAX_DEPTH = 64


def encode(
    value: Any, prefix: str, tensors: list[tuple[str, torch.Tensor]], where: str = ""
) -> Any:
    """A JSON-able form of ``value``; each tensor is appended to ``tensors`` named ``prefix`` + its path
    (e.g. ``optimizer/state/0/exp_avg``)."""
    if isinstance(value, torch.Tensor):
        name = f"{prefix}{where}" if where else f"{prefix}{len(tensors)}"
        tensors.append((name, value))
        return {"__tensor__": name}
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, tuple):
        return {
            "__tuple__": [encode(v, prefix, tensors, f"{where}/{i}") for i, v in enumerate(value)]
        }
    if isinstance(value, list):
        return [encode(v, prefix, tensors, f"{where}/{i}") for i, v in enumerate(value)]
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            if not isinstance(key, _SCALARS):
                raise CheckpointError(
                    f"cannot store a {type(key).__name__} dict key at {where or 'top level'}"
                )
            items.append([key, encode(item, prefix, tensors, f"{where}/{key}")])
        return {"__dict__": items}
    raise CheckpointError(
        f"cannot store a {type(value).__name__} at {where or 'top level'} — only tensors, numbers, "
        "strings, booleans, None, lists, tuples and dicts can go into a .fdl file (no pickle)"
    )


def decode(value: Any, tensors: dict[str, torch.Tensor], depth: int = 0) -> Any:
    """Inverse of :func:`encode`; every tag and tensor reference is checked."""
    if depth > MAX_DEPTH:
        raise CheckpointError(
            f"state nested deeper than {MAX_DEPTH} levels — the file is corrupted"
        )
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, list):
        return [decode(v, tensors, depth + 1) for v in value]
    if isinstance(value, dict) and len(value) == 1:
        ((tag, body),) = value.items()
        if tag == "__tensor__" and isinstance(body, str):
            if body not in tensors:
                raise CheckpointError(
                    f"state refers to a missing tensor entry {body!r} — the file is corrupted"
                )
            return tensors[body]
        if tag == "__tuple__" and isinstance(body, list):
            return tuple(decode(v, tensors, depth + 1) for v in body)
        if tag == "__dict__" and isinstance(body, list):
            out = {}
            for pair in body:
                if not (
                    isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], _SCALARS)
                ):
                    raise CheckpointError("malformed dict in stored state — the file is corrupted")
                out[pair[0]] = decode(pair[1], tensors, depth + 1)
            return out
    raise CheckpointError("unrecognised value in stored state — the file is corrupted")


def to_bytes_tensor(document: Any) -> torch.Tensor:
    data = json.dumps(document, separators=(",", ":"), allow_nan=True).encode("utf-8")
    return (
        torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if data
        else torch.empty(0, dtype=torch.uint8)
    )


def from_bytes_tensor(tensor: torch.Tensor, what: str) -> Any:
    if tensor.dtype != torch.uint8 or tensor.dim() != 1:
        raise CheckpointError(f"{what} entry is not a byte string — the file is corrupted")
    try:
        return json.loads(tensor.numpy().tobytes().decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(
            f"{what} entry is not valid JSON ({exc}) — the file is corrupted"
        ) from None
