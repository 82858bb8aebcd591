"""``fdl setup``: detect hardware, choose the torch (and libtorch) build, install, verify."""

from __future__ import annotations

from typing import Annotated

import typer

from fdl.commands._pending import NOT_YET, pending


def register(app: typer.Typer, make_group) -> None:
    @app.command("setup", help=f"Install the right torch build for this machine {NOT_YET}.")
    def setup(
        yes: Annotated[
            bool, typer.Option("--yes", "-y", help="No prompts; take the defaults.")
        ] = False,
        force: Annotated[bool, typer.Option("--force", help="Reinstall even if present.")] = False,
    ) -> None:
        raise pending("setup")
