"""``fdl diagnose``: CPU, RAM, OS, container, Docker, GPUs, torch build, compatibility."""

from __future__ import annotations

from typing import Annotated

import typer

from fdl.commands._pending import NOT_YET, pending


def register(app: typer.Typer, make_group) -> None:
    @app.command("diagnose", help=f"System and GPU diagnostics {NOT_YET}.")
    def diagnose(
        json_out: Annotated[
            bool, typer.Option("--json", help="One JSON document on stdout.")
        ] = False,
    ) -> None:
        raise pending("diagnose")
