"""``fdl checkpoint info``: a checkpoint's header, entries and integrity, without loading it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from fdl.errors import ExitCode, FdlError


def info(
    path: Annotated[Path, typer.Argument(help="The .fdl (or .fdl.gz) file.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document instead of the table.")
    ] = False,
    require_verified: Annotated[
        bool,
        typer.Option(
            "--require-verified",
            help="Fail (exit 1) when the file has no integrity trailer to verify.",
        ),
    ] = False,
) -> None:
    import json

    import flodl as fl
    from fdl import console

    if not path.exists():
        raise FdlError(f"no such file: {path}", code=ExitCode.USAGE)
    try:
        found = fl.checkpoint_info(path)
    except fl.CheckpointError as exc:
        message = str(exc)
        # flodl's messages mostly end in their own " — what it means / what to do"; a generic
        # hint after one of those only repeats it ("… — this is not a .fdl checkpoint — …")
        hint = None if " — " in message else "the file is damaged or is not a .fdl checkpoint"
        raise FdlError(message, hint) from exc
    entries: list[dict[str, Any]] = [
        {
            "name": e.name,
            "shape": list(e.shape),
            "dtype": str(e.dtype).removeprefix("torch."),
            "bytes": e.nbytes,
        }
        for e in found.entries
    ]
    if as_json:
        document = {
            "version": found.version,
            "structural_hash": found.structural_hash,
            "verified": found.verified,
            "integrity": found.integrity,
            "entries": entries,
        }
        console.out(json.dumps(document, indent=2))
    else:
        lines = [
            f"version    {found.version}",
            f"hash       {found.structural_hash or '(none)'}",
            f"integrity  {found.integrity}",
            f"entries    {len(entries)}",
        ]
        width = max((len(e["name"]) for e in entries), default=0)
        lines += [f"  {e['name']:<{width}}  {e['dtype']:<8} {e['shape']}" for e in entries]
        console.out("\n".join(lines))
    if require_verified and not found.verified:
        raise FdlError(
            f"{path}: {found.integrity}",
            "the file carries no checksums; re-save it with flodl to add them",
        )


def register(app: typer.Typer, make_group: Callable[..., typer.Typer]) -> None:
    group = make_group("checkpoint", "Inspect .fdl checkpoints.", file_command="info")
    app.add_typer(group)
    group.command(
        "info",
        help="Print a checkpoint's version, structural hash, entries and integrity (every "
        "checksum is verified when the file has them).",
    )(info)
