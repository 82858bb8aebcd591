"""Why a checkpoint's names do not fit a model: the entries that differ and the likely cause.

Used in the messages of a refused load (an architecture-hash mismatch, or a load that matched no
entry). A tag or label names its step's entries (``hidden.weight`` in Python, ``hidden/weight``
in the Rust original), so renaming one renames those checkpoint keys; that is the cause most
worth naming.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch

from flodl.checkpoint import format as fmt
from flodl.checkpoint.codec import EntryInfo

SHOWN = 4
_SPLIT = re.compile(r"[./]")


def few(names: list[str], shown: int = SHOWN) -> str:
    """``'a', 'b', 'c' and 5 more (8 entries)`` — a few names from a list.

    >>> few(["w", "b", "x", "y", "z"], shown=2)
    "'w', 'b' and 3 more (5 entries)"
    """
    if not names:
        return "no entries"
    head = ", ".join(repr(n) for n in names[:shown])
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"{head}{more} ({len(names)} entr{'y' if len(names) == 1 else 'ies'})"


def _head_and_rest(name: str) -> tuple[str, str]:
    parts = _SPLIT.split(name, maxsplit=1)
    return (parts[0], parts[1]) if len(parts) == 2 else ("", name)


def _groups(items: Iterable[tuple[str, tuple[int, ...]]]) -> dict[str, frozenset]:
    groups: dict[str, set[tuple[str, tuple[int, ...]]]] = {}
    for name, shape in items:
        head, rest = _head_and_rest(name)
        groups.setdefault(head, set()).add((rest, shape))
    return {k: frozenset(v) for k, v in groups.items()}


def renamed_prefixes(
    file_only: list[tuple[str, tuple[int, ...]]], model_only: list[tuple[str, tuple[int, ...]]]
) -> list[tuple[str, str]]:
    """(old, new) first segments whose entries are the same but for that segment: a renamed tag."""
    old, new = _groups(file_only), _groups(model_only)
    pairs = []
    for old_head, content in old.items():
        for new_head, other in new.items():
            if old_head != new_head and content == other:
                pairs.append((old_head, new_head))
                break
    return pairs


def name_style_hint(file_names: list[str], model_names: list[str]) -> str:
    """A note when the file uses the Rust original's ``tag/param`` names and the model dots."""
    slashes = any("/" in n for n in file_names) and not any("/" in n for n in model_names)
    if not slashes:
        return ""
    return (
        " (the file uses the Rust original's '<tag or node id>/<param>' names: a graph whose "
        "steps map to the original's modules loads it directly when the file carries its "
        "Rust hash, see graph.structural_hash(scheme='rust'))"
    )


def other_kind_of_file(file_names: list[str]) -> str | None:
    """What to say when the file is not a model checkpoint but a training or optimizer state
    (its names would otherwise look like the Rust original's ``model/...``); None otherwise."""
    from flodl.checkpoint import optimizer, training  # they import this module's users

    if training.META_ENTRY in file_names:
        return (
            "this file is a training state (written by fl.save_training_state), not a model "
            "checkpoint: load it with fl.load_training_state(path, model, optimizer, ...) "
            "— nothing was loaded"
        )
    if optimizer.META_ENTRY in file_names:
        return (
            "this file is an optimizer state (written by fl.save_optimizer_state), not a model "
            "checkpoint: load it with fl.load_optimizer_state(optimizer, path) — nothing was "
            "loaded"
        )
    return None


def explain_names(
    entries: list[EntryInfo],
    params: list[tuple[str, torch.Tensor]],
    buffers: list[tuple[str, torch.Tensor]],
) -> str:
    """``: in the file, not in the model: …; likely cause: …`` (empty when nothing is known)."""
    file_shapes = {e.name: e.shape for e in entries}
    model_shapes: dict[str, tuple[int, ...]] = {}
    for name, tensor in [*params, *buffers]:
        model_shapes.setdefault(name, tuple(tensor.shape))
    file_only = [(n, s) for n, s in file_shapes.items() if n not in model_shapes]
    model_only = [(n, s) for n, s in model_shapes.items() if n not in file_shapes]
    reshaped = [
        f"{n} {fmt.shape_str(s)} in the file, {fmt.shape_str(model_shapes[n])} in the model"
        for n, s in file_shapes.items()
        if n in model_shapes and model_shapes[n] != s
    ]
    bits = []
    if file_only:
        bits.append(f"in the file, not in the model: {few([n for n, _ in file_only])}")
    if model_only:
        bits.append(f"in the model, not in the file: {few([n for n, _ in model_only])}")
    if reshaped:
        bits.append(f"different shapes: {'; '.join(reshaped[:SHOWN])}")
    pairs = renamed_prefixes(file_only, model_only)
    if pairs:
        renames = ", ".join(f"'{a}' -> '{b}'" for a, b in pairs)
        bits.append(
            f"likely cause: a renamed tag or label ({renames}); a tag names its step's "
            "checkpoint keys"
        )
    elif not bits:
        bits.append(
            "the entries match by name and shape, so the wiring, a tag, or a step without "
            "parameters changed"
        )
    hint = name_style_hint(list(file_shapes), list(model_shapes))
    return (
        ": "
        + "; ".join(bits)
        + hint
        + ". To keep the weights, convert the file once with fl.migrate_checkpoint_file(src, "
        "dst, model.named_parameters(), model.named_buffers())"
    )
