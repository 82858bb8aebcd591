"""Optimizer state in the ``.fdl`` container: tensors as entries, the rest as checked JSON.

Works for any ``torch.optim.Optimizer`` whose ``state_dict()`` holds tensors, numbers,
strings, booleans, None, lists, tuples and dicts (SGD, Adam, AdamW, RMSprop, Adagrad, RAdam,
NAdam and the rest of ``torch.optim``). Nothing is pickled; the whole file is validated
against the optimizer before its state is replaced.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch

from flodl.checkpoint import codec, listeners, tree
from flodl.checkpoint import format as fmt
from flodl.checkpoint.errors import CheckpointError
from flodl.checkpoint.streams import (
    CHUNK_BYTES,
    Destination,
    Reader,
    Source,
    open_destination,
    open_source,
)

META_ENTRY = "optimizer.json"
FORMAT = "flodl.optimizer"
VERSION = 1
# Per-parameter state that must have the parameter's shape (checked before loading).
PARAM_SHAPED = frozenset(
    {
        "exp_avg",
        "exp_avg_sq",
        "max_exp_avg_sq",
        "momentum_buffer",
        "square_avg",
        "grad_avg",
        "sum",
        "acc_delta",
        "ax",
        "prev",
    }
)


def encode_optimizer(
    optimizer: torch.optim.Optimizer, prefix: str
) -> tuple[dict[str, Any], list[tuple[str, torch.Tensor]]]:
    """The JSON document and tensor entries describing ``optimizer``'s state."""
    sd = optimizer.state_dict()
    tensors: list[tuple[str, torch.Tensor]] = []
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "class": type(optimizer).__name__,
        "state": tree.encode(sd["state"], prefix, tensors, "state"),
        "param_groups": tree.encode(sd["param_groups"], prefix, tensors, "param_groups"),
    }
    return doc, tensors


def decode_optimizer(
    doc: Any, tensors: dict[str, torch.Tensor], optimizer: torch.optim.Optimizer, source: str
) -> dict[str, Any]:
    """A validated ``state_dict`` for ``optimizer`` (raises :class:`CheckpointError`)."""

    def fail(message: str) -> CheckpointError:
        return CheckpointError(message, source=source)

    if not (isinstance(doc, dict) and doc.get("format") == FORMAT):
        raise fail("not an optimizer state file — save one with fl.save_optimizer_state")
    if doc.get("version") != VERSION:
        raise fail(
            f"unsupported optimizer state version {doc.get('version')!r} — written by a newer flodl?"
        )
    name = type(optimizer).__name__
    if doc.get("class") != name:
        raise fail(f"the file holds {doc.get('class')} state but the optimizer is {name}")
    state = tree.decode(doc.get("state"), tensors)
    groups = tree.decode(doc.get("param_groups"), tensors)
    if not isinstance(state, dict) or not all(
        isinstance(k, int) and isinstance(v, dict) and all(isinstance(kk, str) for kk in v)
        for k, v in state.items()
    ):
        raise fail("malformed optimizer state — the file is corrupted")
    if not isinstance(groups, list) or not all(
        isinstance(g, dict)
        and isinstance(g.get("params"), list)
        and all(isinstance(i, int) and not isinstance(i, bool) for i in g["params"])
        for g in groups
    ):
        raise fail("malformed optimizer param_groups — the file is corrupted")
    current = optimizer.param_groups
    saved_count = sum(len(g["params"]) for g in groups)
    current_count = sum(len(g["params"]) for g in current)
    if len(groups) != len(current) or saved_count != current_count:
        raise fail(
            f"{name}: param count mismatch: checkpoint={saved_count} in {len(groups)} group(s) "
            f"optimizer={current_count} in {len(current)} group(s) — it was saved for another model"
        )
    for index, (saved, live) in enumerate(zip(groups, current, strict=True)):
        if len(saved["params"]) != len(live["params"]):
            raise fail(
                f"{name}: group {index} has {len(saved['params'])} params in the file, "
                f"{len(live['params'])} in the optimizer"
            )
    ids = list(itertools.chain.from_iterable(g["params"] for g in groups))
    if len(set(ids)) != len(ids):
        raise fail("optimizer param_groups repeat a parameter id — the file is corrupted")
    params = dict(
        zip(ids, itertools.chain.from_iterable(g["params"] for g in current), strict=True)
    )
    for pid, slots in state.items():
        if pid not in params:
            raise fail(f"optimizer state for unknown parameter id {pid} — the file is corrupted")
        for key, value in slots.items():
            if (
                key in PARAM_SHAPED
                and isinstance(value, torch.Tensor)
                and value.shape != params[pid].shape
            ):
                raise fail(
                    f"{name}: state {key!r} of parameter {pid} has shape "
                    f"{fmt.shape_str(value.shape)}, the parameter {fmt.shape_str(params[pid].shape)}"
                )
    return {"state": state, "param_groups": groups}


