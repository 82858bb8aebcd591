"""``fdl check``: validate a ported script against the real flodl API, then smoke-run it."""

from __future__ import annotations

from typing import Annotated

import typer

from fdl.commands._pending import NOT_YET, pending


def register(app: typer.Typer, make_group) -> None:
    @app.command("check", help=f"Validate a script's use of flodl {NOT_YET}.")
    def check(
        script: Annotated[str, typer.Argument(help="The Python script to check.")],
    ) -> None:
        raise pending("check")
