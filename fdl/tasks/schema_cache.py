"""Schemas published by the programs themselves: ``<entry> --fdl-schema``, probed and cached.

As in the Rust original, a program may print its own options as JSON when called with
``--fdl-schema`` (Python scripts do it with :func:`fdl.schema.from_argparse` or
:func:`fdl.schema.from_typer`). fdl asks an ``entry:`` (and a run command marked
``schema: probe``) once and keeps the answer in ``<dir>/.fdl/schema-cache/<name>.json`` next to
the manifest that declares it. The cache is refreshed when the entry line, a manifest layer or the
entry's script file (``train.py``, ``-m pkg.train``, ``run.sh``) changes, on
``fdl CMD --refresh-schema`` and ``fdl schema refresh``. A program that does not answer is
remembered too (until one of those files changes), so it is not asked again on every run.

``cargo`` entries compile before they answer, so they are probed only with ``compile: true``.
Help listings and shell completion never probe: they read the cache.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fdl import console
from fdl.tasks.schema import Schema, SchemaError, parse_schema

CACHE_DIR = Path(".fdl") / "schema-cache"
PROBE_FLAG = "--fdl-schema"
PROBE_TIMEOUT_S = 120.0


@dataclass
class Target:
    """Something that can be probed: a child manifest's entry or a run command's script."""

    name: str  # cache name: the child directory's name, or the run command's name
    directory: Path  # the declaring manifest's directory (cwd of the probe)
    program: str  # the entry line or run script
    docker: str | None
    references: list[Path]  # files whose change makes the cache stale (manifest layers)
    compile: bool = False
    env: dict[str, str] | None = None  # the task's environment (its PATH picks 'python')

    @property
    def cache_file(self) -> Path:
        return self.directory / CACHE_DIR / f"{self.name}.json"

    @property
    def probe_allowed(self) -> bool:
        return not is_cargo(self.program) or self.compile


def is_cargo(program: str) -> bool:
    """``cargo run ...`` compiles before it answers: never probed without ``compile: true``."""
    return program.lstrip().startswith("cargo ")


def script_files(program: str, directory: Path) -> list[Path]:
    """The files a program line runs, where they can be told: ``x.py``/``x.sh`` paths and
    ``-m package.module`` (looked up under the directory and its ``src/``).

    >>> script_files("python train.py --x 1", Path("/nonexistent"))
    []
    """
    try:
        words = shlex.split(program, comments=True)
    except ValueError:
        return []
    found: list[Path] = []
    for index, word in enumerate(words):
        if word.endswith((".py", ".sh")) and "=" not in word:
            candidate = directory / word
            if candidate.is_file():
                found.append(candidate)
        if word == "-m" and index + 1 < len(words):
            module = words[index + 1].replace(".", "/")
            for base in (directory, directory / "src"):
                for candidate in (base / f"{module}.py", base / module / "__main__.py"):
                    if candidate.is_file():
                        found.append(candidate)
    return found


def _stamps(target: Target) -> dict[str, Any]:
    import shutil

    search = (target.env or os.environ).get("PATH")
    stamps: dict[str, Any] = {
        f"which {name}": shutil.which(name, path=search) for name in ("python", "python3")
    }  # activating another environment changes the answer
    for path in [*target.references, *script_files(target.program, target.directory)]:
        try:
            stat = path.stat()
        except OSError:
            continue
        stamps[str(path)] = [stat.st_mtime_ns, stat.st_size]
    return stamps


def read(target: Target) -> dict[str, Any] | None:
    """The cache record, if any (whatever its state)."""
    try:
        record = json.loads(target.cache_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def is_fresh(target: Target, record: dict[str, Any] | None) -> bool:
    return (
        record is not None
        and record.get("program") == target.program
        and record.get("stamps") == _stamps(target)
    )


def cached_schema(target: Target) -> Schema | None:
    """The cached schema when the cache is fresh (never probes)."""
    record = read(target)
    if not is_fresh(target, record) or not record or not record.get("schema"):
        return None
    try:
        return parse_schema(record["schema"])
    except SchemaError:
        return None


def schema_for(target: Target, fallback: Schema | None, *, refresh: bool = False) -> Schema | None:
    """The program's own schema (cached, probing when stale), else ``fallback`` (inline)."""
    if not target.probe_allowed:
        return fallback
    record = read(target)
    if refresh or not is_fresh(target, record):
        record = probe_and_store(target)
    if record and record.get("schema"):
        try:
            return parse_schema(record["schema"])
        except SchemaError:
            return fallback
    return fallback


def probe_and_store(target: Target) -> dict[str, Any]:
    """Ask the program, write the cache (a failure is recorded too) and return the record."""
    schema, error = probe(target)
    record = {
        "program": target.program,
        "stamps": _stamps(target),
        "schema": schema.to_json() if schema else None,
        "error": error,
    }
    try:
        target.cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.cache_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        tmp.replace(target.cache_file)
    except OSError as err:
        console.detail(f"fdl: cannot write the schema cache {target.cache_file}: {err.strerror}")
    return record


def probe(target: Target) -> tuple[Schema | None, str | None]:
    """Run ``<program> --fdl-schema`` (in the service's container when ``docker:``)."""
    from fdl.tasks.docker import in_container

    inner = f"{target.program.strip()} {PROBE_FLAG}"
    if "#" in target.program:  # a trailing shell comment would swallow the flag
        inner = f"{_strip_comment(target.program)} {PROBE_FLAG}"
    if target.docker and not in_container():
        from fdl.tasks.docker import probe_command

        argv, cwd = probe_command(target.docker, inner, target.directory)
    else:
        argv, cwd = ["sh", "-c", inner], target.directory
    console.detail(f"fdl: asking for the schema: {inner}")
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=target.env,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"{inner}: {err}"
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return None, f"'{inner}' exited with {done.returncode}: {tail[:200]}"
    start = done.stdout.find("{")
    if start < 0:
        return None, f"'{inner}' printed no JSON object"
    try:
        data, _ = json.JSONDecoder().raw_decode(done.stdout[start:])
        return parse_schema(data), None
    except ValueError as err:
        return None, f"'{inner}' printed an invalid schema: {err}"


def _strip_comment(program: str) -> str:
    """``cmd args  # note`` -> ``cmd args`` (a ``#`` starting a word begins a shell comment)."""
    words = program.split(" ")
    for index, word in enumerate(words):
        if word.startswith("#"):
            return " ".join(words[:index]).strip()
    return program.strip()


def cache_files(root: Path, max_depth: int = 6) -> list[Path]:
    """Every schema cache under the project ``root`` (skipping VCS, virtualenvs, node_modules)."""
    skip = {".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__", "target"}
    found: list[Path] = []

    def walk(directory: Path, depth: int) -> None:
        cache = directory / CACHE_DIR
        if cache.is_dir():
            found.extend(sorted(cache.glob("*.json")))
        if depth >= max_depth:
            return
        try:
            children = sorted(p for p in directory.iterdir() if p.is_dir())
        except OSError:
            return
        for child in children:
            if child.name not in skip and child.name != ".fdl":
                walk(child, depth + 1)

    walk(root, 0)
    return found
