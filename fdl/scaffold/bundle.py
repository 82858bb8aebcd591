"""Where the running flodl came from, and a wheel of it for projects that cannot name that origin.

A project made by ``fdl init`` must install on a fresh machine with one command. When the running
flodl came from a package index, the project's requirement (``flodl>=0.1,<0.2``) resolves there.
Any other origin — a checkout (editable or not), a local wheel, a git URL — is only a path or a
URL this machine knows: a ``file://`` path does not exist elsewhere, a private or moved git URL
fails, and an editable checkout may hold changes no URL names. So the project gets a wheel of the
*running* flodl (``.fdl/wheels/flodl-VERSION-py3-none-any.whl``, committed with it) and installs
it through ``--find-links``: exactly the code that generated the project, offline.

The origin is read from PEP 610's ``direct_url.json`` of the installed distribution; when the
running code is not that distribution (e.g. a checkout first on ``PYTHONPATH``), it is a source
tree. No record is not proof of a package index: pip writes none for a wheel it found through
``--find-links`` either — which is how a generated project installs its bundled wheel. So without
a record, a wheel ``fdl init`` bundled (its ``WHEEL`` file says so) stays bundled, and anything
else counts as from an index only when the index (PyPI's JSON API, ``FDL_UPDATE_INDEX_URL``)
answers that it has this very version; when in doubt, the project gets the wheel — or, on
``fdl init --update``, keeps what it recorded when the index could not be asked (opted out with
``FDL_NO_UPDATE_CHECK``/``CI``, offline, no proper answer in 5 s).
:func:`detect_origin` is that decision, for any command that needs to know.

The wheel is packed from the running ``flodl`` and ``fdl`` packages (pure Python), with the same
layout as the wheel ``make dist`` builds, deterministically: the same code gives the same bytes,
so ``fdl init --update`` only replaces it when flodl changed.
"""

from __future__ import annotations

import base64
import email
import hashlib
import importlib.util
import io
import json
import threading
import tomllib
import zipfile
from dataclasses import dataclass
from importlib import metadata
from importlib.abc import Traversable
from pathlib import Path

from fdl import __version__
from fdl.resources import BUNDLED, bundled_dir

_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: identical code gives an identical wheel
_GENERATOR = "fdl init"  # the WHEEL file's Generator of the wheels built here
DEFAULT_INDEX = "https://pypi.org/pypi/flodl/json"  # as fdl.update_check (FDL_UPDATE_INDEX_URL)
INDEX_TIMEOUT_S = 3.0  # each socket operation of the query
INDEX_DEADLINE_S = 5.0  # the whole query, DNS included


@dataclass(frozen=True)
class Origin:
    """Where the running flodl comes from.

    ``kind``: ``index`` (a package index that has this version: the project's requirement
    resolves anywhere), ``editable`` / ``directory`` (a checkout), ``archive`` (a wheel or sdist
    file or URL), ``vcs`` (a git URL), ``source`` (imported from a source tree that is not
    installed), ``bundled`` (a wheel ``fdl init`` bundled into a project, installed through
    ``--find-links``) or ``unrecorded`` (no origin record, and the index does not confirm this
    version: a local wheel found through ``--find-links``, a private index, or offline).
    """

    kind: str
    url: str = ""
    asked: bool = True  # False: ``unrecorded`` because the index could not tell (see index_has)

    @property
    def from_index(self) -> bool:
        return self.kind == "index"

    def describe(self) -> str:
        """One line, e.g. ``an editable checkout (file:///src/flodl-python)``.

        >>> Origin("index").describe()
        'a package index'
        """
        words = {
            "index": "a package index",
            "editable": "an editable checkout",
            "directory": "a checkout",
            "archive": "a wheel or source archive",
            "vcs": "a version-control URL",
            "source": "a source tree on the Python path",
            "bundled": "a wheel bundled by fdl init",
            "unrecorded": "an install with no origin record, which the package index does not "
            "confirm (a wheel found through --find-links, or a private index)",
        }[self.kind]
        if self.kind == "unrecorded" and not self.asked:
            words = "an install with no origin record; the package index could not be asked"
        return f"{words} ({self.url})" if self.url else words


def running_packages() -> dict[str, Path]:
    """The directories of the ``flodl`` and ``fdl`` packages this process imports."""
    found = {}
    for name in ("flodl", "fdl"):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            from fdl.errors import ExitCode, FdlError

            raise FdlError(
                f"cannot locate the running '{name}' package",
                "reinstall flodl",
                ExitCode.UNAVAILABLE,
            )
        found[name] = Path(next(iter(spec.submodule_search_locations))).resolve()
    return found