def apply_optimizer(
    optimizer: torch.optim.Optimizer, state_dict: dict[str, Any], source: str
) -> Callable[[], None]:
    """Load ``state_dict`` into ``optimizer``, all or nothing; returns how to undo it.

    torch's ``load_state_dict`` builds the new state aside, but subclasses then post-process it
    in ``__setstate__`` (Adam reads every ``step``), so a malformed state can fail after it was
    installed. Loading replaces the ``state`` and ``param_groups`` objects without mutating the
    old ones, so putting those references back restores the optimizer exactly.
    """
    previous = optimizer.state, optimizer.param_groups

    def undo() -> None:
        optimizer.__dict__.update(state=previous[0], param_groups=previous[1])

    try:
        optimizer.load_state_dict(state_dict)
    except Exception as exc:
        undo()
        raise CheckpointError(
            f"the optimizer rejected the stored state ({type(exc).__name__}: {exc}) "
            "— it is unchanged; the file was saved for another optimizer or is corrupted",
            source=source,
        ) from exc
    return undo


def save_optimizer_state(
    optimizer: torch.optim.Optimizer,
    dest: Destination,
    *,
    format: str = "fdl",
    checksum: bool = True,
    compress: bool | None = None,
) -> None:
    """Save ``optimizer.state_dict()`` to ``dest`` as a ``.fdl`` file (atomic for paths, no pickle).

    ``format="rust"`` writes the Rust flodl's ``save_state`` stream instead (SGD, Adam,
    AdamW and RMSprop; see :mod:`flodl.checkpoint.rust_optim` for the mapping), which the
    Rust flodl's ``load_state_file`` reads; :func:`load_optimizer_state` recognises either.

    >>> import io, torch, flodl as fl
    >>> w = torch.nn.Parameter(torch.ones(3))
    >>> opt = torch.optim.Adam([w], lr=0.1)
    >>> w.sum().backward(); opt.step()
    >>> buf = io.BytesIO(); fl.save_optimizer_state(opt, buf); _ = buf.seek(0)
    >>> fresh = torch.optim.Adam([w], lr=0.5)
    >>> fl.load_optimizer_state(fresh, buf)
    >>> fresh.param_groups[0]["lr"], int(fresh.state[w]["step"])
    (0.1, 1)
    """
    if format == "rust":
        from flodl.checkpoint.api import check_compression
        from flodl.checkpoint.rust_optim import encode_rust_optimizer

        data = encode_rust_optimizer(optimizer)
        compress = check_compression(dest, compress, rust_compatible=True)
        with listeners.writing(dest), open_destination(dest, compress=compress) as f:
            f.write(data)
        return
    if format != "fdl":
        raise CheckpointError(f"unknown optimizer state format {format!r}: use 'fdl' or 'rust'")
    doc, tensors = encode_optimizer(optimizer, "optimizer/")
    entries = codec.named_list(
        [(META_ENTRY, tree.to_bytes_tensor(doc)), *tensors], "optimizer state"
    )
    prepared = codec.prepare(entries)
    with listeners.writing(dest), open_destination(dest, compress=compress) as f:
        codec.encode(f, prepared, fmt.ZERO_HASH, checksum=checksum)


def load_optimizer_state(
    optimizer: torch.optim.Optimizer, src: Source, *, require_verified: bool = False
) -> None:
    """Restore state saved by :func:`save_optimizer_state` (either format, recognised from the
    content: a ``.fdl`` file starts with ``FDLC``, a Rust-format stream has no magic); the
    optimizer is untouched on error. ``require_verified=True`` refuses anything without an
    integrity trailer, Rust-format streams included."""
    with open_source(src) as reader:
        head = reader.read_upto(len(fmt.MAGIC))
        if head != fmt.MAGIC:
            data = head + _rest(reader)
            from flodl.checkpoint.rust_optim import decode_rust_optimizer

            if require_verified:
                raise CheckpointError(
                    "not verified: no integrity trailer — this is the Rust original's optimizer "
                    "stream, which has no checksums; pass require_verified=False to load it",
                    source=reader.name,
                )
            state_dict = decode_rust_optimizer(data, optimizer, reader.name)
            apply_optimizer(optimizer, state_dict, reader.name)
            return
        reader.pos = 0
        decoded = codec.decode(_Replay(reader, head))
    if require_verified:
        from flodl.checkpoint.api import check_verified

        check_verified(decoded, reader.name)
    meta = decoded.tensors.get(META_ENTRY)
    if meta is None:
        raise CheckpointError(
            f"no {META_ENTRY!r} entry: not an optimizer state file — "
            "save one with fl.save_optimizer_state",
            source=reader.name,
        )
    doc = tree.from_bytes_tensor(meta, META_ENTRY)
    state_dict = decode_optimizer(doc, decoded.tensors, optimizer, reader.name)
    apply_optimizer(optimizer, state_dict, reader.name)


def _rest(reader: Reader) -> bytes:
    """Everything left in ``reader`` (a Rust-format optimizer stream has no length header)."""
    chunks = []
    while chunk := reader.read_upto(CHUNK_BYTES):
        chunks.append(chunk)
    return b"".join(chunks)


class _Replay(Reader):
    """``reader`` with the bytes already sniffed from it served again first."""

    def __init__(self, reader: Reader, head: bytes):
        super().__init__(reader._f, name=reader.name, size=reader.size, gzipped=reader.gzipped)
        self._head = head

    def _readinto(self, view: memoryview) -> int:
        n = 0
        if self._head:
            n = min(len(view), len(self._head))
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            if n == len(view):
                return n
        return n + super()._readinto(view[n:])
