"""``fdl libtorch``: download, list, inspect, activate and remove libtorch variants."""

from __future__ import annotations

from typing import Annotated

import typer

from fdl.commands._pending import NOT_YET, pending


def register(app: typer.Typer, make_group) -> None:
    group = make_group("libtorch", f"Manage libtorch installations {NOT_YET}.")
    app.add_typer(group)

    @group.command("download", help="Download a pre-built libtorch.")
    def download(
        cpu: Annotated[bool, typer.Option("--cpu", help="The CPU build.")] = False,
        cuda: Annotated[str | None, typer.Option("--cuda", help="A CUDA tag, e.g. 12.8.")] = None,
    ) -> None:
        raise pending("libtorch download")

    @group.command("list", help="Show installed variants.")
    def list_() -> None:
        raise pending("libtorch list")

    @group.command("info", help="Show the active variant.")
    def info() -> None:
        raise pending("libtorch info")

    @group.command("activate", help="Set the active variant.")
    def activate(variant: Annotated[str, typer.Argument(help="Variant id.")]) -> None:
        raise pending("libtorch activate")

    @group.command("remove", help="Remove a variant.")
    def remove(variant: Annotated[str, typer.Argument(help="Variant id.")]) -> None:
        raise pending("libtorch remove")
