"""Move weights between a graph and HuggingFace-named safetensors files, all or nothing.

:func:`load_into` reads only the file's header first (names, shapes, dtypes), checks every name and
shape the graph needs (and that a floating-point weight gets a floating-point tensor), and raises
:class:`~flodl.hf.errors.WeightsError` naming the missing keys and the mismatches before any weight
is written, so a failed load never leaves a model half loaded. The whole model takes one dtype, as
in ``transformers``: every tensor is cast to it.
Keys the graph does not use are tolerated and reported (as ``transformers`` does: a base-model
checkpoint often carries a pretraining head). Legacy ``LayerNorm.gamma``/``.beta`` names are read
as ``weight``/``bias``.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from flodl.hf.errors import WeightsError
from flodl.hf.families import Family, rename

log = logging.getLogger("flodl.hf")
_SHOWN = 20
# safetensors' names of the floating dtypes a model can take as a whole
_FLOAT_DTYPES = {
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
}


def _floating(dtype: str) -> bool:
    """Whether a safetensors dtype name (``F16``, ``BF16``, ``F8_E4M3``, ``I64``...) is floating."""
    return dtype.startswith("F") or dtype == "BF16"


@dataclass
class LoadReport:
    """What a load did: ``loaded`` graph names, ``unexpected`` checkpoint keys it ignored, and
    ``initialized`` graph names left at their fresh initialisation (only with ``init_head``)."""

    source: str
    loaded: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    initialized: list[str] = field(default_factory=list)


def hf_names(model: nn.Module, family: Family, prefix: str) -> dict[str, str]:
    """Graph name → HF name for every parameter and persistent buffer (tied weights once)."""
    rows = family.table_for(getattr(model, "config", {}))
    names = [n for n, _ in model.named_parameters()]
    params = {id(p) for p in model.parameters()}
    state = model.state_dict(keep_vars=True)
    names += [n for n, t in state.items() if n not in names and id(t) not in params]
    table: dict[str, str] = {}
    for name in names:
        hf = rename(name, rows, prefix, to_hf=True)
        if hf is None:
            raise WeightsError(
                f"graph parameter {name!r} has no HuggingFace name in the {family.model_type} "
                "table",
                missing=[],
                mismatched=[],
            )
        table[name] = hf
    return table


def bias_alias(model: nn.Module, family: Family) -> tuple[str, str] | None:
    """An untied masked-LM decoder's bias name and the head bias transformers ties to it
    (``cls.predictions.decoder.bias`` / ``cls.predictions.bias``): one value under two names."""
    names = family.decoder_names(family.config(getattr(model, "config", {})))
    if names is None or names[1] is None:
        return None
    return names[0] + "bias", names[1]


def _legacy(key: str) -> str:
    if key.endswith(".gamma"):
        return key[: -len("gamma")] + "weight"
    if key.endswith(".beta"):
        return key[: -len("beta")] + "bias"
    return key


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    more = f" ... and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return shown + more


def read_header(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """Names → (shape, dtype) from a safetensors header, without reading any tensor data."""
    from safetensors import safe_open

    out = {}
    with _readable(path), safe_open(str(path), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 - safe_open has no __iter__
            s = f.get_slice(key)
            out[key] = (tuple(s.get_shape()), s.get_dtype())
    return out


@contextlib.contextmanager
def _readable(path: Path) -> Iterator[None]:
    """Turn safetensors' and the OS's read errors (an empty, truncated or corrupt file) into a
    :class:`WeightsError` that names the file."""
    from safetensors import SafetensorError

    try:
        yield
    except (SafetensorError, OSError) as err:
        raise WeightsError(
            f"{path}: not a readable safetensors file ({err}); download or export it again",
            missing=[],
            mismatched=[],
        ) from err


def read_headers(
    paths: list[Path],
) -> tuple[dict[str, tuple[int, ...]], dict[str, str], dict[str, Path]]:
    """Shapes, safetensors dtype names and the file holding each key, over one file or every
    shard."""
    shapes: dict[str, tuple[int, ...]] = {}
    dtypes: dict[str, str] = {}
    where: dict[str, Path] = {}
    for path in paths:
        for key, (shape, dtype) in read_header(path).items():
            shapes[key] = shape
            dtypes[key] = dtype
            where[key] = path
    return shapes, dtypes, where


def choose_prefix(family: Family, wanted: str, keys: set[str]) -> str:
    """The backbone prefix the file uses: ``wanted``, or the other one (a base-model checkpoint
    loaded into a task model, or a task checkpoint into the bare encoder), as transformers does."""
    probe = "embeddings.word_embeddings.weight"
    for prefix in (wanted, "" if wanted else family.prefix + "."):
        hf = rename(probe, family.table, prefix, to_hf=True)
        if hf in keys:
            return prefix
    return wanted


def load_into(
    model: nn.Module,
    family: Family,
    path: Path | list[Path],
    prefix: str,
    *,
    init_head: bool = False,
    num_labels: int | None = None,
    source: str = "",
    dtype: torch.dtype | None = None,
) -> LoadReport:
    """Validate ``path`` (a safetensors file, or every shard of one) against ``model`` and copy
    every weight in, or raise and copy none.

    ``init_head``: head weights the checkpoint lacks are left freshly initialised, and so are
    those of a classifier whose label count (``num_labels``, the model's) differs from the
    checkpoint's (fine-tuning for other labels). ``dtype``: the one floating dtype of the whole
    model, fresh head included; None takes the checkpoint's dominant one (the most elements).
    Each tensor is cast to it, as ``transformers`` does: an fp16 checkpoint with an fp32
    classifier gives an fp16 model that runs, not a model of mixed dtypes."""
    from safetensors import safe_open

    paths = [path] if isinstance(path, Path) else list(path)
    shapes, dtypes, where = read_headers(paths)
    keys = {_legacy(k): k for k in shapes}
    prefix = choose_prefix(family, prefix, set(keys))
    table = hf_names(model, family, prefix)
    alias = bias_alias(model, family)
    also_used: set[str] = set()
    if alias is not None:
        # a checkpoint may hold the decoder's bias under either name (or both, equal)
        for name, hf in table.items():
            if hf == alias[0] and hf not in keys and alias[1] in keys:
                table[name] = alias[1]
        also_used.add(alias[1])
    state = model.state_dict(keep_vars=True)
    missing, mismatched, mistyped, initialized = [], [], [], []
    relabelled: set[str] = set()  # checkpoint keys of a classifier for another label count
    for name, hf in table.items():
        if hf not in keys:
            if init_head and name.startswith("head."):
                initialized.append(name)
            else:
                missing.append(hf)
            continue
        shape = shapes[keys[hf]]
        mine = tuple(state[name].shape)
        if mine != shape:
            if _other_labels(name, mine, shape, num_labels):
                relabelled.add(keys[hf])
                if init_head:
                    initialized.append(name)
                    continue
            mismatched.append(f"{hf}: checkpoint {list(shape)} vs model {list(state[name].shape)}")
        elif state[name].is_floating_point() and not _floating(dtypes[keys[hf]]):
            # copy_ would cast integers into a float weight without a word
            mistyped.append(f"{hf}: checkpoint {dtypes[keys[hf]]} for a floating-point weight")
    if missing or mismatched or mistyped:
        parts = [f"{source or paths[0]}: the checkpoint does not fit the model; nothing was loaded"]
        if missing:
            parts.append(f"missing keys ({len(missing)}): {_listing(sorted(missing))}")
        if mismatched:
            parts.append(f"shape mismatches ({len(mismatched)}): {_listing(mismatched)}")
        if mistyped:
            parts.append(f"dtype mismatches ({len(mistyped)}): {_listing(mistyped)}")
        head_keys = {table[n] for n in table if n.startswith("head.")}
        if missing and set(missing) <= head_keys and not init_head:
            parts.append(
                "to start a new task head from a base checkpoint, pass init_head=True "
                "(fdl hf export: --init-head)"
            )
        elif not (missing or mistyped) and len(relabelled) == len(mismatched):
            parts.append(
                "the checkpoint's classifier is for another label count: to train a new one, "
                "pass init_head=True (fdl hf export: --init-head)"
            )
        raise WeightsError(
            "\n  ".join(parts), missing=sorted(missing), mismatched=mismatched + mistyped
        )
    used = {table[n] for n in table if n not in initialized} | also_used
    report = LoadReport(
        source=source or str(paths[0]),
        unexpected=sorted(keys[k] for k in keys if k not in used and keys[k] not in relabelled),
        initialized=initialized,
    )
    by_file: dict[Path, list[str]] = {}
    for name, hf in table.items():
        if name not in initialized:
            by_file.setdefault(where[keys[hf]], []).append(name)
    if dtype is None:
        sizes: Counter[torch.dtype] = Counter()
        for names in by_file.values():
            for name in names:
                key = keys[table[name]]
                if dtypes[key] in _FLOAT_DTYPES:
                    sizes[_FLOAT_DTYPES[dtypes[key]]] += math.prod(shapes[key])
        dtype = sizes.most_common(1)[0][0] if sizes else None
    if dtype is not None:
        # before the copy: a fresh head takes it too, so that a bf16 encoder feeds a bf16 head
        model.to(dtype=dtype)
        state = model.state_dict(keep_vars=True)
    with torch.no_grad():
        for file, names in by_file.items():
            with _readable(file), safe_open(str(file), framework="pt") as f:
                for name in names:
                    state[name].copy_(f.get_tensor(keys[table[name]]))  # cast to its dtype
                    report.loaded.append(name)
    if report.unexpected:
        log.warning(
            "%s: %d checkpoint key(s) not used by %s: %s",
            report.source,
            len(report.unexpected),
            type(model).__name__,
            _listing(report.unexpected),
        )
    if report.initialized:
        log.warning(
            "%s: task head not in the checkpoint (or of other shapes), freshly initialised: %s",
            report.source,
            _listing(report.initialized),
        )
    return report


def _other_labels(
    name: str, mine: tuple[int, ...], theirs: tuple[int, ...], num_labels: int | None
) -> bool:
    """Whether head weight ``name`` differs from the checkpoint's only in its label count."""
    return (
        num_labels is not None
        and name.startswith("head.")
        and len(mine) == len(theirs) >= 1
        and mine[0] == num_labels
        and mine[1:] == theirs[1:]
    )


def export_tensors(model: nn.Module, family: Family, prefix: str) -> dict[str, torch.Tensor]:
    """The model's weights under HF names, contiguous, on CPU (tied weights written once)."""
    state = model.state_dict()
    out = {
        hf: state[name].detach().to("cpu").contiguous()
        for name, hf in hf_names(model, family, prefix).items()
    }
    alias = bias_alias(model, family)
    if alias is not None and alias[0] in out:
        # transformers' model has both parameters: write the tied one too (a copy: safetensors
        # refuses two names for one storage)
        out[alias[1]] = out[alias[0]].clone()
    return out
