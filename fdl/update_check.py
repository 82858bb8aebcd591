"""Is a newer flodl available from where this one came? (``fdl install --check``, the notice).

The origin is read from the installed distribution's PEP 610 record (``direct_url.json``):

- a local directory (``pip install /path`` or ``-e``): the version in that checkout's
  ``flodl/_version.py``;
- a wheel file: the newest ``flodl-*.whl`` next to it (a wheel named with ``fdl install --from``
  is that wheel, exactly);
- a VCS URL (``git+https://...``): the commit its branch points at now (``git ls-remote``),
  compared with the commit installed;
- no record: the package index (``FDL_UPDATE_INDEX_URL``, default PyPI's JSON API). pip records
  no origin for a wheel found with ``--find-links DIR`` (or on a private index) either: when the
  index does not have flodl, the origin is "unknown", and ``fdl install --from DIR`` names it.

The notice: when fdl runs on a terminal, it prints one line if the last check (at most a day old,
in ``~/.flodl/update-check.json``) found a newer flodl; a check older than a day is refreshed by a
detached background process, so fdl never waits for the network — offline, nothing is printed and
nothing is slower. ``FDL_NO_UPDATE_CHECK=1`` (or ``CI``) turns both off.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DAY_S = 24 * 3600
TIMEOUT_S = 3.0
DEFAULT_INDEX = "https://pypi.org/pypi/flodl/json"


@dataclass
class Check:
    """The outcome of one check."""

    current: str
    origin: str  # "index", "directory", "wheel", "vcs", "source tree", "unknown"
    where: str
    latest: str | None = None  # a version, or a commit for VCS origins
    newer: bool = False
    error: str | None = None
    upgrade: list[str] | None = None  # the command that installs the newer one
    # then, only when pip kept the installed flodl (VCS: a new commit, the same version number)
    reinstall: list[str] | None = None

    def describe(self) -> str:
        if self.origin == "unknown":
            return f"where flodl came from is unknown: {self.error}"
        if self.error:
            return f"could not check {self.origin} {self.where}: {self.error}"
        if self.newer:
            return f"flodl {self.latest} is available from {self.where} (you have {self.current})"
        return f"flodl {self.current} is the newest from {self.where}"


def version_key(version: str) -> tuple[Any, ...]:
    """A sortable key for a version string (PEP 440 through ``packaging`` when available)."""
    try:
        from packaging.version import Version

        return (0, Version(version))
    except Exception:
        return (1, tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.+-]", version)))


def _newer(latest: str, current: str) -> bool:
    try:
        return version_key(latest) > version_key(current)
    except TypeError:
        return False


def origin() -> tuple[str, str, dict[str, Any]]:
    """(kind, where, the direct_url record) of the running flodl."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution("flodl")
    except importlib.metadata.PackageNotFoundError:
        return "source tree", str(Path(__file__).resolve().parent.parent), {}
    here = Path(__file__).resolve()
    located = Path(str(dist.locate_file(""))).resolve()
    record_text = dist.read_text("direct_url.json")
    record = json.loads(record_text) if record_text else {}
    if not record and not str(here).startswith(str(located)):
        return "source tree", str(here.parent.parent), {}
    url = str(record.get("url", ""))
    if "vcs_info" in record:
        return "vcs", url, record
    if url.startswith("file://"):
        from urllib.parse import unquote, urlsplit

        path = unquote(urlsplit(url).path)  # a URL: "my%20wheels" is the folder "my wheels"
        return ("wheel" if path.endswith(".whl") else "directory"), path, record
    return "index", os.environ.get("FDL_UPDATE_INDEX_URL", DEFAULT_INDEX), record


def origin_of(source: str) -> tuple[str, str, dict[str, Any]]:
    """(kind, where, record) for ``fdl install --from SOURCE``: a checkout, a folder of wheels
    (its newest ``flodl-*.whl``) or a ``flodl-*.whl`` (that one: the record says ``named``)."""
    path = Path(source).expanduser().resolve()
    if (path / "flodl" / "_version.py").is_file():
        return "directory", str(path), {}
    if path.suffix == ".whl" and path.is_file():
        if not path.name.startswith("flodl-"):
            raise ValueError(f"{source} is not a flodl wheel (flodl-*.whl)")
        return "wheel", str(path), {"named": True}
    if path.is_dir() and any(path.glob("flodl-*.whl")):
        return "wheel", str(path), {}
    raise ValueError(
        f"{source} is neither a flodl checkout nor a wheel nor a folder of flodl wheels"
    )


