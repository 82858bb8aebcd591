"""``fdl api-ref``: the installed flodl's public API, for people and AI assistants."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from fdl.errors import FdlError, FdlUsageError


def api_ref(
    json_out: Annotated[
        bool, typer.Option("--json", help="One JSON document on stdout (schema in docs).")
    ] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Markdown on stdout.")] = False,
    llms: Annotated[
        Path | None,
        typer.Option(
            "--llms",
            metavar="DIR",
            help="Write llms.txt, llms-full.txt and porting-guide.md into DIR.",
        ),
    ] = None,
    path: Annotated[
        Path | None,
        typer.Option(
            "--path",
            metavar="SRC",
            help="Describe the package at SRC instead of the installed flodl.",
        ),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Extract again; do not read or write the cache.")
    ] = False,
) -> None:
    from fdl import console
    from fdl.apiref import load_reference

    if sum([json_out, markdown, llms is not None]) > 1:
        raise FdlUsageError(
            "--json, --markdown and --llms are alternatives", "choose one output format"
        )
    if llms is not None and llms.exists() and not llms.is_dir():
        raise FdlUsageError(
            f"--llms {llms}: not a directory",
            "pass the directory to write llms.txt and llms-full.txt into "
            "(it is created when missing)",
        )
    start = time.perf_counter()
    ref = load_reference(path, use_cache=not no_cache)
    console.detail(
        f"{ref.package} {ref.version}: {len(ref.entries)} entries "
        f"in {(time.perf_counter() - start) * 1e3:.0f} ms"
    )
    if json_out:
        console.out(ref.to_json())
    elif markdown:
        from fdl.apiref.render import render_markdown

        console.out(render_markdown(ref))
    elif llms is not None:
        from fdl.apiref.llms import write_llms
        from fdl.porting.skills import read_skill_file

        try:
            written = write_llms(ref, llms, guide=read_skill_file("guide.md"))
        except OSError as err:
            where = err.filename or llms
            raise FdlError(
                f"cannot write {where}: {err.strerror or err}",
                f"check that {llms} is a directory you can write to, or pass another --llms DIR",
            ) from err
        for file in written:
            console.info(f"wrote {file}")
    else:
        from fdl.apiref.render import render_text

        console.out(render_text(ref))


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    app.command(
        "api-ref",
        help="Print the public API of the installed flodl (text, --json, --markdown), "
        "or write llms.txt + llms-full.txt with --llms DIR.",
    )(api_ref)
