"""``fdl hf``: export, verify, convert HuggingFace checkpoints, and run the parity matrix.

torch, flodl.hf and transformers are imported inside the commands, so ``fdl hf --help`` stays
cheap. Exit codes: 0 ok, 1 failure (a check failed, a file exists), 2 usage, 3 something needed
is missing (transformers for verify-export/parity, a pytorch_model.bin to convert).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from fdl.errors import ExitCode, FdlError, FdlUsageError

HEADS = ("auto", "base", "seqcls", "tokcls", "qa", "mlm")
_SUFFIXES = {
    "ForSequenceClassification": "seqcls",
    "ForTokenClassification": "tokcls",
    "ForQuestionAnswering": "qa",
    "ForMaskedLM": "mlm",
}


def _head_of(config: dict[str, Any]) -> str:
    """The head a config's ``architectures[0]`` names (``base`` when it names none)."""
    arch = (config.get("architectures") or [""])[0]
    return next((head for suffix, head in _SUFFIXES.items() if arch.endswith(suffix)), "base")


def _flodl_error(err: Exception) -> FdlError:
    from flodl.hf.errors import HfHubError

    code = ExitCode.UNAVAILABLE if isinstance(err, HfHubError) else ExitCode.FAILURE
    return FdlError(str(err), None, code)


def _load(
    source: str, head: str, *, init_head: bool = False, num_labels: int | None = None,
    id2label: list[str] | None = None,
) -> Any:  # fmt: skip
    from flodl.hf import hub
    from flodl.hf.errors import HfError
    from flodl.hf.families import family_of
    from flodl.hf.model import _read_config, model_class

    try:
        # resolved once: a hub id asks the hub once, and reads the cache alone if it is unreachable
        files = hub.resolve(source)
        config = _read_config(files.config)
        if head == "auto":
            head = _head_of(config)
        return model_class(family_of(config).model_type, head)._from_files(
            files, device=None, dtype=None, init_head=init_head, labels=(num_labels, id2label)
        )
    except HfError as err:
        raise _flodl_error(err) from err


def _transformers() -> Any:
    from flodl.hf.errors import HfError
    from flodl.hf.parity import transformers_module

    try:
        return transformers_module()
    except HfError as err:
        raise FdlError(str(err), None, ExitCode.UNAVAILABLE) from err


def export(
    name_or_path: Annotated[str, typer.Argument(help="A model directory or a hub id.")],
    out: Annotated[Path, typer.Argument(help="The directory to write.")],
    head: Annotated[
        str,
        typer.Option(
            "--head",
            help="auto (config.json's architectures), base, seqcls, tokcls, qa or mlm.",
        ),
    ] = "auto",
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite the files of an existing OUT.")
    ] = False,
    init_head: Annotated[
        bool,
        typer.Option(
            "--init-head",
            help="Start the task head afresh where the checkpoint has none (a base checkpoint) "
            "or one for another label count.",
        ),
    ] = False,
    num_labels: Annotated[
        int | None,
        typer.Option("--num-labels", min=1, help="A classification head's label count."),
    ] = None,
    labels: Annotated[
        str | None,
        typer.Option(
            "--labels", metavar="NAME,...", help="A classification head's label names, in order."
        ),
    ] = None,
) -> None:
    from fdl import console

    if head not in HEADS:
        raise FdlUsageError(f"unknown head '{head}'", f"use one of {', '.join(HEADS)}")
    id2label = None
    if labels is not None:
        id2label = [name.strip() for name in labels.split(",")]
        if not all(id2label):
            raise FdlUsageError(f"--labels '{labels}' has an empty name", "e.g. --labels neg,pos")
    if out.exists() and not out.is_dir():
        raise FdlError(f"'{out}' exists and is not a directory", "choose another OUT")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise FdlError(f"'{out}' is not empty", "choose an empty directory, or pass --force")
    model = _load(name_or_path, head, init_head=init_head, num_labels=num_labels, id2label=id2label)
    written = model.save_pretrained(out)
    console.info(f"exported {model.hf_class_name} ({model.load_report.source})")
    console.out(str(written))


