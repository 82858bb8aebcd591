"""``fdl check``: validate a ported script against the real flodl API, then smoke-run it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fdl.errors import ExitCode, FdlUsageError


def register(app: typer.Typer, make_group) -> None:
    @app.command(
        "check",
        help="Validate a script's use of flodl: unknown names are errors (with file:line and "
        "suggestions); then run it with FLODL_SMOKE=1 on a tiny budget.",
    )
    def check(
        script: Annotated[Path, typer.Argument(help="The Python script to check.")],
        json_out: Annotated[
            bool, typer.Option("--json", help="One JSON report on stdout.")
        ] = False,
        no_run: Annotated[
            bool, typer.Option("--no-run", help="Static check only; skip the smoke run.")
        ] = False,
        timeout: Annotated[
            float,
            typer.Option("--timeout", metavar="S", min=1, help="Smoke-run time limit in seconds."),
        ] = 120.0,
        path: Annotated[
            Path | None,
            typer.Option(
                "--path", metavar="SRC", help="Check against the flodl source at SRC instead."
            ),
        ] = None,
    ) -> None:
        from fdl import console
        from fdl.apiref import load_reference
        from fdl.porting.check import check_script, render_report

        if script.is_dir():
            raise FdlUsageError(f"{script}: is a directory", "pass the path of a Python script")
        if not script.is_file():
            raise FdlUsageError(f"{script}: no such file", "pass the path of a Python script")
        ref = load_reference(path)
        report = check_script(script, ref, run=not no_run, timeout=timeout)
        if json_out:
            import json

            console.out(json.dumps(report.to_dict(), indent=2))
        else:
            console.out(render_report(report, timeout=timeout))
        if not report.ok:
            raise typer.Exit(ExitCode.FAILURE)
