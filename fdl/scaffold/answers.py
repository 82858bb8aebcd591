"""``.fdl/project.toml``: how a project was generated, so ``fdl init --update`` can refresh it.

It records the fdl version, the answers, and the SHA-256 of every file as fdl wrote it: a file
whose hash still matches was not edited by you and can be replaced by a newer template safely.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from pathlib import Path

from fdl import __version__
from fdl.errors import FdlError
from fdl.scaffold.render import Answers

ANSWERS_PATH = ".fdl/project.toml"
_INSTALL_KEYS = ("torch_pin", "torch_index", "torch_reason", "flodl_wheel", "flodl_origin")
# Each answer with its value when the file lacks it (older fdl wrote fewer); None: required.
_DEFAULTS: dict[str, str | None] = {
    "name": None,
    "package": None,
    "mode": "native",
    "cuda": "",
    "cuda_reason": "",
    "torch": "",
    **dict.fromkeys(_INSTALL_KEYS, ""),
}


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
    """(answers, fdl version that wrote them, recorded hashes) of the project at ``root``.

    Every value is checked before anything is rendered from it: the package and the recorded
    paths name files under ``root``, so a hand-edited ``package = "../../x"`` or a recorded
    ``../`` path must not make ``--update`` write or delete outside the project.
    """
    path = root / ANSWERS_PATH
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        raw = data["answers"]
        values = {key: raw.get(key, default) for key, default in _DEFAULTS.items()}
        files = data.get("files", {})
        version = str(data.get("template", {}).get("fdl_version", "?"))
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, AttributeError) as err:
        raise FdlError(
            f"cannot read {path}: {err}",
            "restore it from version control (it records how the project was generated)",
        ) from err
    _check(path, values, files)
    return Answers(**values), version, dict(files)


# What fdl itself writes, checked before anything is rendered from the answers: each value lands
# in a file (a Dockerfile RUN line, constraints.txt, docker-compose.yml), so a hand-edited value
# must not add a line or an instruction there.
_TORCH_RELEASE = re.compile(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?")  # PEP 440, public
_TORCH_PIN = re.compile(rf"torch=={_TORCH_RELEASE.pattern}(\+[a-z0-9]+(\.[a-z0-9]+)*)?")
_INDEX_URL = re.compile(r"https?://[A-Za-z0-9._~:/?#@!$&'()*+,;=%\[\]-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # newlines and other controls


def _check(path: Path, values: dict[str, object], files: object) -> None:
    """Refuse answers fdl could not have written, naming the file and the key.

    The name and the package get the checks that keep paths and code safe (characters, a
    Python identifier), not the style rules of ``fdl init NAME`` (length, a trailing ``-``,
    Windows device names), some added after projects were made: those must still update.
    """
    import keyword

    from fdl.scaffold.names import package_name

    def bad(key: str, problem: str) -> FdlError:
        return FdlError(
            f"{path}: {key} {problem}",
            "fix it, or restore the file from version control (it records how the project "
            "was generated)",
        )

    for key, value in values.items():
        if not isinstance(value, str):
            raise bad(f"[answers] {key}", f"must be a string, not {value!r}")
        if _CONTROL.search(value):
            raise bad(
                f"[answers] {key} = {value!r}", "must be one line, without control characters"
            )
    name, package = str(values["name"]), str(values["package"])
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise bad(f"[answers] name = {name!r}", "is not valid: use only letters, digits, '-', '_'")
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", package) or keyword.iskeyword(package):
        raise bad(
            f"[answers] package = {package!r}",
            "is not valid: it must be a Python package name (lower case letters, digits, '_')",
        )
    if package != package_name(package):
        raise bad(f"[answers] package = {package!r}", "is not a package name (lower case, '_')")
    if values["mode"] not in ("native", "docker"):
        raise bad(f"[answers] mode = {values['mode']!r}", "must be 'native' or 'docker'")
    if values["cuda"] and not re.fullmatch(r"cu\d{3}", str(values["cuda"])):
        raise bad(f"[answers] cuda = {values['cuda']!r}", "must be a CUDA build like 'cu128'")
    torch = str(values["torch"])
    if torch and not _TORCH_RELEASE.fullmatch(torch):
        raise bad(f"[answers] torch = {torch!r}", "must be a torch release like '2.13.0'")
    pin = str(values["torch_pin"])
    if pin and not _TORCH_PIN.fullmatch(pin):
        raise bad(f"[answers] torch_pin = {pin!r}", "must be a pin like 'torch==2.13.0+cpu'")
    index = str(values["torch_index"])
    if index and not _INDEX_URL.fullmatch(index):
        raise bad(f"[answers] torch_index = {index!r}", "must be an http(s) URL")
    wheel = str(values["flodl_wheel"])
    if wheel and not re.fullmatch(r"flodl-[A-Za-z0-9_.+!]+-py3-none-any\.whl", wheel):
        raise bad(f"[answers] flodl_wheel = {wheel!r}", "must be a flodl wheel's file name")
    if not isinstance(files, dict):
        raise bad("[files]", "must be a table of paths and SHA-256 hashes")
    for recorded, digest_ in files.items():
        parts = recorded.split("/")
        if (
            recorded.startswith("/")
            or "\\" in recorded
            or ":" in parts[0]
            or any(part in ("", ".", "..") for part in parts)
        ):
            raise bad(f"[files] {recorded!r}", "is not a path inside the project")
        if not isinstance(digest_, str) or not re.fullmatch(r"[0-9a-f]{64}", digest_):
            raise bad(f"[files] {recorded!r}", "must be a SHA-256 hash (64 hex digits)")


def find_project(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` holding ``.fdl/project.toml``."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / ANSWERS_PATH).is_file():
            return folder
    return None
