"""``fdl setup``: detect hardware, choose the torch (and libtorch) build, install, verify."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer


def _show_plan(machine, plan, python: str) -> None:
    from rich.markup import escape

    from fdl import console

    nv = machine.nvidia
    if nv.gpus:
        console.info(f"[bold]GPUs[/bold] (driver {nv.driver or 'unknown'}):")
        for g in nv.gpus:
            console.info(escape(f"  [{g.index}] {g.name} -- {g.sm or 'sm unknown'}"))
    else:
        console.info("[bold]GPUs[/bold]: none (CPU-only)")
        from fdl.hardware.nvidia import broken_driver

        problem = broken_driver(nv)  # a driver is installed but listed nothing: not silently CPU
        if problem:
            console.warn(escape(f"{problem} — or force a build with --variant"))
    console.info(f"[bold]Plan[/bold]: torch {plan.torch} + {plan.tag} ({plan.status})")
    for reason in plan.reasons:
        console.info(escape(f"  - {reason}"))
    for warning in plan.warnings:
        console.warn(warning)
    for alt in plan.alternatives:
        console.info(escape(f"  alternative: {alt}"))
    env = machine.python
    console.info(f"[bold]Environment[/bold]: {escape(python)} ({env.kind} at {escape(env.prefix)})")


def _choose_build(machine, plan):
    """No build fits every GPU: let the user pick which compromise to install."""
    from rich.prompt import Prompt

    from fdl import console
    from fdl.variants import resolve

    choices = [c.build.tag for c in plan.considered] + ["cpu"]
    choice = Prompt.ask(
        "No single build runs on every GPU. Build to install",
        choices=choices,
        default=plan.tag,
        console=console.console(stderr=True),
    )
    if choice == plan.tag:
        return plan
    chosen = resolve(machine.target(), torch=plan.torch, tag=choice)
    console.info(f"[bold]Plan[/bold]: torch {chosen.torch} + {chosen.tag} (your choice)")
    for warning in chosen.warnings:
        console.warn(warning)
    return chosen


def setup(
    yes: Annotated[bool, typer.Option("--yes", "-y", help="No prompts; take the plan.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Reinstall torch even if this build is present.")
    ] = False,
    torch_version: Annotated[
        str | None,
        typer.Option("--torch", metavar="VERSION", help="Pin a torch release, e.g. 2.9."),
    ] = None,
    variant: Annotated[
        str | None,
        typer.Option("--variant", metavar="TAG", help="Force a build: cpu, cu126, cu128…"),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the plan and commands; change nothing.")
    ] = False,
    python: Annotated[
        str | None,
        typer.Option(
            "--python", metavar="PATH", help="Install into this interpreter's environment."
        ),
    ] = None,
    installer: Annotated[
        str | None,
        typer.Option(
            "--installer", metavar="pip|uv", help="Force pip or uv (default: uv if on PATH)."
        ),
    ] = None,
    libtorch: Annotated[
        bool, typer.Option("--libtorch", help="Also download the matching libtorch (C++).")
    ] = False,
) -> None:
    import sys

    from rich.markup import escape

    from fdl import console
    from fdl.errors import FdlUsageError
    from fdl.torch_setup import install_command

    if installer not in (None, "pip", "uv"):
        raise FdlUsageError(f"unknown installer '{installer}'", "use --installer pip or uv")
    target_python = python or sys.executable
    interactive = not (yes or dry_run) and sys.stdin.isatty()
    machine, plan = _plan(target_python, torch_version, variant, interactive=interactive)
    installed = machine.torch
    skip = already_installed(installed, plan) and not force
    command = install_command(
        target_python,
        plan.requirement,
        plan.index_url,
        companions=sorted(installed.companions) if installed else [],
        force=force,
        installer=installer,
    )
    if skip:
        console.info(f"torch {installed.version} is already installed here (--force reinstalls)")
    else:
        if installed:
            console.info(f"replacing torch {installed.version} with {plan.torch}+{plan.tag}")
        console.info(f"[bold]Command[/bold]: {escape(str(command))}")
    if dry_run:
        console.info("dry run: nothing was installed")
        return
    ran: list[str] = []
    if not skip:
        _run_install(command, confirmed=yes)
        ran.append(str(command))
    _verify(machine, plan, target_python)
    if libtorch:
        from fdl.commands.libtorch import download_variant

        download_variant(plan.torch, plan.tag, machine.system.platform_key, force=force)
    console.info(
        "[bold green]Done.[/bold green]" + escape(" Ran: " + "; ".join(ran) if ran else "")
    )
    if plan.visible_devices:
        console.info(f"Remember: CUDA_VISIBLE_DEVICES={plan.visible_devices}")


def already_installed(installed: Any, plan: Any) -> bool:
    """Whether ``installed`` (a ``TorchInstall``, or None) is the release and build ``plan`` asks
    for, so there is nothing to install without ``--force``."""
    return (
        installed is not None
        and installed.public_version == plan.torch
        and (installed.tag or "") == plan.tag
    )


def _plan(python: str, torch_version: str | None, variant: str | None, *, interactive: bool):
    """The machine and the build to install for it, shown; on a terminal, when no build fits
    every GPU and none was forced, the user picks the compromise."""
    from fdl.hardware import detect
    from fdl.variants import resolve

    machine = detect(docker=False, python=python)
    plan = resolve(machine.target(), torch=torch_version, tag=variant)
    _show_plan(machine, plan, python)
    if plan.status == "compromise" and variant is None and interactive:
        plan = _choose_build(machine, plan)
    return machine, plan


def _run_install(command: Any, *, confirmed: bool) -> None:
    """Run the installer, after asking on a terminal unless ``confirmed`` (``-y``)."""
    import subprocess
    import sys

    from fdl import console
    from fdl.errors import ExitCode, FdlError, FdlUsageError

    if not confirmed:
        if not sys.stdin.isatty():
            raise FdlUsageError(
                "no terminal to confirm the install", "re-run with -y to accept the plan"
            )
        from rich.prompt import Confirm

        if not Confirm.ask("Install?", default=True, console=console.console(stderr=True)):
            raise FdlError("setup cancelled; nothing was installed", None, ExitCode.FAILURE)
    proc = subprocess.run(command.argv, stdout=sys.stderr, check=False)
    if proc.returncode != 0:
        raise FdlError(
            f"{command.installer} failed (exit {proc.returncode}); the environment may be "
            "unchanged or partly updated",
            f"read the installer output above; the command was: {command}",
        )


def _verify(machine: Any, plan: Any, python: str) -> None:
    """Check the installed torch in a fresh interpreter, on the GPUs the plan covers."""
    from rich.markup import escape

    from fdl import console
    from fdl.errors import FdlError
    from fdl.torch_setup import scope_for, verify_torch

    scope = scope_for(plan, machine.nvidia.gpus)
    console.info("[bold]Verify[/bold] (in a fresh interpreter):")
    for note in scope.notes:
        console.info(escape(f"  {note}"))
    if scope.visible_devices is not None:
        console.info(f"  with CUDA_VISIBLE_DEVICES={scope.visible_devices!r}, as the plan says")
    check = verify_torch(
        python, expected_gpus=scope.expected_gpus, visible_devices=scope.visible_devices
    )
    for line in check.lines:
        console.info(escape(f"  {line}"))
    if not check.ok:
        raise FdlError(
            "torch is installed but does not work here: " + "; ".join(check.problems),
            "run 'fdl diagnose' and see docs/setup.md (troubleshooting)",
        )


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    app.command("setup", help="Install the right torch build for this machine, and verify it.")(
        setup
    )
