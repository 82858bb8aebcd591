"""``fdl port``: translate a PyTorch model class into FlowBuilder code, with a parity proof."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from fdl.errors import ExitCode, FdlUsageError


def port(
    script: Annotated[Path, typer.Argument(help="The Python script defining the model.")],
    model: Annotated[
        str, typer.Option("--model", metavar="CLASS", help="The nn.Module class to port.")
    ],
    example_input: Annotated[
        list[str],
        typer.Option(
            "--example-input",
            metavar="EXPR",
            help="One call's arguments, evaluated with torch in scope: a tensor, or a tuple "
            "of positional arguments. Repeat for several cases.",
        ),
    ],
    init: Annotated[
        str | None,
        typer.Option(
            "--init",
            metavar="ARGS",
            help="Constructor arguments as a Python literal: a tuple is positional, a dict "
            "keyword arguments (e.g. \"{'num_classes': 10}\").",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o", "--output", metavar="OUT.py", help="Where to write (default SCRIPT_flodl.py)."
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Write even when parity is not exact."),
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option("--overwrite", help="Replace OUT.py when it exists (refused otherwise)."),
    ] = False,
    seeds: Annotated[
        int,
        typer.Option(
            "--seeds",
            metavar="N",
            min=1,
            help="Evaluate each --example-input under torch.manual_seed(0..N-1) and prove parity "
            "on every distinct draw.",
        ),
    ] = 2,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON report on stdout.")] = False,
) -> None:
    from fdl import console
    from fdl.port.run import default_output, render_report
    from fdl.port.run import port as run_port

    if script.is_dir():
        raise FdlUsageError(f"{script}: is a directory", "pass the path of a Python script")
    if not script.is_file():
        raise FdlUsageError(f"{script}: no such file", "pass the path of a Python script")
    out = output or default_output(script)
    if out.resolve() == script.resolve():
        raise FdlUsageError("the output would overwrite the script", "pass another -o OUT.py")
    report = run_port(script, model, init, list(example_input), out, force, overwrite, seeds)
    if json_out:
        import json

        console.out(json.dumps(report.to_dict(), indent=2))
    else:
        console.out(render_report(report))
    if not report.ok:
        raise typer.Exit(ExitCode.FAILURE)


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    app.command(
        "port",
        help="Translate an nn.Module class into FlowBuilder code: trace it with torch.fx, write "
        "OUT.py with build(...) and from_torch(module), and prove the graph computes exactly what "
        "the original does (outputs, input and parameter gradients, eval and train mode) before "
        "writing. Example: fdl port model.py --model CNN --example-input 'torch.randn(2, 3, 32, 32)'.",
    )(port)
