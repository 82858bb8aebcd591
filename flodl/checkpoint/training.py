"""One file to resume training exactly: model, optimizer, scheduler, counters and RNG states.

Loading is all-or-nothing: every part is validated against the live objects before any is
applied (see :func:`load_training_state`).
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

from flodl.checkpoint import api, codec, listeners, tree
from flodl.checkpoint import format as fmt
from flodl.checkpoint.errors import CheckpointError, HashRefusedError
from flodl.checkpoint.optimizer import apply_optimizer, decode_optimizer, encode_optimizer
from flodl.checkpoint.streams import (
    Destination,
    Source,
    describe,
    is_path,
    open_destination,
    open_source,
)
from flodl.optim.errors import OptimError
from flodl.optim.lr import ScheduledLR, check_same_schedule, schedule_identity
from flodl.random import Rng, RngError

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

        legacy = np.random.get_state(legacy=True)
        assert isinstance(legacy, tuple)  # the MT19937 tuple form, as legacy=True asks
        name, keys, pos, has_gauss, gauss = legacy
        state["numpy"] = (name, torch.from_numpy(keys.astype("int64")), pos, has_gauss, gauss)
    except ImportError:  # numpy is a dependency, but the RNG state is optional
        pass
    return state


_MT19937_KEYS = 624  # numpy's legacy generator: 624 32-bit words and a position in [0, 624]


def _generator_state(value: Any, what: str, device: str = "cpu") -> torch.Tensor:
    """A torch generator state, checked by a throwaway generator (dtype, size, validity)."""
    if not (isinstance(value, torch.Tensor) and value.dtype == torch.uint8 and value.dim() == 1):
        raise ValueError(f"{what} RNG state is not a 1-D uint8 tensor")
    try:
        torch.Generator(device=device).set_state(value)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ValueError(f"{what} RNG state was refused by torch ({exc})") from None
    return value


def _numpy_state(value: Any) -> tuple[Any, ...]:
    import numpy as np

    name, keys, pos, has_gauss, cached = value
    if name != "MT19937":
        raise ValueError(f"numpy RNG state is for {name!r}, not the legacy MT19937 generator")
    if not (
        isinstance(keys, torch.Tensor)
        and keys.dtype == torch.int64
        and keys.shape == (_MT19937_KEYS,)
    ):
        raise ValueError(f"numpy RNG keys are not {_MT19937_KEYS} int64 values")
    if bool(((keys < 0) | (keys >= 1 << 32)).any()):
        raise ValueError("numpy RNG keys are not 32-bit words")
    if isinstance(pos, bool) or not isinstance(pos, int) or not 0 <= pos <= _MT19937_KEYS:
        raise ValueError(f"numpy RNG position {pos!r} is outside [0, {_MT19937_KEYS}]")
    state = (name, keys.numpy().astype("uint32"), pos, has_gauss, cached)
    np.random.RandomState().set_state(state)  # numpy's own checks, on a throwaway generator
    return state


def _prepare_rng(state: Any, source: str) -> Callable[[], None]:
    """Validate every stored RNG state; returns the function that restores them (cannot fail)."""
    try:
        if not isinstance(state, dict):
            raise TypeError("not a mapping")
        torch_state = _generator_state(state["torch"], "torch")
        version, internal, gauss = state["python"]
        python_state = (version, tuple(internal), gauss)
        random.Random().setstate(python_state)  # validates without touching the global RNG
        cuda = list(state.get("cuda") or [])
        devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
        for index, cuda_state in enumerate(cuda):
            if index < devices:
                _generator_state(cuda_state, f"CUDA device {index}", f"cuda:{index}")
            elif not (isinstance(cuda_state, torch.Tensor) and cuda_state.dtype == torch.uint8):
                raise ValueError(f"CUDA device {index} RNG state is not a uint8 tensor")
        numpy_state = None if state.get("numpy") is None else _numpy_state(state["numpy"])
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise CheckpointError(
            f"stored RNG state is malformed ({exc}) — the file is corrupted; "
            "pass restore_rng=False to resume without it",
            source=source,
        ) from exc

    def restore() -> None:
        torch.set_rng_state(torch_state)
        random.setstate(python_state)
        # A machine with fewer GPUs than the one that saved restores the devices it has.
        for index, cuda_state in enumerate(cuda[:devices]):
            torch.cuda.set_rng_state(cuda_state, index)
        if numpy_state is not None:
            import numpy as np

            np.random.set_state(numpy_state)

    return restore


def _is_stateful(scheduler: Any) -> bool:
    return callable(getattr(scheduler, "state_dict", None)) and callable(
        getattr(scheduler, "load_state_dict", None)
    )


def _is_pure(scheduler: Any) -> bool:
    return not _is_stateful(scheduler) and callable(getattr(scheduler, "lr", None))


def _schedule_of(scheduler: Any) -> dict[str, Any]:
    """What identifies a pure scheduler: its class and, for flodl's (frozen dataclasses), its
    settings — their repr is exact (floats round-trip) and the same in every process."""
    config = repr(scheduler) if dataclasses.is_dataclass(scheduler) else None
    return {"class": type(scheduler).__qualname__, "config": config}


def _scheduler_doc(
    scheduler: Any, step: int | None, tensors: list[tuple[str, torch.Tensor]]
) -> dict[str, Any]:
    """The document keys describing ``scheduler`` (raises before anything is written)."""
    if scheduler is None:
        return {"scheduler": None}
    name = type(scheduler).__name__
    if _is_stateful(scheduler):
        state = tree.encode(scheduler.state_dict(), STATE_PREFIX, tensors, "scheduler")
        return {"scheduler": state, "scheduler_class": name}
    if _is_pure(scheduler):
        if step is None:
            raise CheckpointError(
                f"{name} is a pure function of the step, so its position is the step: pass "
                "step= (the next step to run) and resume with fl.optim.apply(scheduler, "
                "optimizer, state.step)"
            )
        return {"scheduler": None, "schedule": _schedule_of(scheduler)}
    raise CheckpointError(
        f"cannot save a {name} as a scheduler: it needs .lr(step) (flodl's schedulers) or "
        "state_dict()/load_state_dict() (torch's, fl.optim.PlateauScheduler, ScheduledLR)"
    )


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list | tuple):
        return "sequence"
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, dict):
        return "dict"  # a Counter or an OrderedDict in the scheduler is a plain dict in the file
    return type(value).__name__


def _conform(stored: Any, live: Any) -> Any:
    """``stored`` with the mapping types of the live state: JSON only knows plain dicts, while a
    MultiStepLR keeps its milestones in a ``Counter`` (and calls ``.elements()`` on it)."""
    if isinstance(stored, dict) and isinstance(live, dict):
        out = {key: _conform(value, live.get(key)) for key, value in stored.items()}
        if type(live) is dict:
            return out
        rebuilt = copy.copy(live)  # keeps the type and, for a defaultdict, its factory
        rebuilt.clear()
        dict.update(rebuilt, out)  # dict's update: a Counter's would add counts
        return rebuilt
    sequences = isinstance(stored, list | tuple) and isinstance(live, list | tuple)
    if sequences and len(stored) == len(live):
        return type(stored)(_conform(a, b) for a, b in zip(stored, live, strict=True))
    return stored


def _misfit(stored: Any, live: Any, where: str) -> str | None:
    """Where ``stored`` differs in structure from the live scheduler's state (None: it fits).

    None on either side fits anything: schedulers hold optional values that appear later.
    """
    if stored is None or live is None:
        return None
    kind, live_kind = _kind(stored), _kind(live)
    if kind != live_kind:
        return f"{where} is a {kind} in the file, a {live_kind} in the scheduler"
    if kind == "sequence":
        if len(stored) != len(live):
            return f"{where} has {len(stored)} items in the file, {len(live)} in the scheduler"
        for index, (a, b) in enumerate(zip(stored, live, strict=True)):
            if found := _misfit(a, b, f"{where}[{index}]"):
                return found
    elif kind == "dict":
        for key in stored:
            if key not in live:
                return f"{where} has {key!r}, which the scheduler does not"
            if found := _misfit(stored[key], live[key], f"{where}[{key!r}]"):
                return found
    elif kind == "tensor" and stored.shape != live.shape:
        return f"{where} has shape {fmt.shape_str(stored.shape)}, the scheduler's {fmt.shape_str(live.shape)}"
    return None


Apply = Callable[[], Callable[[], None]]  # applies one part; returns how to undo it


def _saved_scheduler(doc: dict[str, Any]) -> str:
    """What the file holds for a scheduler, in words, for error messages."""
    schedule = doc.get("schedule")
    if isinstance(schedule, dict):
        return f"the pure scheduler {schedule.get('config') or schedule.get('class')}"
    if doc.get("scheduler") is not None:
        return f"{doc.get('scheduler_class') or 'a stateful scheduler'}'s state"
    return "no scheduler"


def _prepare_scheduler(
    scheduler: Any, doc: dict[str, Any], tensors: dict[str, torch.Tensor], source: str
) -> Apply | None:
    """Validate the stored scheduler against ``scheduler``; returns how to apply it (if anything)."""
    name = type(scheduler).__name__
    stored, schedule = doc.get("scheduler"), doc.get("schedule")
    saved_as = _saved_scheduler(doc)
    if _is_stateful(scheduler):
        if stored is None:
            raise CheckpointError(
                f"the file holds {saved_as}, not state for {name} — pass the scheduler it was "
                "saved with, or scheduler=None",
                source=source,
            )
        state = tree.decode(stored, tensors)
        saved_class = doc.get("scheduler_class")
        if saved_class is not None and saved_class != name:
            problem: str | None = f"the file holds {saved_class} state"
        elif not isinstance(state, dict):
            problem = "it is not a mapping"
        else:
            problem = _misfit(state, scheduler.state_dict(), "the state")
        if not problem and isinstance(scheduler, ScheduledLR):
            _check_scheduled_lr(scheduler, state, source)
        if problem:
            raise CheckpointError(
                f"stored scheduler state does not fit {name}: {problem} — it was saved for "
                "another scheduler, or the file is corrupted",
                source=source,
            )
        state = _conform(state, scheduler.state_dict())

        def apply() -> Callable[[], None]:
            previous = scheduler.state_dict()
            scheduler.load_state_dict(state)
            return lambda: scheduler.load_state_dict(previous)

        return apply
    if _is_pure(scheduler):
        mine = _schedule_of(scheduler)
        if schedule != mine:
            raise CheckpointError(
                f"the file holds {saved_as}, but the scheduler passed is "
                f"{mine['config'] or mine['class']} — pass the same schedule (it resumes at "
                "state.step), or scheduler=None to continue with a different one",
                source=source,
            )
        return None  # nothing to restore: a pure scheduler's position is the stored step
    raise CheckpointError(
        f"cannot restore a {name} as a scheduler: it needs .lr(step) or "
        "state_dict()/load_state_dict()",
        source=source,
    )


def _check_scheduled_lr(scheduler: ScheduledLR, state: dict[str, Any], source: str) -> None:
    """A ScheduledLR's state is a step count on the schedule it wraps: on another schedule the
    rate would jump. Refused here, as a pure scheduler's other settings are, before anything
    is applied."""
    try:
        check_same_schedule(state.get("schedule"), scheduler.scheduler)
    except OptimError:
        raise CheckpointError(
            f"the file holds ScheduledLR state following {state.get('schedule')}, but the "
            f"ScheduledLR passed follows {schedule_identity(scheduler.scheduler)} — pass the "
            "same schedule (it resumes where it stopped), or scheduler=None to continue with a "
            "different one",
            source=source,
        ) from None


def _prepare_data_rng(
    data_rng: Rng, doc: dict[str, Any], tensors: dict[str, torch.Tensor], source: str
) -> Apply:
    stored = doc.get("data_rng")
    if stored is None:
        raise CheckpointError("the file holds no data Rng — pass data_rng=None", source=source)
    state = tree.decode(stored, tensors)
    try:
        Rng(0).load_state_dict(state)  # validates on a throwaway generator
    except RngError as exc:
        raise CheckpointError(
            f"stored data Rng state is malformed ({exc}) — the file is corrupted", source=source
        ) from exc

    def apply() -> Callable[[], None]:
        previous = data_rng.state_dict()
        data_rng.load_state_dict(state)
        return lambda: data_rng.load_state_dict(previous)

    return apply


def _prepare_optimizer(
    optimizer: torch.optim.Optimizer,
    doc: dict[str, Any],
    tensors: dict[str, torch.Tensor],
    source: str,
) -> Apply:
    if doc.get("optimizer") is None:
        raise CheckpointError(
            "the file holds no optimizer state — pass optimizer=None", source=source
        )
    state = decode_optimizer(doc["optimizer"], tensors, optimizer, source)

    return lambda: apply_optimizer(optimizer, state, source)


def _undo(undo: list[Callable[[], None]]) -> str:
    """Undo applied parts, newest first; returns what could not be undone ("" if all was)."""
    failed = []
    for step in reversed(undo):
        try:
            step()
        except Exception as exc:
            failed.append(f"{type(exc).__name__}: {exc}")
    return f" (and putting it back failed: {'; '.join(failed)})" if failed else ""


def _commit(
    parts: list[Apply], plan: api.Plan, restore_rng: Callable[[], None] | None, source: str
) -> None:
    """Apply validated parts; if one still fails, undo those already applied, then raise.

    The model is written after every part that can be undone (undoing it would need a copy of
    the model), and the RNG states last: their restore was fully validated and cannot fail.
    """
    undo: list[Callable[[], None]] = []
    try:
        for part in parts:
            undo.append(part())
    except Exception as exc:
        undo_failed = _undo(undo)
        if isinstance(exc, CheckpointError) and not undo_failed:
            raise
        raise CheckpointError(
            f"could not apply the stored state ({type(exc).__name__}: {exc}); "
            f"nothing was changed{undo_failed}",
            source=source,
        ) from exc
    try:
        api.commit(plan)
    except Exception as exc:
        raise CheckpointError(
            f"could not copy the model tensors ({type(exc).__name__}: {exc}); the optimizer and "
            f"scheduler were put back{_undo(undo)}, but the model may be partly loaded "
            "— load it again",
            source=source,
        ) from exc
    if restore_rng is not None:
        restore_rng()


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
    data_rng: Rng | None = None,
    checksum: bool = True,
    compress: bool | None = None,
) -> None:
    """Save everything needed to resume training into one ``.fdl`` file (atomic, no pickle).

    Model tensors are stored as ``model/<name>`` entries (parameters, then buffers), optimizer
    tensors as ``optimizer/...``; ``epoch``, ``step``, ``extra`` (numbers, strings, lists, dicts,
    tensors) and the torch/CUDA/Python/NumPy RNG states (``rng=True``) go alongside.

    ``scheduler`` is either stateful — anything with ``state_dict()``/``load_state_dict()``:
    torch's schedulers, :class:`fl.optim.PlateauScheduler`, :class:`fl.optim.ScheduledLR` — and
    its state is stored, or one of flodl's pure schedulers (``.lr(step)``, no state): then its
    position *is* the step, so ``step`` (the next step to run) is required, and the schedule's
    settings are stored so a resume with a different schedule is caught. ``data_rng`` (an
    :class:`fl.Rng`, e.g. the one shuffling the data) is saved and restored in place.
    """
    entries: list[tuple[str, torch.Tensor]] = [
        (MODEL_PREFIX + name, t) for name, t in [*model.named_parameters(), *model.named_buffers()]
    ]
    for key, value in (("epoch", epoch), ("step", step)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise CheckpointError(f"{key} must be an integer or None, got {value!r}")
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
    doc.update(_scheduler_doc(scheduler, step, state_tensors))
    doc["extra"] = tree.encode(extra, STATE_PREFIX, state_tensors, "extra")
    doc["rng"] = tree.encode(_rng_state(), STATE_PREFIX, state_tensors, "rng") if rng else None
    if data_rng is not None:
        if not isinstance(data_rng, Rng):
            raise CheckpointError(f"data_rng must be an fl.Rng, got {type(data_rng).__name__}")
        doc["data_rng"] = tree.encode(
            data_rng.state_dict(), STATE_PREFIX, state_tensors, "data_rng"
        )
    entries += state_tensors
    entries.append((META_ENTRY, tree.to_bytes_tensor(doc)))
    prepared = codec.prepare(codec.named_list(entries, "training state"))
    with listeners.writing(dest), open_destination(dest, compress=compress) as f:
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
    data_rng: Rng | None = None,
    require_verified: bool = False,
) -> TrainingState:
    """Restore what :func:`save_training_state` wrote: all of it, or — on any error — none of it.

    Everything is validated first (model tensors, optimizer state against the live optimizer,
    scheduler state against the live scheduler, every RNG state), then applied. Model tensors
    are loaded like :func:`load_checkpoint` (``report`` says what was loaded, skipped or
    missing, and a partial load logs a warning); optimizer, scheduler and ``data_rng`` state
    are replaced; the global RNG states are restored when ``restore_rng``. A pure scheduler
    is checked against the stored schedule and left as it is: resume it at the returned
    ``step``. Returns ``epoch``, ``step`` and ``extra``. ``require_verified=True`` refuses a
    file without an integrity trailer (nothing is applied).
    """
    params = list(model.named_parameters())
    buffers = list(model.named_buffers())
    expected = _hash_of(model) if strict_hash else None
    cut = len(MODEL_PREFIX)
    model_entry = api.loadable(
        params, buffers, lambda n: n[cut:] if n.startswith(MODEL_PREFIX) else None
    )

    def wanted(info: codec.EntryInfo) -> bool:
        # Only what this call applies is materialised: the optimizer's tensors are hashed and
        # passed over when no optimizer is given (the file is mapped, so that costs no copy).
        if info.name.startswith(OPTIMIZER_PREFIX):
            return optimizer is not None
        return model_entry(info)

    start = src.tell() if not is_path(src) and api.seekable(src) else None  # type: ignore[union-attr]

    def on_header(header: codec.Header) -> None:
        if not api.hash_matches(header, expected):
            raise HashRefusedError(header)

    try:
        with open_source(src, mapped=True) as reader:
            decoded = codec.decode(reader, keep=wanted, on_header=on_header)
    except HashRefusedError as refused:
        entries = api.entries_again(src, start)
        model_entries = [
            replace(e, name=e.name[cut:]) for e in entries or () if e.name.startswith(MODEL_PREFIX)
        ]
        raise api.hash_mismatch(
            refused.header,
            expected,
            source=describe(src),
            opt_out="pass strict_hash=False to load anyway",
            explanation=""
            if entries is None
            else api.explain_names(model_entries, params, buffers),
        ) from None
    # Model tensors are copied into the model; everything else outlives the load, so it gets
    # its own memory instead of viewing the mapped file.
    decoded.tensors = {
        n: t if n.startswith(MODEL_PREFIX) else t.clone() for n, t in decoded.tensors.items()
    }
    source = reader.name
    if require_verified:
        api.check_verified(decoded, source)
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
    for key in ("epoch", "step"):
        value = doc.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise CheckpointError(
                f"stored {key} is not an integer — the file is corrupted", source=source
            )
    parts: list[Apply] = []
    if optimizer is not None:
        parts.append(_prepare_optimizer(optimizer, doc, decoded.tensors, source))
    if scheduler is not None:
        apply_scheduler = _prepare_scheduler(scheduler, doc, decoded.tensors, source)
        if apply_scheduler is not None:
            parts.append(apply_scheduler)
    if data_rng is not None:
        parts.append(_prepare_data_rng(data_rng, doc, decoded.tensors, source))
    rng = tree.decode(doc.get("rng"), decoded.tensors) if restore_rng else None
    restore = _prepare_rng(rng, source) if rng is not None else None
    extra = tree.decode(doc.get("extra"), decoded.tensors)
    # Everything is validated: from here on, apply.
    _commit(parts, plan, restore, source)
    api.warn_if_partial(report, source)
    return TrainingState(doc.get("epoch"), doc.get("step"), extra, report)
