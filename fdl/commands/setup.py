"""``fdl setup``: detect hardware, choose the torch (and libtorch) build, install, verify."""

from __future__ import annotations

from typing import Annotated

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
        if nv.smi_path:  # a driver is installed but listed nothing: do not silently go CPU
            console.warn(
                "nvidia-smi is installed but reported no GPU ("
                + "; ".join(nv.problems)
                + "); after a driver upgrade, reboot — or force a build with --variant"
            )
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


def register(app: typer.Typer, make_group) -> None:
    @app.command("setup", help="Install the right torch build for this machine, and verify it.")
    def setup(
        yes: Annotated[
            bool, typer.Option("--yes", "-y", help="No prompts; take the plan.")
        ] = False,
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
        import subprocess
        import sys

        from rich.markup import escape

        from fdl import console
        from fdl.errors import ExitCode, FdlError, FdlUsageError
        from fdl.hardware import detect
        from fdl.torch_setup import install_command, scope_for, verify_torch
        from fdl.variants import resolve

        if installer not in (None, "pip", "uv"):
            raise FdlUsageError(f"unknown installer '{installer}'", "use --installer pip or uv")
        target_python = python or sys.executable
        machine = detect(docker=False, python=target_python)
        plan = resolve(machine.target(), torch=torch_version, tag=variant)
        _show_plan(machine, plan, target_python)
        interactive = not (yes or dry_run) and sys.stdin.isatty()
        if plan.status == "compromise" and variant is None and interactive:
            plan = _choose_build(machine, plan)

        installed = machine.torch
        same = (
            installed is not None
            and installed.public_version == plan.torch
            and (installed.tag or "") == plan.tag
        )
        companions = sorted(installed.companions) if installed else []
        command = install_command(
            target_python,
            plan.requirement,
            plan.index_url,
            companions=companions,
            force=force,
            installer=installer,
        )
        ran: list[str] = []
        if installed is not None and same and not force:
            console.info(
                f"torch {installed.version} is already installed here (--force reinstalls)"
            )
        else:
            if installed:
                console.info(f"replacing torch {installed.version} with {plan.torch}+{plan.tag}")
            console.info(f"[bold]Command[/bold]: {escape(str(command))}")
        if dry_run:
            console.info("dry run: nothing was installed")
            return
        if not (same and not force):
            if not yes:
                if not sys.stdin.isatty():
                    raise FdlUsageError(
                        "no terminal to confirm the install", "re-run with -y to accept the plan"
                    )
                from rich.prompt import Confirm

                if not Confirm.ask("Install?", default=True, console=console.console(stderr=True)):
                    raise FdlError("setup cancelled; nothing was installed", None, ExitCode.FAILURE)
            proc = subprocess.run(command.argv, stdout=sys.stderr, check=False)
            ran.append(str(command))
            if proc.returncode != 0:
                raise FdlError(
                    f"{command.installer} failed (exit {proc.returncode}); the environment may be "
                    "unchanged or partly updated",
                    f"read the installer output above; the command was: {command}",
                )
        scope = scope_for(plan, machine.nvidia.gpus)
        console.info("[bold]Verify[/bold] (in a fresh interpreter):")
        for note in scope.notes:
            console.info(escape(f"  {note}"))
        if scope.visible_devices is not None:
            console.info(f"  with CUDA_VISIBLE_DEVICES={scope.visible_devices!r}, as the plan says")
        check = verify_torch(
            target_python,
            expected_gpus=scope.expected_gpus,
            visible_devices=scope.visible_devices,
        )
        for line in check.lines:
            console.info(escape(f"  {line}"))
        if not check.ok:
            raise FdlError(
                "torch is installed but does not work here: " + "; ".join(check.problems),
                "run 'fdl diagnose' and see docs/setup.md (troubleshooting)",
            )
        if libtorch:
            from fdl.commands.libtorch import download_variant

            download_variant(plan.torch, plan.tag, machine.system.platform_key, force=force)
        console.info(
            "[bold green]Done.[/bold green]" + escape(" Ran: " + "; ".join(ran) if ran else "")
        )
        if plan.visible_devices:
            console.info(f"Remember: CUDA_VISIBLE_DEVICES={plan.visible_devices}")
