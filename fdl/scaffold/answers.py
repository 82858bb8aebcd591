"""``.fdl/project.toml``: how a project was generated, so ``fdl init --update`` can refresh it.

It records the fdl version, the answers, and the SHA-256 of every file as fdl wrote it: a file
whose hash still matches was not edited by you and can be replaced by a newer template safely.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

from fdl import __version__
from fdl.errors import FdlError
from fdl.scaffold.render import Answers

ANSWERS_PATH = ".fdl/project.toml"
_INSTALL_KEYS = ("torch_pin", "torch_index", "torch_reason", "flodl_wheel", "flodl_origin")


def digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def dump(answers: Answers, files: dict[str, bytes]) -> bytes:
    """The answers file for ``answers`` and the rendered ``files`` (TOML)."""
    q = json.dumps  # TOML basic strings accept JSON string escapes
    lines = [
        "# Written by `fdl init`. Keep it committed: `fdl init --update` reads it to bring",
        "# newer templates into this project without overwriting your edits.",
        "",
        "[template]",
        f"fdl_version = {q(__version__)}",
        "",
        "[answers]",
        f"name = {q(answers.name)}",
        f"package = {q(answers.package)}",
        f"mode = {q(answers.mode)}",
        f"cuda = {q(answers.cuda)}",
        f"cuda_reason = {q(answers.cuda_reason)}",
        f"torch = {q(answers.torch)}",
        f"torch_pin = {q(answers.torch_pin)}",
        f"torch_index = {q(answers.torch_index)}",
        f"torch_reason = {q(answers.torch_reason)}",
        f"flodl_wheel = {q(answers.flodl_wheel)}",
        f"flodl_origin = {q(answers.flodl_origin)}",
        "",
        "[files]  # SHA-256 of each file as generated",
        *(f"{q(path)} = {q(digest(content))}" for path, content in sorted(files.items())),
    ]
    return ("\n".join(lines) + "\n").encode("utf-8")


def load(root: Path) -> tuple[Answers, str, dict[str, str]]:
    """(answers, fdl version that wrote them, recorded hashes) of the project at ``root``."""
    path = root / ANSWERS_PATH
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        raw = data["answers"]
        answers = Answers(
            raw["name"],
            raw["package"],
            raw.get("mode", "native"),
            raw.get("cuda", ""),
            raw.get("cuda_reason", ""),
            raw.get("torch", ""),
            *(str(raw.get(key, "")) for key in _INSTALL_KEYS),
        )
        version = str(data.get("template", {}).get("fdl_version", "?"))
        return answers, version, dict(data.get("files", {}))
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as err:
        raise FdlError(
            f"cannot read {path}: {err}",
            "restore it from version control (it records how the project was generated)",
        ) from err


def find_project(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` holding ``.fdl/project.toml``."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / ANSWERS_PATH).is_file():
            return folder
    return None
