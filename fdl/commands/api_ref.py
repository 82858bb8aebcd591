"""``fdl api-ref``: the installed flodl's public API, for people and AI assistants."""

from __future__ import annotations

from typing import Annotated

import typer

from fdl.commands._pending import NOT_YET, pending


def register(app: typer.Typer, make_group) -> None:
    @app.command("api-ref", help=f"Generate the flodl API reference {NOT_YET}.")
    def api_ref(
        json_out: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
    ) -> None:
        raise pending("api-ref")
