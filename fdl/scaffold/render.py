"""Render the project templates into memory: ``{relative path: bytes}``.

Template tree conventions (``scaffold_templates/project``): ``*.jinja`` files are rendered with
jinja2 (undefined variables are errors), other files are copied; a ``__package__`` path part
becomes the package name and a ``dot-`` prefix a leading dot (``dot-gitignore`` ->
``.gitignore``); Docker files are left out of native projects.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from importlib.abc import Traversable
from typing import Any, Literal

from fdl import __version__
from fdl.errors import FdlUsageError
from fdl.resources import bundled_dir

Mode = Literal["native", "docker"]
DOCKER_ONLY = frozenset({"Dockerfile", "Dockerfile.cuda", "docker-compose.yml", ".dockerignore"})
WHEELS_DIR = (
    ".fdl/wheels"  # a bundled flodl wheel (fdl.scaffold.bundle), committed with the project
)
DOCKER_PYTHON = "3.12"  # the images' base (python:3.12-slim); torch must have wheels for it


@dataclass(frozen=True)
class Answers:
    """Everything a project is rendered from (stored in ``.fdl/project.toml``)."""

    name: str
    package: str
    mode: Mode = "native"
    cuda: str = ""  # the GPU image's torch build (Docker mode; fdl.scaffold.cuda chooses it)
    cuda_reason: str = ""
    torch: str = ""  # the GPU image's torch release; "" (answers of older fdl): unpinned
    # How the project installs (fdl.scaffold.torch_pin, fdl.scaffold.bundle); "": not chosen.
    torch_pin: str = ""  # constraints.txt's torch line for the machine, e.g. torch==2.13.0+cpu
    torch_index: str = ""  # the wheel index that has it ("" on macOS: PyPI's)
    torch_reason: str = ""
    flodl_wheel: str = ""  # the bundled wheel's name under .fdl/wheels ("": flodl from an index)
    flodl_origin: str = ""  # where the running flodl came from, in words

    @property
    def docker(self) -> bool:
        return self.mode == "docker"

    def context(self) -> dict[str, Any]:
        if self.docker and not self.cuda:
            raise FdlUsageError(
                "a Docker project needs the CUDA build of its GPU image",
                "pass cuda= (e.g. fdl.scaffold.cuda.choose_cuda(None).tag), as fdl init does",
            )
        from urllib.parse import urlparse

        index = urlparse(self.torch_index)
        return {
            **asdict(self),
            "docker": self.docker,
            "torch_trusted_host": (index.hostname or "") if index.scheme == "http" else "",
            "flodl_version": __version__,
            "wheels_dir": WHEELS_DIR,
            "flodl_requirement": flodl_requirement(__version__),
            "fdl_version": __version__,
            "docker_python": DOCKER_PYTHON,
        }


def flodl_requirement(version: str) -> str:
    """A requirement compatible with ``version`` (semver: 0.x minors are breaking).

    The lower bound is ``version`` itself, pre-, post- and dev-release parts included: a bound of
    ``0.2.0`` would exclude ``0.2.0rc1``, which ``constraints.txt`` pins (``flodl==0.2.0rc1``),
    and pip could resolve neither. A local label (``+abc``) is not allowed in ``>=``: dropped.

    >>> flodl_requirement("0.1.3"), flodl_requirement("1.4.0"), flodl_requirement("0.2.0rc1")
    ('flodl>=0.1.3,<0.2', 'flodl>=1.4.0,<2', 'flodl>=0.2.0rc1,<0.3')
    """
    match = re.match(r"v?(\d+(?:\.\d+)*)(.*)", version.strip().split("+")[0])
    numbers, suffix = (match.group(1), match.group(2)) if match else ("0", "")
    parts = [int(p) for p in numbers.split(".")]
    parts += [0] * (3 - len(parts))
    major, minor = parts[0], parts[1]
    release = ".".join(str(p) for p in parts)
    upper = f"0.{minor + 1}" if major == 0 else str(major + 1)
    return f"flodl>={release}{suffix},<{upper}"


def normalize_cuda(tag: str) -> str:
    """``12.8``, ``cu128`` or ``128`` -> ``cu128`` (the PyTorch wheel-index name).

    >>> normalize_cuda("12.6"), normalize_cuda("cu130")
    ('cu126', 'cu130')
    """
    text = tag.strip().lower().removeprefix("cu")
    match = re.fullmatch(r"(\d{2})\.?(\d)", text)
    if not match:
        raise FdlUsageError(
            f"--cuda {tag!r} is not a CUDA version", "write it as 12.8 or cu128 (see fdl diagnose)"
        )
    return f"cu{match.group(1)}{match.group(2)}"


def render(answers: Answers, templates: Traversable | None = None) -> dict[str, bytes]:
    """Every file of the project for ``answers``, rendered (paths use ``/``)."""
    import jinja2

    root = templates if templates is not None else bundled_dir("scaffold_templates") / "project"
    environment = jinja2.Environment(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
    )
    context = answers.context()
    files: dict[str, bytes] = {}
    for parts, entry in _walk(root, ()):
        target = [_target_name(part, answers.package) for part in parts]
        if target[-1].endswith(".jinja"):
            target[-1] = target[-1].removesuffix(".jinja")
            text = entry.read_text(encoding="utf-8")
            content = environment.from_string(text).render(context).encode("utf-8")
        else:
            content = entry.read_bytes()
        if not answers.docker and target[-1] in DOCKER_ONLY:
            continue
        files["/".join(target)] = content
    return dict(sorted(files.items()))


def _walk(folder: Traversable, parts: tuple[str, ...]) -> list[tuple[tuple[str, ...], Traversable]]:
    found = []
    for entry in folder.iterdir():
        if entry.name == "__pycache__":
            continue
        if entry.is_dir():
            found += _walk(entry, (*parts, entry.name))
        else:
            found.append(((*parts, entry.name), entry))
    return found


def _target_name(part: str, package: str) -> str:
    part = part.replace("__package__", package)
    return "." + part.removeprefix("dot-") if part.startswith("dot-") else part