def detect_origin(distribution: metadata.Distribution | None = None) -> Origin:
    """Where the running flodl came from (PEP 610 ``direct_url.json``; see the module docstring)."""
    if distribution is None:
        try:
            distribution = metadata.distribution("flodl")
        except metadata.PackageNotFoundError:
            return Origin("source", running_packages()["flodl"].parent.as_uri())
    raw = distribution.read_text("direct_url.json")
    if raw is None:
        kind, url = "unrecorded", ""  # decided below, once the distribution is the running code
    else:
        try:
            data = json.loads(raw)
        except ValueError:
            data = {}
        url = str(data.get("url", ""))
        if "vcs_info" in data:
            kind = "vcs"
        elif "archive_info" in data:
            kind = "archive"
        elif data.get("dir_info", {}).get("editable"):
            kind = "editable"
        else:
            kind = "directory"
    running = running_packages()["flodl"]
    if kind != "editable" and not _installs(distribution, running):
        return Origin("source", running.parent.as_uri())
    if kind == "editable" and url.startswith("file://"):
        # An editable install points at its checkout: is that the code running here?
        checkout = Path(url.removeprefix("file://")).resolve()
        if running.parent != checkout:
            return Origin("source", running.parent.as_uri())
    if kind == "unrecorded":
        return _unrecorded(distribution)
    return Origin(kind, url)


def _unrecorded(distribution: metadata.Distribution) -> Origin:
    """The origin of a distribution pip wrote no ``direct_url.json`` for (module docstring)."""
    wheel = distribution.read_text("WHEEL") or ""
    if any(line.strip() == f"Generator: {_GENERATOR}" for line in wheel.splitlines()):
        return Origin("bundled")
    has = index_has(distribution.version)
    if has:
        return Origin("index")
    return Origin("unrecorded", asked=has is not None)


def index_url(version: str, url: str | None = None) -> str:
    """The JSON API of flodl ``version`` on the package index: PyPI's per-version endpoint, or
    the one next to ``FDL_UPDATE_INDEX_URL`` (which names the project's, as for
    ``fdl.update_check``).

    >>> index_url("0.1.0", "https://pypi.org/pypi/flodl/json")
    'https://pypi.org/pypi/flodl/0.1.0/json'
    """
    import os
    from urllib.parse import quote

    url = url or os.environ.get("FDL_UPDATE_INDEX_URL", DEFAULT_INDEX)
    base = url.rstrip("/").removesuffix("/json")
    return f"{base}/{quote(version, safe='')}/json"


def index_has(version: str, url: str | None = None) -> bool | None:
    """Whether the package index (PyPI's JSON API for flodl, or ``FDL_UPDATE_INDEX_URL``) has
    files of flodl ``version`` that are not all yanked; None when it cannot tell.

    It cannot tell when it is not to be asked (``FDL_NO_UPDATE_CHECK=1`` or ``CI``, as for the
    update check), or does not answer properly within ``INDEX_DEADLINE_S`` (offline, a proxy's
    garbage, an error, a slow DNS: the request runs in a daemon thread, left behind at the
    deadline). A version the index does not list (404) is a no."""
    from fdl import update_check

    if not update_check.enabled():
        return None
    target = index_url(version, url)
    answer: list[bool | None] = [None]

    def ask() -> None:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(target, timeout=INDEX_TIMEOUT_S) as response:
                data = json.loads(response.read(32 << 20))
            files = data["urls"]
            answer[0] = any(isinstance(f, dict) and not f.get("yanked") for f in files)
        except urllib.error.HTTPError as err:
            answer[0] = False if err.code == 404 else None
        except Exception:  # any failure of the request (http.client's too): cannot tell
            answer[0] = None

    thread = threading.Thread(target=ask, name="fdl-index-query", daemon=True)
    thread.start()
    thread.join(INDEX_DEADLINE_S)
    return None if thread.is_alive() else answer[0]


def _installs(distribution: metadata.Distribution, package_dir: Path) -> bool:
    """Whether ``distribution`` installed the files of ``package_dir`` (the running package)."""
    init = package_dir / "__init__.py"
    for file in distribution.files or ():
        if file.name == "__init__.py" and file.parent.name == package_dir.name:
            try:
                if Path(str(distribution.locate_file(file))).resolve() == init:
                    return True
            except OSError:
                continue
    return False


