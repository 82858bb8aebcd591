"""``fdl config show``: the resolved ``fdl.yml`` manifest with its overlays and their provenance."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated

import typer


def show(
    env: Annotated[
        str | None,
        typer.Argument(help="Overlay to apply (default: --env, then FDL_ENV).", show_default=False),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document: files, merged config, sources.")
    ] = False,
) -> None:
    import json

    from fdl import console
    from fdl.tasks import show as show_mod
    from fdl.tasks.discover import find_manifest
    from fdl.tasks.layers import load_layers, merge
    from fdl.tasks.runner import no_manifest

    file = find_manifest(offer_copy=False)
    if file is None:
        raise no_manifest()
    chosen = env or console.settings.env or os.environ.get("FDL_ENV") or None
    merged = merge(load_layers(file, chosen))
    if as_json:
        console.out(json.dumps({"env": chosen, **show_mod.as_json(merged)}, indent=2))
    else:
        console.out(show_mod.render(merged))


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    group = make_group("config", "Inspect the resolved project configuration (fdl.yml).")
    app.add_typer(group)
    group.command(
        "show",
        help="Print the merged fdl.yml (with an environment overlay), each value tagged with the "
        "file and line that set it.",
    )(show)
