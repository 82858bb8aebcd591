"""One file to resume training exactly: model, optimizer, scheduler, counters and RNG states."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

from flodl.checkpoint import api, codec, tree
from flodl.checkpoint import format as fmt
from flodl.checkpoint.errors import CheckpointError
from flodl.checkpoint.optimizer import apply_optimizer, decode_optimizer, encode_optimizer
from flodl.checkpoint.streams import Destination, Source, open_destination, open_source

META_ENTRY = "training.json"
FORMAT = "flodl.training"
VERSION = 1
MODEL_PREFIX = "model/"
OPTIMIZER_PREFIX = "optimizer/"
STATE_PREFIX = "state/"


class NamedModule(Protocol):
    def named_parameters(self) -> Any: ...
    def named_buffers(self) -> Any: ...


@dataclass
class TrainingState:
    """What :func:`load_training_state` restored besides the tensors it copied in place."""

    epoch: int | None = None
    step: int | None = None
    extra: Any = None
    report: api.LoadReport = field(default_factory=api.LoadReport)


def _hash_of(model: NamedModule) -> str | None:
    method = getattr(model, "structural_hash", None)
    return method() if callable(method) else None


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        name, keys, pos, has_gauss, gauss = np.random.get_state()  # type: ignore[misc]
        state["numpy"] = (name, torch.from_numpy(keys.astype("int64")), pos, has_gauss, gauss)
    except ImportError:  # numpy is a dependency, but the RNG state is optional
        pass
    return state


def _prepare_rng(state: Any, source: str) -> Callable[[], None]:
    """Validate a stored RNG state; returns the function that restores it."""
    try:
        torch_state = state["torch"]
        if not (isinstance(torch_state, torch.Tensor) and torch_state.dtype == torch.uint8):
            raise TypeError("torch RNG state is not a byte tensor")
        version, internal, gauss = state["python"]
        python_state = (version, tuple(internal), gauss)
        random.Random().setstate(python_state)  # validates without touching the global RNG
        cuda = list(state.get("cuda") or [])
        numpy_state = None
        if state.get("numpy") is not None:
            name, keys, pos, has_gauss, cached = state["numpy"]
            numpy_state = (name, keys.numpy().astype("uint32"), pos, has_gauss, cached)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(
            f"stored RNG state is malformed ({exc}) — the file is corrupted", source=source
        ) from exc

    def restore() -> None:
        torch.set_rng_state(torch_state)
        random.setstate(python_state)
        if cuda and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(cuda)
        if numpy_state is not None:
            import numpy as np

            np.random.set_state(numpy_state)

    return restore


def save_training_state(
    dest: Destination,
    model: NamedModule,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    *,
    epoch: int | None = None,
    step: int | None = None,
    extra: Any = None,
    rng: bool = True,
    checksum: bool = True,
    compress: bool | None = None,
) -> None:
    """Save everything needed to resume training into one ``.fdl`` file (atomic, no pickle).

    Model tensors are stored as ``model/<name>`` entries (parameters, then buffers), optimizer
    tensors as ``optimizer/...``; the scheduler's ``state_dict()``, ``epoch``, ``step``,
    ``extra`` (numbers, strings, lists, dicts, tensors) and the torch/CUDA/Python/NumPy RNG
    states go alongside. See :func:`load_training_state`.
    """
    entries: list[tuple[str, torch.Tensor]] = [
        (MODEL_PREFIX + name, t) for name, t in [*model.named_parameters(), *model.named_buffers()]
    ]
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "epoch": epoch,
        "step": step,
        "model_entries": [name for name, _ in entries],
    }
    if optimizer is not None:
        doc["optimizer"], optim_tensors = encode_optimizer(optimizer, OPTIMIZER_PREFIX)
        entries += optim_tensors
    state_tensors: list[tuple[str, torch.Tensor]] = []
    doc["scheduler"] = (
        None
        if scheduler is None
        else tree.encode(scheduler.state_dict(), STATE_PREFIX, state_tensors, "scheduler")
    )
    doc["extra"] = tree.encode(extra, STATE_PREFIX, state_tensors, "extra")
    doc["rng"] = tree.encode(_rng_state(), STATE_PREFIX, state_tensors, "rng") if rng else None
    entries += state_tensors
    entries.append((META_ENTRY, tree.to_bytes_tensor(doc)))
    prepared = codec.prepare(codec.named_list(entries, "training state"))
    with open_destination(dest, compress=compress) as f:
        codec.encode(f, prepared, fmt.encode_hash(_hash_of(model)), checksum=checksum)


def load_training_state(
    src: Source,
    model: NamedModule,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    *,
    strict_hash: bool = True,
    strict_shapes: bool = True,
    restore_rng: bool = True,
) -> TrainingState:
    """Restore what :func:`save_training_state` wrote; nothing is modified unless all of it is valid.

    Model tensors are loaded like :func:`load_checkpoint` (``report`` says what was loaded,
    skipped or missing); optimizer and scheduler state are replaced; RNG states are restored
    when ``restore_rng``. Returns the stored ``epoch``, ``step`` and ``extra``.
    """
    params = list(model.named_parameters())
    buffers = list(model.named_buffers())
    expected = _hash_of(model) if strict_hash else None
    cut = len(MODEL_PREFIX)
    with open_source(src) as reader:
        decoded = codec.decode(
            reader,
            keep=api.loadable(
                params, buffers, lambda n: n[cut:] if n.startswith(MODEL_PREFIX) else None
            ),
            on_header=lambda h: api.check_hash(
                h, expected, source=reader.name, opt_out="pass strict_hash=False to load anyway"
            ),
        )
    source = reader.name
    meta = decoded.tensors.get(META_ENTRY)
    if meta is None:
        raise CheckpointError(
            f"no {META_ENTRY!r} entry: not a training state file — save one with fl.save_training_state",
            source=source,
        )
    doc = tree.from_bytes_tensor(meta, META_ENTRY)
    if not (
        isinstance(doc, dict) and doc.get("format") == FORMAT and doc.get("version") == VERSION
    ):
        raise CheckpointError("unsupported or corrupted training state header", source=source)
    listed = doc.get("model_entries")
    if not (
        isinstance(listed, list)
        and all(isinstance(n, str) and n.startswith(MODEL_PREFIX) for n in listed)
    ):
        raise CheckpointError("malformed model entry list — the file is corrupted", source=source)
    model_names = set(listed)
    model_only = codec.Decoded(  # the model's entries under the model's own names
        decoded.header,
        [replace(e, name=e.name[cut:]) for e in decoded.entries if e.name in model_names],
        {n[cut:]: t for n, t in decoded.tensors.items() if n in model_names},
        decoded.checksummed,
    )
    report, plan = api.plan_load(
        model_only, params, buffers, strict_shapes=strict_shapes, source=source
    )
    optim_state = None
    if optimizer is not None:
        if doc.get("optimizer") is None:
            raise CheckpointError(
                "the file holds no optimizer state — pass optimizer=None", source=source
            )
        optim_state = decode_optimizer(doc["optimizer"], decoded.tensors, optimizer, source)
    sched_state = None
    if scheduler is not None:
        if doc.get("scheduler") is None:
            raise CheckpointError(
                "the file holds no scheduler state — pass scheduler=None", source=source
            )
        sched_state = tree.decode(doc["scheduler"], decoded.tensors)
        if not isinstance(sched_state, dict) or not set(sched_state) <= set(scheduler.state_dict()):
            raise CheckpointError(
                f"stored scheduler state does not fit {type(scheduler).__name__} "
                "— it was saved for another scheduler, or the file is corrupted",
                source=source,
            )
    rng = tree.decode(doc.get("rng"), decoded.tensors) if restore_rng else None
    restore = _prepare_rng(rng, source) if rng is not None else None
    extra = tree.decode(doc.get("extra"), decoded.tensors)
    for key in ("epoch", "step"):
        if doc.get(key) is not None and not isinstance(doc[key], int):
            raise CheckpointError(
                f"stored {key} is not an integer — the file is corrupted", source=source
            )
    # Everything is validated: from here on, apply.
    api.commit(plan)
    if optimizer is not None and optim_state is not None:
        apply_optimizer(optimizer, optim_state, source)
    if scheduler is not None and sched_state is not None:
        scheduler.load_state_dict(sched_state)
    if restore is not None:
        restore()
    return TrainingState(doc.get("epoch"), doc.get("step"), extra, report)