def wheel_name(version: str = __version__) -> str:
    """The bundled wheel's file name.

    >>> wheel_name("0.1.0")
    'flodl-0.1.0-py3-none-any.whl'
    """
    return f"flodl-{version.replace('-', '_')}-py3-none-any.whl"


def build_wheel() -> tuple[str, bytes]:
    """A wheel of the running flodl (``flodl`` + ``fdl`` + fdl's bundled data): (name, bytes)."""
    packages = running_packages()
    entries: dict[str, bytes] = {}
    for name, folder in packages.items():
        for path in sorted(folder.rglob("*")):
            relative = path.relative_to(folder)
            if not path.is_file() or _skipped(relative):
                continue
            if name == "fdl" and relative.parts[0] == "_bundled":
                continue  # added below from wherever this install keeps it
            entries[f"{name}/{relative.as_posix()}"] = path.read_bytes()
    for data in BUNDLED:
        for parts, content in _walk(bundled_dir(data), ()):
            if not _skipped(Path(*parts)):
                entries["/".join(("fdl", "_bundled", data, *parts))] = content
    info = f"flodl-{__version__.replace('-', '_')}.dist-info"
    entries[f"{info}/METADATA"] = _metadata(packages["flodl"]).encode("utf-8")
    entries[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: {_GENERATOR}\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    ).encode()
    entries[f"{info}/entry_points.txt"] = b"[console_scripts]\nfdl = fdl.main:main\n"
    record = [f"{path},sha256={_b64(content)},{len(content)}" for path, content in entries.items()]
    entries[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, content in entries.items():
            item = zipfile.ZipInfo(member, _EPOCH)
            item.external_attr = 0o644 << 16
            item.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(item, content)
    return wheel_name(), buffer.getvalue()


def _skipped(relative: Path) -> bool:
    """Bytecode caches and hidden files (editor and OS droppings) stay out of the wheel."""
    hidden = any(part.startswith(".") for part in relative.parts)
    return hidden or "__pycache__" in relative.parts or relative.suffix in (".pyc", ".pyo")


def _walk(folder: Traversable, parts: tuple[str, ...]) -> list[tuple[tuple[str, ...], bytes]]:
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.is_dir():
            found += _walk(entry, (*parts, entry.name))
        else:
            found.append(((*parts, entry.name), entry.read_bytes()))
    return found


def _b64(content: bytes) -> str:
    digest = hashlib.sha256(content).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _metadata(flodl_dir: Path) -> str:
    """Core metadata: from the checkout's ``pyproject.toml`` when running from one, else from
    the installed distribution. Extras are kept (``Provides-Extra`` and their ``Requires-Dist``):
    without them pip installs ``flodl[hf]`` from the bundled wheel as plain flodl, warning only
    that the wheel "does not provide the extra 'hf'"."""
    requires_python = ">=3.11"
    pyproject = flodl_dir.parent / "pyproject.toml"
    project = {}
    if pyproject.is_file():
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    if project.get("name") == "flodl":
        requires_python = project.get("requires-python", requires_python)
        fields = [("Requires-Dist", r) for r in project.get("dependencies", [])]
        for extra, requires in project.get("optional-dependencies", {}).items():
            fields.append(("Provides-Extra", extra))
            fields += [("Requires-Dist", _in_extra(r, extra)) for r in requires]
    else:
        dist = metadata.distribution("flodl")
        requires_python = dist.metadata["Requires-Python"] or requires_python
        # as recorded, in order: a wheel of this wheel has the same METADATA
        recorded = email.message_from_string(dist.read_text("METADATA") or "")
        fields = [
            (key, str(value))
            for key, value in recorded.items()
            if key in ("Requires-Dist", "Provides-Extra")
        ]
    lines = [
        "Metadata-Version: 2.1",
        "Name: flodl",
        f"Version: {__version__}",
        "Summary: Describe networks, don't assemble them (bundled by fdl init).",
        f"Requires-Python: {requires_python}",
        *(f"{key}: {value}" for key, value in fields),
    ]
    return "\n".join(lines) + "\n"


def _in_extra(requirement: str, extra: str) -> str:
    """``requirement`` of the optional-dependency group ``extra``, as a wheel's metadata says it.

    >>> print(_in_extra("a>=1", "hf"), "|", _in_extra('b; python_version < "3.12"', "hf"))
    a>=1; extra == 'hf' | b; (python_version < "3.12") and extra == 'hf'
    """
    name, _, marker = requirement.partition(";")
    condition = f"extra == '{extra}'"
    if marker.strip():
        condition = f"({marker.strip()}) and {condition}"
    return f"{name.strip()}; {condition}"
