"""``fdl skill``: install the ``/port`` skill for AI coding assistants."""

from __future__ import annotations

from typing import Annotated

import typer

from fdl.commands._pending import NOT_YET, pending


def register(app: typer.Typer, make_group) -> None:
    group = make_group("skill", f"Manage AI coding assistant skills {NOT_YET}.")
    app.add_typer(group)

    @group.command("list", help="Show the available skills.")
    def list_() -> None:
        raise pending("skill list")

    @group.command("install", help="Install skills for an AI coding assistant.")
    def install(
        tool: Annotated[
            str | None, typer.Option("--tool", help="claude, cursor, codex or copilot.")
        ] = None,
    ) -> None:
        raise pending("skill install")
