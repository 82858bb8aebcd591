"""``fdl init``: scaffold a project that trains on CPU out of the box."""

from __future__ import annotations

from typing import Annotated

import typer

from fdl.commands._pending import NOT_YET, pending


def register(app: typer.Typer, make_group) -> None:
    @app.command("init", help=f"Scaffold a new flodl project {NOT_YET}.")
    def init(
        name: Annotated[str, typer.Argument(help="Project directory and name.")],
        docker: Annotated[bool, typer.Option("--docker", help="Train inside Docker.")] = False,
        native: Annotated[bool, typer.Option("--native", help="No Docker.")] = False,
    ) -> None:
        raise pending("init")
