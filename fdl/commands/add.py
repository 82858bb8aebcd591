"""``fdl add FEATURE``: put an optional feature (a flodl extra plus examples) into a project."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer


def add(
    feature: Annotated[str, typer.Argument(help="The feature to add: hf.")],
    path: Annotated[
        Path,
        typer.Option("--path", metavar="DIR", help="The project (default: the nearest one)."),
    ] = Path(),
) -> None:
    from rich.markup import escape

    from fdl import console
    from fdl.scaffold import features

    features.feature(feature)  # an unknown name is a usage error before anything is read
    root = features.find_project(path)
    changes = features.add(root, feature)
    console.info(escape(f"fdl add {feature} in {root}:"))
    features.report(feature, changes, lambda line: console.info(escape(line)), root)


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    app.command(
        "add",
        help="Add an optional feature to this project: its flodl extra in pyproject.toml and "
        "example files (never overwritten). Features: hf (HuggingFace encoders as graphs).",
    )(add)
