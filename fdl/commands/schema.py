"""``fdl schema list|clear|refresh``: the cached ``--fdl-schema`` answers of a project's programs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer


def targets() -> list[Any]:
    """Every probe-able program of the current project: child entries and ``schema: probe``
    run commands, found by walking the manifests from the root (each directory once)."""
    from fdl.tasks.discover import find_manifest
    from fdl.tasks.dispatch import entry_target, load_child, run_target
    from fdl.tasks.manifest import load_manifest
    from fdl.tasks.runner import no_manifest

    file = find_manifest(offer_copy=False)
    if file is None:
        raise no_manifest()
    found: dict[Path, Any] = {}
    seen: set[Path] = set()

    def walk(manifest: Any, depth: int) -> None:
        if manifest.root in seen or depth > 8:
            return
        seen.add(manifest.root)
        if manifest.entry is not None and depth > 0:
            target = entry_target(manifest)
            found[target.cache_file] = target
        for command in manifest.commands.values():
            if command.kind == "run" and command.probe_schema:
                target = run_target(command)
                found[target.cache_file] = target
            elif command.kind == "path":
                try:
                    walk(load_child(command, None), depth + 1)
                except Exception:  # a broken child: listed by the commands that run it
                    continue

    walk(load_manifest(file), 0)
    return list(found.values())


def _select(name: str | None) -> list[Any]:
    from fdl.errors import FdlUsageError

    everything = targets()
    if name is None:
        return everything
    chosen = [t for t in everything if t.name == name]
    if not chosen:
        known = ", ".join(sorted({t.name for t in everything})) or "(none)"
        raise FdlUsageError(f"no program named '{name}' publishes a schema here", f"known: {known}")
    return chosen


def status(target: Any) -> str:
    from fdl.tasks import schema_cache

    if not target.probe_allowed:
        return "not probed (cargo entry without compile: true)"
    record = schema_cache.read(target)
    if record is None:
        return "none"
    if not schema_cache.is_fresh(target, record):
        return "stale"
    return "fresh" if record.get("schema") else "no schema"


def list_(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON list.")] = False,
) -> None:
    import json

    from fdl import console
    from fdl.tasks import schema_cache

    rows = []
    for target in targets():
        record = schema_cache.read(target)
        if record is None:
            continue
        rows.append(
            {
                "name": target.name,
                "status": status(target),
                "program": target.program,
                "cache": str(target.cache_file),
                "options": sorted((record.get("schema") or {}).get("options", {})),
                "error": record.get("error"),
            }
        )
    if as_json:
        console.out(json.dumps(rows, indent=2))
        return
    if not rows:
        console.out(
            "no cached schemas (a command writes its own when it runs; so does 'fdl schema refresh')"
        )
        return
    width = max(len(r["name"]) for r in rows) + 2
    for row in rows:
        console.out(f"{row['name'].ljust(width)}{row['status']:<10} {row['program']}")
        detail = ", ".join(f"--{o}" for o in row["options"]) or row["error"] or ""
        if detail:
            console.out(f"{'':{width}}{detail}")


def clear(
    name: Annotated[str | None, typer.Argument(help="A program name (default: all).")] = None,
) -> None:
    from fdl import console
    from fdl.tasks.discover import find_manifest
    from fdl.tasks.schema_cache import cache_files

    files = [t.cache_file for t in _select(name)]
    if name is None:
        file = find_manifest(offer_copy=False)
        files += cache_files(file.parent) if file else []
    removed = 0
    for path in dict.fromkeys(files):
        if path.is_file():
            path.unlink()
            removed += 1
    console.info(f"fdl: removed {removed} cached schema{'s' if removed != 1 else ''}")


def refresh(
    name: Annotated[str | None, typer.Argument(help="A program name (default: all).")] = None,
) -> None:
    from rich.markup import escape

    from fdl import console
    from fdl.tasks.schema_cache import probe_and_store

    failed = 0
    for target in _select(name):
        if not target.probe_allowed:
            console.info(escape(f"{target.name}: skipped ({status(target)})"))
            continue
        record = probe_and_store(target)
        if record.get("schema"):
            console.info(
                escape(f"{target.name}: {len(record['schema'].get('options', {}))} options")
            )
        else:
            failed += 1
            console.warn(escape(f"{target.name}: no schema ({record.get('error')})"))
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer, make_group: Callable[[str, str], typer.Typer]) -> None:
    group = make_group(
        "schema",
        "Inspect, clear or refresh the cached --fdl-schema answers of the project's programs.",
    )
    app.add_typer(group)
    group.command("list", help="Show every program that can publish a schema, and its cache.")(
        list_
    )
    group.command("clear", help="Delete cached schemas: all of them, or NAME's.")(clear)
    group.command(
        "refresh",
        help="Ask each program (or NAME) for its --fdl-schema again; exit 1 if one did not answer.",
    )(refresh)