def check(current: str | None = None, source: str | None = None) -> Check:
    """Look for a newer flodl where this one came from, or in ``source`` (network calls time out
    in 3 s)."""
    from fdl import __version__

    current = current or __version__
    kind, where, record = origin() if source is None else origin_of(source)
    result = Check(current, kind, where)
    try:
        if kind == "directory":
            text = (Path(where) / "flodl" / "_version.py").read_text(encoding="utf-8")
            match = re.search(r"__version__\s*=\s*[\"']([^\"']+)", text)
            result.latest = match.group(1) if match else None
            editable = (record.get("dir_info") or {}).get("editable")
            result.upgrade = None if editable else _pip(where)
        elif kind == "wheel" and record.get("named"):  # `--from` this wheel: it, not the newest
            result.latest = Path(where).name.split("-")[1]
            result.upgrade = _pip(where)
        elif kind == "wheel":
            folder = Path(where) if Path(where).is_dir() else Path(where).parent
            result.where = str(folder)  # where a newer one is looked for, not the installed one
            wheels = [w.name.split("-")[1] for w in folder.glob("flodl-*.whl")]
            if not wheels:
                raise FileNotFoundError("no flodl-*.whl there (moved or deleted?)")
            result.latest = max(wheels, key=version_key)
            newest = next(folder.glob(f"flodl-{result.latest}-*.whl"))
            result.upgrade = _pip(str(newest))
        elif kind == "vcs":
            info = record["vcs_info"]
            ref = info.get("requested_revision")
            done = subprocess.run(
                ["git", "ls-remote", where, ref or "HEAD"],
                capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
            )  # fmt: skip
            if done.returncode != 0 or not done.stdout.strip():
                raise OSError((done.stderr.strip() or "no answer").splitlines()[-1])
            commit = done.stdout.split()[0]
            result.latest = commit[:12]
            result.newer = commit != info.get("commit_id")
            # No "@HEAD" without a requested revision: pip would run `git checkout -b HEAD`,
            # which git refuses. The upgrade installs the new commit's new or raised
            # requirements (only those: torch stays). A new commit may keep the version number,
            # and pip then keeps the installed flodl: only then, flodl alone is reinstalled.
            spec = f"{info.get('vcs', 'git')}+{where}" + (f"@{ref}" if ref else "")
            pip = _pip(spec)[:-1]
            result.upgrade = [*pip, "--upgrade", "--upgrade-strategy", "only-if-needed", spec]
            result.reinstall = [*pip, "--force-reinstall", "--no-deps", spec]
            return result
        elif kind == "index":
            import urllib.error
            import urllib.request

            try:
                with urllib.request.urlopen(where, timeout=TIMEOUT_S) as response:
                    result.latest = json.loads(response.read(1 << 20))["info"]["version"]
            except urllib.error.HTTPError as err:
                if err.code != 404:
                    raise
                # pip records no origin for a wheel found with --find-links (or on another
                # index): flodl not being on this index says so, not a network failure
                result.origin = "unknown"
                result.error = (
                    f"flodl is not on {where}, and its install recorded no other origin (pip "
                    "records none for a wheel found with --find-links DIR)"
                )
                return result
            result.upgrade = _pip("flodl", upgrade=True)
        else:
            result.error = "not installed as a package (update the checkout, e.g. git pull)"
            return result
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired, StopIteration) as err:
        result.error = str(err) or type(err).__name__
        return result
    latest = result.latest
    result.newer = _newer(latest, current) if latest else False
    return result


def _pip(spec: str, *, upgrade: bool = False) -> list[str]:
    return [sys.executable, "-m", "pip", "install", *(["--upgrade"] if upgrade else []), spec]


_INSTALLED_COMMIT = (
    "import importlib.metadata as m, json; "
    "record = json.loads(m.distribution('flodl').read_text('direct_url.json') or '{}'); "
    "print(record.get('vcs_info', {}).get('commit_id', ''))"
)


def kept_installed(result: Check, python: str = sys.executable) -> bool:
    """After ``result.upgrade`` ran (a VCS origin): whether flodl in ``python``'s environment is
    still not the commit the check found — pip calls a new commit of the same version number
    installed — so that ``result.reinstall`` must run. In doubt, yes."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # what pip installed
    try:
        done = subprocess.run(
            [python, "-P", "-c", _INSTALLED_COMMIT],
            capture_output=True, text=True, timeout=60, check=False, env=env,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return True
    commit = done.stdout.strip()
    return done.returncode != 0 or not result.latest or not commit.startswith(result.latest)


# --- the notice -----------------------------------------------------------------------------------


def cache_file() -> Path:
    from fdl.libtorch_home.layout import global_root

    return global_root() / "update-check.json"


def enabled() -> bool:
    off = os.environ.get("FDL_NO_UPDATE_CHECK", "").strip().lower() not in ("", "0", "false")
    return not off and not os.environ.get("CI")


def notice(*, stderr_is_tty: bool | None = None, now: float | None = None) -> str | None:
    """The line to print (or ``None``), and a background refresh when the cache is stale.

    Reads one small file; never touches the network in this process.
    """
    if not enabled():
        return None
    forced = os.environ.get("FDL_UPDATE_CHECK") == "1"
    tty = sys.stderr.isatty() if stderr_is_tty is None else stderr_is_tty
    if not (tty or forced):
        return None
    now = time.time() if now is None else now
    try:
        cached = json.loads(cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cached = {}
    if now - float(cached.get("checked_at", 0)) > DAY_S:
        _refresh_in_background()
    from fdl import __version__

    if cached.get("newer") and cached.get("current") == __version__ and not cached.get("error"):
        return (
            f"flodl {cached.get('latest')} is available (you have {__version__}): "
            "'fdl install' updates, 'fdl install --check' explains; FDL_NO_UPDATE_CHECK=1 hides this"
        )
    return None


def _refresh_in_background() -> None:
    """Start ``python -m fdl.update_check`` detached (its own session, no inherited output)."""
    with contextlib.suppress(OSError):
        subprocess.Popen(
            [sys.executable, "-m", "fdl.update_check"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )


def refresh() -> Check:
    """Check now and record the result (with its time) for the notice."""
    result = check()
    path = cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"checked_at": time.time(), **asdict(result)}), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass
    return result


if __name__ == "__main__":  # the background refresh
    refresh()