def verify_export(
    directory: Annotated[Path, typer.Argument(help="The exported directory.")],
    tolerance: Annotated[
        float, typer.Option("--tolerance", help="Largest allowed absolute difference.")
    ] = 1e-5,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document on stdout instead of the lines.")
    ] = False,
) -> None:
    import json
    import math

    import torch

    from fdl import console
    from flodl.hf.errors import HfError
    from flodl.hf.model import _read_config
    from flodl.hf.parity import HF_AUTO, max_diff, outputs_of

    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise FdlUsageError(
            f"--tolerance {tolerance} is not a number >= 0", "e.g. --tolerance 1e-5"
        )
    if not (directory / "config.json").is_file():
        raise FdlUsageError(f"{directory}: no config.json", "pass an exported model directory")
    t = _transformers()
    try:
        config = _read_config(directory)
    except HfError as err:
        raise _flodl_error(err) from err
    head = _head_of(config)
    # flodl first: its errors (no weights, an unreadable file) name the file in one line
    model = _load(str(directory), head)
    try:
        reference, info = getattr(t, HF_AUTO[head]).from_pretrained(
            directory, output_loading_info=True
        )
    except Exception as err:  # whatever transformers raises, the user gets one line
        raise FdlError(
            f"transformers cannot load {directory}: {type(err).__name__}: {err}".strip(),
            "check the directory with transformers directly",
        ) from err
    missing, unexpected = sorted(info["missing_keys"]), sorted(info["unexpected_keys"])
    g = torch.Generator().manual_seed(0)
    vocab = int(config.get("vocab_size", 100))
    # 16 tokens, or fewer for a model with fewer positions; the second row partly padded
    seq = max(1, min(16, int(getattr(model.embeddings, "max_length", 16))))
    low = min(5, vocab - 1) if vocab > 1 else 0
    ids = torch.randint(low, max(low + 1, vocab), (2, seq), generator=g)
    mask = torch.ones_like(ids)
    mask[1, max(1, seq * 3 // 4) :] = 0
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    diff = max_diff(outputs_of(model, head, inputs), outputs_of(reference.eval(), head, inputs))
    ok = not (missing or unexpected) and diff <= tolerance
    if as_json:
        document = {
            "directory": str(directory),
            "class": type(reference).__name__,
            "missing": missing,
            "unexpected": unexpected,
            "max_abs_diff": _number(diff),
            "tolerance": tolerance,
            "ok": ok,
        }
        console.out(json.dumps(document, indent=2))
    else:
        console.out(f"class        {type(reference).__name__}")
        console.out(f"missing      {len(missing)}{': ' + ', '.join(missing) if missing else ''}")
        console.out(
            f"unexpected   {len(unexpected)}{': ' + ', '.join(unexpected) if unexpected else ''}"
        )
        console.out(f"max abs diff {diff:.3e}")
    if not ok:
        raise FdlError(
            f"{directory} does not round-trip",
            f"max abs diff {diff:.3e} (tolerance {tolerance:g}), {len(missing)} missing, "
            f"{len(unexpected)} unexpected key(s)",
        )
    console.info("ok: transformers loads it with no missing or unexpected keys")


def convert(
    name_or_path: Annotated[str, typer.Argument(help="A model directory or a hub id.")],
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing model.safetensors.")
    ] = False,
) -> None:
    from fdl import console
    from flodl.hf import hub
    from flodl.hf.convert import ConvertError, bin_to_safetensors
    from flodl.hf.errors import HfError

    try:
        files = hub.resolve(name_or_path)
    except HfError as err:
        raise _flodl_error(err) from err
    if files.weights and not force:
        raise FdlError(f"{files.weights[0]} already exists", "nothing to convert (or --force)")
    folder = files.config.parent
    legacy = files.legacy_weights or folder / hub.LEGACY_WEIGHTS
    if not legacy.is_file():
        raise FdlError(f"{name_or_path} has no {hub.LEGACY_WEIGHTS}", None, ExitCode.UNAVAILABLE)
    try:
        target = bin_to_safetensors(legacy, folder / hub.WEIGHTS)
    except ConvertError as err:
        raise FdlError(str(err)) from err
    console.info(f"converted {legacy.name} ({name_or_path})")
    console.out(str(target))


def parity(
    family: Annotated[
        str | None,
        typer.Option("--family", metavar="F,...", help="Only these families."),
    ] = None,
    head: Annotated[
        str | None, typer.Option("--head", metavar="H,...", help="Only these heads.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document on stdout instead of the table.")
    ] = False,
) -> None:
    import json

    from fdl import console
    from flodl.hf import parity as matrix
    from flodl.hf.families import FAMILIES, HEADS

    # None is "all"; an empty value is a mistake (a shell variable left unset), refused below
    families = family.split(",") if family is not None else list(FAMILIES)
    heads = head.split(",") if head is not None else list(HEADS)
    for name, known, what in ((families, FAMILIES, "family"), (heads, HEADS, "head")):
        bad = [x for x in name if x not in known]
        if bad:
            raise FdlUsageError(f"unknown {what} '{bad[0]}'", f"use one of {', '.join(known)}")
    _transformers()
    cells = matrix.run_matrix(families, heads)
    failed = [c for c in cells if not c.ok]
    if as_json:
        document = {
            "tolerance": matrix.TOLERANCE,
            "ok": not failed,
            "cells": [parity_cell(c) for c in cells],
        }
        console.out(json.dumps(document, indent=2))
    else:
        console.out(f"{'family':<12} {'head':<7} {'load':>9} {'export':>9}  keys  result")
        for c in cells:
            console.out(parity_row(c, matrix.TOLERANCE))
    if failed:
        raise FdlError(
            f"{len(failed)} of {len(cells)} cells differ from transformers",
            f"tolerance {matrix.TOLERANCE:g}",
        )
    console.info(f"all {len(cells)} cells within {matrix.TOLERANCE:g} of transformers")


def _number(x: float) -> float | None:
    """A float for JSON: NaN and infinities (no JSON number) as null."""
    import math

    return x if math.isfinite(x) else None


def parity_cell(c: Any) -> dict[str, Any]:
    """One cell of the parity matrix as an object of ``fdl hf parity --json``'s ``cells``.

    >>> from flodl.hf.parity import Cell
    >>> parity_cell(Cell("bert", "qa", 0.0, 1e-7, 0.0))["ok"]
    True
    >>> parity_cell(Cell("bert", "qa", error="boom"))["load_diff"] is None
    True
    """
    return {
        "family": c.family,
        "head": c.head,
        "load_diff": _number(c.load_diff),
        "export_diff": _number(c.export_diff),
        "reference_diff": _number(c.reference_diff),
        "missing": list(c.missing),
        "unexpected": list(c.unexpected),
        "error": c.error,
        "ok": c.ok,
    }


def parity_row(c: Any, tolerance: float) -> str:
    """One cell of the parity matrix as a row of ``fdl hf parity``'s table.

    ``c`` is a ``flodl.hf.parity.Cell``, typed ``Any``: fdl imports flodl only inside functions,
    for annotations too.

    >>> from flodl.hf.parity import Cell
    >>> parity_row(Cell("albert", "mlm", 1e-7, 2e-7, 0.16), 1e-5)
    "albert       mlm      1.00e-07  2.00e-07  ok    PASS (transformers' own save and reload differs by 1.60e-01)"
    """
    keys = "ok" if not (c.missing or c.unexpected) else f"{len(c.missing) + len(c.unexpected)}!"
    result = "PASS" if c.ok else f"FAIL {c.error}".strip()
    if c.reference_diff >= tolerance:  # not flodl's doing: the note says whose it is
        result += f" (transformers' own save and reload differs by {c.reference_diff:.2e})"
    return (
        f"{c.family:<12} {c.head:<7} {c.load_diff:>9.2e} {c.export_diff:>9.2e}  {keys:<4}  {result}"
    )


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    group = make_group(
        "hf",
        "HuggingFace checkpoints as flodl graphs: export, verify an export with transformers, "
        "convert pytorch_model.bin to safetensors, and the parity matrix.",
    )
    app.add_typer(group, name="hf")
    group.command(
        "export",
        help="Load NAME_OR_PATH (a model directory or hub id) with flodl.hf and write it to OUT "
        "in HuggingFace's layout (model.safetensors, config.json, tokenizer.json).",
    )(export)
    group.command(
        "verify-export",
        help="Check an exported directory with transformers: zero missing or unexpected keys, "
        "and the same outputs as flodl.hf on a fixed batch.",
    )(verify_export)
    group.command(
        "convert",
        help="Convert an old pytorch_model.bin (a directory or a cached hub id) to "
        "model.safetensors beside it; read with torch.load(weights_only=True) only.",
    )(convert)
    group.command(
        "parity",
        help="Run the family x head parity matrix on tiny random models made with transformers "
        "(offline) and print the max abs difference of every cell.",
    )(parity)
