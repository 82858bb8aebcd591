"""``fdl config show``: the resolved ``fdl.yml`` manifest with its overlays."""

from __future__ import annotations

from typing import Annotated

import typer

from fdl.commands._pending import NOT_YET, pending


def register(app: typer.Typer, make_group) -> None:
    group = make_group("config", f"Inspect the resolved project configuration {NOT_YET}.")
    app.add_typer(group)

    @group.command("show", help="Print the merged fdl.yml manifest.")
    def show(
        env: Annotated[str | None, typer.Argument(help="Overlay to apply.")] = None,
    ) -> None:
        raise pending("config show")
