"""``fdl check``: validate a ported script against the real flodl API, then smoke-run it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from fdl.errors import ExitCode, FdlUsageError


def check(
    script: Annotated[
        Path | None,
        typer.Argument(help="The Python script to check.", show_default=False),
    ] = None,
    script_args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="ARGS",
            help="The script's own arguments, after --: fdl check train.py -- --epochs 3.",
            show_default=False,
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON report on stdout.")] = False,
    no_run: Annotated[
        bool,
        typer.Option(
            "--no-run",
            help="Static check only; skip the smoke run (which runs the script for real).",
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="S",
            min=1,
            help="Smoke-run limit in CPU seconds of the script's process tree (wall time "
            "is a backstop at 4x this plus 30 s).",
        ),
    ] = 120.0,
    allow_unverified: Annotated[
        bool,
        typer.Option(
            "--allow-unverified",
            help="Pass even when some flodl call sites neither ran nor could be checked "
            "statically (they are still listed).",
        ),
    ] = False,
    path: Annotated[
        Path | None,
        typer.Option(
            "--path", metavar="SRC", help="Check against the flodl source at SRC instead."
        ),
    ] = None,
    recover: Annotated[
        bool,
        typer.Option(
            "--recover",
            help="Put back the files an earlier fdl check was killed before putting back (its "
            ".fdl-check-* folder here, or beside SCRIPT), then exit; what is in their place "
            "moves into that folder's replaced/.",
        ),
    ] = False,
) -> None:
    from fdl import console
    from fdl.apiref import load_reference
    from fdl.porting.check import check_script, render_report
    from fdl.porting.smoke import SmokeStopped

    if recover:
        _recover(script, json_out)
        return
    if script is None:
        raise FdlUsageError("missing SCRIPT", "fdl check train.py (or fdl check --recover)")
    if script.is_dir():
        raise FdlUsageError(f"{script}: is a directory", "pass the path of a Python script")
    if not script.is_file():
        raise FdlUsageError(f"{script}: no such file", "pass the path of a Python script")
    ref = load_reference(path)

    def announce() -> None:  # the smoke run is the script, for real: say so before it starts
        from rich.markup import escape

        console.info(
            escape(
                f"smoke run: running {script} for real (FLODL_SMOKE=1, loops shortened) in "
                f"{Path.cwd()}: the files it overwrites are kept and put back after it "
                "(--no-run skips it)"
            )
        )

    try:
        report = check_script(
            script,
            ref,
            run=not no_run,
            timeout=timeout,
            args=list(script_args or []),
            allow_unverified=allow_unverified,
            on_smoke_start=announce,
        )
    except SmokeStopped as stopped:
        import signal

        name = signal.Signals(stopped.signum).name
        console.error(f"interrupted by {name}: the smoke run was stopped too")
        raise typer.Exit(128 + stopped.signum) from None
    if json_out:
        import json

        console.out(json.dumps(report.to_dict(), indent=2))
    else:
        console.out(render_report(report, timeout=timeout))
    if not report.ok:
        raise typer.Exit(ExitCode.FAILURE)


def _recover(script: Path | None, json_out: bool) -> None:
    """``fdl check --recover``: put back what interrupted checks left kept."""
    from rich.markup import escape

    from fdl import console
    from fdl.porting import leftovers
    from fdl.porting.smoke import smoke_roots

    here = Path.cwd()
    where = script.resolve().parent if script is not None else here
    found = leftovers.find(smoke_roots(here, where))
    results = [(leftover, leftovers.recover(leftover)) for leftover in found]

    def shown(path: str | Path) -> str:
        return leftovers.shown_path(str(path), here)

    if json_out:
        import json

        document = [
            {"path": shown(r.path), "restored": r.restored,
             "replaced": shown(r.replaced) if r.replaced else None}
            for _, recovered in results for r in recovered
        ]  # fmt: skip
        console.out(json.dumps({"recovered": document}, indent=2))
    elif not found:
        console.info("nothing to recover: no interrupted fdl check left files here")
    for leftover, recovered in results if not json_out else []:
        folders = ", ".join(shown(f) for f in leftover.folders if f.exists())
        for r in recovered:
            if not r.restored:
                console.error(escape(f"{shown(r.path)}: could not be put back; kept in {folders}"))
            elif r.replaced:
                line = (
                    f"put back {shown(r.path)} (the file in its place is now {shown(r.replaced)})"
                )
                console.info(escape(line))
            else:
                console.info(escape(f"put back {shown(r.path)}"))
        if folders and all(r.restored for r in recovered):  # only replaced files left there
            console.info(escape(f"kept for you to delete: {folders}"))
    if any(not r.restored for _, recovered in results for r in recovered):
        raise typer.Exit(ExitCode.FAILURE)


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    app.command(
        "check",
        help="Validate a script's use of flodl: unknown names and calls that do not fit the real "
        "signatures are errors (with file:line and suggestions); then run it to its end with "
        "FLODL_SMOKE=1, its training loops shortened. That run is for real, in the current "
        "directory: the existing files it overwrites or deletes are kept and put back after "
        "it (fdl check --recover, when a killed check could not), and the files it creates "
        "stay (listed as a warning). Pass the script's own arguments after --: "
        "fdl check train.py -- --epochs 3.",
    )(check)
