"""Extract a zip safely: bounded, CRC-checked, every member confined to the target, then an atomic
rename.

Rejected: absolute paths, drive letters, ``..`` components, symlinks whose target leaves the
installed tree (resolved with every link of the archive in place, so chains of links that each look
harmless are caught), and any member written beneath a symlink. Extraction happens in a temporary
sibling directory; only a complete, valid tree is renamed to ``dest`` (an existing ``dest`` is
replaced only then).

Bounded (zip bombs): before anything is written, the total uncompressed size the archive declares
must stay under :attr:`ExtractLimits.max_size`, its ratio to the archive's size under
:attr:`ExtractLimits.max_ratio`, and fit on the disk; while writing, the bytes actually produced are
counted against the same bounds, so an archive whose headers lie is stopped too. Every member is
decompressed exactly once, and its CRC is checked as it is written (no separate test pass).

Interrupted: Ctrl-C and SIGTERM remove the staging tree before the process ends. A process killed
outright cannot: its trees are named ``.<dest>.extract-<host>-<pid>-…`` (and ``.<dest>.old-…`` for
a replaced tree being deleted), so a later extraction next to them removes those whose process has
ended on this host (:func:`remove_stale_staging`), never a live run's.

:func:`remote_unpacked_size` reads what a remote zip unpacks to from its central directory with a
few ``Range`` requests, so a caller can check the disk before downloading it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import socket
import stat
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from fdl.downloads.errors import InsufficientSpaceError, UnsafeArchiveError, unwritable
from fdl.errors import ExitCode, FdlError, FdlUsageError

MAX_SIZE_ENV = "FDL_MAX_EXTRACT_SIZE"
MAX_RATIO_ENV = "FDL_MAX_EXTRACT_RATIO"
# Real libtorch archives unpack to 2-4 GB (CUDA builds, about twice their download) and at most
# ~4x their size; these bounds leave a wide margin for growth while stopping a zip bomb (deflate
# reaches ~1000x) long before the disk fills.
DEFAULT_MAX_SIZE = 32 * 1024**3
DEFAULT_MAX_RATIO = 50.0
SPARE_BYTES = 64 << 20  # keep this much disk free beyond the extracted tree
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str, what: str) -> int:
    """``"32G"``, ``"500M"``, ``"1.5GB"``, ``"1048576"`` → bytes (binary units); a usage error
    naming ``what`` otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", str(text), re.IGNORECASE)
    if not match or float(match[1]) <= 0:
        raise FdlUsageError(
            f"{what} {text!r} is not a size", "write it like 32G, 500M or a number of bytes"
        )
    return int(float(match[1]) * _UNITS[match[2].lower()])


def _positive(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise FdlUsageError(f"{what} {text!r} is not a positive number", "e.g. 50")
    return value


@dataclass(frozen=True)
class ExtractLimits:
    """How much an archive may unpack to: ``max_size`` bytes in total, and at most ``max_ratio``
    times the archive's own size.

    >>> ExtractLimits.resolve(max_size="8G").max_size == 8 * 1024**3
    True
    """

    max_size: int = DEFAULT_MAX_SIZE
    max_ratio: float = DEFAULT_MAX_RATIO

    @classmethod
    def resolve(
        cls, max_size: str | int | None = None, max_ratio: str | float | None = None
    ) -> ExtractLimits:
        """The given values, else ``FDL_MAX_EXTRACT_SIZE`` / ``FDL_MAX_EXTRACT_RATIO``, else the
        defaults (32 GiB, 50x)."""
        size = max_size if max_size is not None else os.environ.get(MAX_SIZE_ENV) or None
        ratio = max_ratio if max_ratio is not None else os.environ.get(MAX_RATIO_ENV) or None
        source = "--max-extract-size" if max_size is not None else MAX_SIZE_ENV
        rsource = "--max-extract-ratio" if max_ratio is not None else MAX_RATIO_ENV
        return cls(
            max_size=DEFAULT_MAX_SIZE
            if size is None
            else size
            if isinstance(size, int)
            else parse_size(size, source),
            max_ratio=DEFAULT_MAX_RATIO if ratio is None else _positive(str(ratio), rsource),
        )


def human_size(n: float) -> str:
    """A size for a message: ``3.21 GiB``, ``8.0 MiB``, ``7.9 KiB``, ``512 B``.

    >>> human_size(64 << 20)
    '64.0 MiB'
    """
    if n >= 1024**3:
        return f"{n / 1024**3:.2f} GiB"
    if n >= 1024**2:
        return f"{n / 1024**2:.1f} MiB"
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{int(n)} B"


def _refuse_bomb(archive: Path, what: str, hint: str) -> UnsafeArchiveError:
    return UnsafeArchiveError(f"{archive.name} {what}; refusing to extract (a zip bomb?)", hint)


def _check_bounds(archive: Path, declared: int, limits: ExtractLimits, where: Path) -> None:
    """Before writing anything: the declared total against the caps and the free disk space."""
    packed = max(1, archive.stat().st_size)
    if declared > limits.max_size:
        raise _refuse_bomb(
            archive,
            f"unpacks to {human_size(declared)}, over the {human_size(limits.max_size)} limit",
            f"if you trust it, raise the limit: --max-extract-size or {MAX_SIZE_ENV}",
        )
    if declared > limits.max_ratio * packed:
        raise _refuse_bomb(
            archive,
            f"unpacks to {declared / packed:.0f}x its size ({human_size(declared)} from "
            f"{human_size(packed)}), over the {limits.max_ratio:g}x limit",
            f"if you trust it, raise the limit: --max-extract-ratio or {MAX_RATIO_ENV}",
        )
    check_room(where, declared, archive.name)


def check_room(where: Path, unpacked: int, name: str) -> None:
    """Refuse (:class:`InsufficientSpaceError`) when ``unpacked`` bytes and the 64 MiB kept
    free do not fit in ``where``."""
    free = shutil.disk_usage(where).free
    if unpacked + SPARE_BYTES > free:
        raise InsufficientSpaceError(
            f"not enough disk space in {where} to extract {name}: it unpacks to "
            f"{human_size(unpacked)}, and {human_size(SPARE_BYTES)} is kept free, so it needs "
            f"{human_size(unpacked + SPARE_BYTES)}; {human_size(free)} free",
            "free some space or choose another location (--path)",
            ExitCode.UNAVAILABLE,
        )


def _member_path(name: str) -> PurePosixPath:
    normalized = name.replace("\\", "/")
    path = PurePosixPath(normalized)
    if normalized.startswith("/") or (len(normalized) > 1 and normalized[1] == ":"):
        raise UnsafeArchiveError(
            f"archive member {name!r} has an absolute path", "refusing to extract"
        )
    if ".." in path.parts:
        raise UnsafeArchiveError(
            f"archive member {name!r} escapes the target (..)", "refusing to extract"
        )
    return path


def _is_symlink(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def _refuse_link(name: str, target: str) -> UnsafeArchiveError:
    return UnsafeArchiveError(
        f"symlink {name!r} points outside the archive ({target})", "refusing to extract"
    )


def _check_link(member: PurePosixPath, target: str, name: str) -> None:
    """Lexical check: catches the plain cases early, before the link exists."""
    if target.startswith("/") or "\\" in target:
        raise _refuse_link(name, target)
    depth = len(member.parts) - 1
    for part in PurePosixPath(target).parts:
        depth += -1 if part == ".." else (0 if part == "." else 1)
        if depth < 0:
            raise _refuse_link(name, target)


def _real_dir(staging: Path, rel: PurePosixPath, name: str) -> Path:
    """Create ``rel`` under ``staging`` as real directories and return it.

    A lexical check cannot see through links created earlier in the same archive (``y -> ..``,
    ``q -> y/..``): writing through one lands outside. So nothing is ever created beneath a
    symlink, whatever it points to: each component must be a real directory.
    """
    current = staging
    for part in rel.parts:
        current = current / part
        try:
            mode = current.lstat().st_mode
        except FileNotFoundError:
            current.mkdir()
            continue
        if stat.S_ISLNK(mode):
            raise UnsafeArchiveError(
                f"archive member {name!r} is written through a symlink ({part})",
                "refusing to extract",
            )
        if not stat.S_ISDIR(mode):
            raise UnsafeArchiveError(
                f"archive member {name!r} needs {part!r} to be a directory, but it is a file",
                "the archive is malformed; download it again",
            )
    return current


def _check_links_resolve_inside(root: Path, links: list[tuple[Path, str, str]]) -> None:
    """With every link in place, each one must resolve inside ``root`` (the final tree).

    Checked after extraction because a link's meaning depends on links created after it, and
    against the unwrapped root because ``libtorch/y -> ..`` is inside the archive but outside
    the installed tree once ``libtorch/`` is stripped.
    """
    real_root = root.resolve()
    for path, target, name in links:
        if not path.is_relative_to(root):
            continue  # a sibling of the unwrapped directory: not installed
        try:
            resolved = path.resolve()
        except (RuntimeError, OSError) as err:  # a loop (RuntimeError before Python 3.13)
            raise UnsafeArchiveError(
                f"symlink {name!r} cannot be resolved ({target}: {err})", "refusing to extract"
            ) from err
        if not resolved.is_relative_to(real_root):
            raise _refuse_link(name, target)


class _Budget:
    """Bytes actually produced so far, against the caps (headers can lie about sizes)."""

    def __init__(self, archive: Path, limits: ExtractLimits) -> None:
        self.archive = archive
        self.cap = min(limits.max_size, int(limits.max_ratio * max(1, archive.stat().st_size)))
        self.limits = limits
        self.written = 0

    def spend(self, n: int, info: zipfile.ZipInfo) -> None:
        self.written += n
        if self.written > self.cap:
            raise _refuse_bomb(
                self.archive,
                f"produced more than its limit while extracting {info.filename!r} "
                f"({human_size(self.written)}; limits {human_size(self.limits.max_size)}, "
                f"{self.limits.max_ratio:g}x)",
                "if you trust it, raise --max-extract-size / --max-extract-ratio",
            )


def _copy(src: Any, out: Any, info: zipfile.ZipInfo, budget: _Budget) -> None:
    produced = 0
    while block := src.read(1 << 20):
        produced += len(block)
        if produced > info.file_size:
            raise UnsafeArchiveError(
                f"archive member {info.filename!r} is larger than its header says",
                "the archive is malformed; refusing to extract",
            )
        budget.spend(len(block), info)
        out.write(block)


def _write_file(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, budget: _Budget) -> None:
    # O_NOFOLLOW: an earlier symlink member with the same name must not redirect the write.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(target, flags, 0o600)
    except OSError as err:
        raise UnsafeArchiveError(
            f"archive member {info.filename!r} cannot be written over an existing entry ({err})",
            "refusing to extract",
        ) from err
    with zf.open(info) as src, os.fdopen(fd, "wb") as out:
        _copy(src, out, info, budget)
    mode = (info.external_attr >> 16) & 0o777
    if mode:
        target.chmod(mode | 0o600)


def _corrupt(archive: Path, err: BaseException) -> FdlError:
    return FdlError(f"{archive} is corrupt ({err})", "delete it and download again")


def extract_zip(
    archive: Path | str,
    dest: Path | str,
    *,
    strip: str | None = None,
    limits: ExtractLimits | None = None,
    check: Callable[[Path], None] | None = None,
) -> Path:
    """Extract ``archive`` into ``dest`` atomically and return ``dest``.

    ``strip``: a single top-level directory to unwrap if the archive has one (``"libtorch"``).
    ``limits``: the caps on what it may unpack to (default :meth:`ExtractLimits.resolve`: the
    environment, else 32 GiB and 50x). ``check``: called with the extracted tree before it
    replaces ``dest``; raising refuses the archive and leaves ``dest`` as it was. On any refusal
    nothing is left behind (no staging directory, no partial tree), nor on Ctrl-C or SIGTERM
    (which is re-raised once the staging tree is gone). Staging trees that runs killed outright
    left next to ``dest`` are removed first (see :func:`remove_stale_staging`).
    """
    archive, dest = Path(archive), Path(dest)
    limits = limits or ExtractLimits.resolve()
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as err:
        raise FdlError(
            f"{archive} is not a valid zip archive ({err})", "delete it and download again"
        ) from err
    with zf:
        infos = zf.infolist()
        members = [(info, _member_path(info.filename)) for info in infos]
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise unwritable(dest.parent, err, "create") from err
        remove_stale_staging(dest.parent)
        _check_bounds(archive, sum(i.file_size for i in infos), limits, dest.parent)
        with _sigterm_unwinds():
            _extract(zf, archive, dest, members, strip, limits, check)
    return dest


def _extract(
    zf: zipfile.ZipFile,
    archive: Path,
    dest: Path,
    members: list[tuple[zipfile.ZipInfo, PurePosixPath]],
    strip: str | None,
    limits: ExtractLimits,
    check: Callable[[Path], None] | None,
) -> None:
    budget = _Budget(archive, limits)
    owner = _owner_tag()
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.extract-{owner}-", dir=dest.parent))
    except OSError as err:
        raise unwritable(dest.parent, err) from err
    old: Path | None = None
    try:
        links: list[tuple[Path, str, str]] = []
        for info, rel in members:
            if info.is_dir():
                _real_dir(staging, rel, info.filename)
                continue
            parent = _real_dir(staging, rel.parent, info.filename)
            target = parent / rel.name
            try:
                if _is_symlink(info):
                    if info.file_size > 4096:
                        raise UnsafeArchiveError(
                            f"symlink {info.filename!r} has a {info.file_size}-byte target",
                            "refusing to extract",
                        )
                    link = zf.read(info).decode("utf-8", "replace")
                    budget.spend(len(link), info)
                else:
                    _write_file(zf, info, target, budget)
                    continue
            except (zipfile.BadZipFile, zlib.error, EOFError) as err:
                raise _corrupt(archive, err) from err
            _check_link(rel, link, info.filename)
            if os.path.lexists(target):
                raise UnsafeArchiveError(
                    f"archive member {info.filename!r} appears twice",
                    "refusing to extract",
                )
            target.symlink_to(link)
            links.append((target, link, info.filename))
        root = staging
        if strip:
            inner = staging / strip
            entries = list(staging.iterdir())
            if inner.is_dir() and not inner.is_symlink() and len(entries) == 1:
                root = inner
        _check_links_resolve_inside(root, links)
        if check is not None:
            check(root)
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{owner}")
            dest.replace(old)
        try:
            root.replace(dest)
        except BaseException:
            if old is not None and not dest.exists():
                old.replace(dest)  # put the installed tree back
                old = None
            raise
    finally:
        # also after an interrupt: the next run could not tell this tree from a live one
        # before this process is gone
        for tree in (staging, old):
            if tree is not None:
                with contextlib.suppress(FileNotFoundError):
                    shutil.rmtree(tree)


def _pid_space() -> str:
    """This process's PID namespace (Linux): containers sharing a host name and a home see each
    other's process ids as dead."""
    try:
        return str(Path("/proc/self/ns/pid").stat().st_ino)
    except OSError:
        return ""


def _owner_tag() -> str:
    """``<machine>-<pid>``: whose staging tree this is. A shared home may be used by several
    hosts or containers, and only processes of the same host and PID namespace can tell whether
    the owner is alive; ``<machine>`` is a hash of both (a name cleaned of punctuation would
    make ``ip-10-0-1-23`` and ``ip-10-0-12-3`` one host)."""
    seen_from = f"{socket.gethostname()}\0{_pid_space()}".encode()
    return f"{hashlib.sha256(seen_from).hexdigest()[:16]}-{os.getpid()}"


_STAGING = re.compile(
    r"^\.(?P<name>.+)\.(?P<kind>extract|old)-(?:(?P<host>[A-Za-z0-9]+)-)?(?P<pid>\d+)"
    r"(?:-[A-Za-z0-9_]+)?$"
)
_LEGACY_STAGING = re.compile(r"^\.(?P<name>.+)\.extract-[a-z0-9_]{8}$")


@dataclass(frozen=True)
class StagingTree:
    """A staging (``.<name>.extract-…``) or replaced (``.<name>.old-…``) tree next to a target.

    ``owner_alive``: whether the run that made it still runs (``None``: cannot tell — another
    host's, or a name from before fdl tagged them with a process id)."""

    path: Path
    owner_alive: bool | None

    def size(self) -> int:
        """Bytes its files take (not following links)."""
        total = 0
        for root, dirs, files in os.walk(self.path):
            for name in files + dirs:
                with contextlib.suppress(OSError):
                    total += (Path(root) / name).lstat().st_size
        return total


def _alive(pid: int) -> bool:
    if os.name == "nt":  # no safe signal-0 probe there: assume it runs, never delete its tree
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def staging_trees(directory: Path | str) -> list[StagingTree]:
    """The staging and replaced trees that extractions left in ``directory``: those of live
    runs (in use), of runs that ended without cleaning up, and of unknown owners."""
    directory = Path(directory)
    host = _owner_tag().rsplit("-", 1)[0]
    found = []
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.is_dir() or entry.is_symlink():
            continue
        match = _STAGING.match(entry.name)
        if match:
            # no machine tag (an older fdl's ``.old-<pid>``): its host is unknown, so is its owner
            alive = _alive(int(match["pid"])) if match["host"] == host else None
            found.append(StagingTree(entry, alive))
        elif _LEGACY_STAGING.match(entry.name):
            found.append(StagingTree(entry, None))
    return found


def remove_stale_staging(directory: Path | str) -> list[Path]:
    """Delete the trees in ``directory`` whose run on this host has ended (killed mid-extraction,
    or mid-removal of the tree it replaced); returns them. Trees of live runs and of unknown
    owners are left alone."""
    removed = []
    for tree in staging_trees(directory):
        if tree.owner_alive is False:
            shutil.rmtree(tree.path, ignore_errors=True)
            removed.append(tree.path)
    return removed


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """While extracting, SIGTERM (``kill``, a CI timeout) unwinds like Ctrl-C, so the staging
    tree is removed; the process then dies of SIGTERM as it would have. A second SIGTERM kills at
    once. Only in the main thread, and only if nobody else handles SIGTERM."""
    if (
        threading.current_thread() is not threading.main_thread()
        or not hasattr(signal, "SIGTERM")
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    got: list[int] = []

    def unwind(signum: int, _frame: Any) -> None:
        got.append(signum)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    except KeyboardInterrupt:
        if got:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


INDEX_CAP = 64 << 20  # a central directory bigger than this is not worth fetching ahead


class _RemoteFile:
    """The few byte ranges of a remote file that ``zipfile`` reads to list its members (the end
    record and the central directory), fetched with HTTP ``Range`` requests."""

    def __init__(self, http: Any, url: str, size: int, timeout: float) -> None:
        self.http, self.url, self.size, self.timeout = http, url, size, timeout
        self.pos = 0
        self.fetched = 0
        self.blocks: list[tuple[int, bytes]] = []

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        if base + offset < 0:
            raise OSError("seek before the start")
        self.pos = base + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int | None = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        data = self._range(self.pos, end)
        self.pos += len(data)
        return data

    def _range(self, start: int, end: int) -> bytes:
        for first, data in self.blocks:
            if first <= start and end <= first + len(data):
                return data[start - first : end - first]
        first, last = start, end
        if not self.blocks:
            # the first read looks for the end record: fetch the whole tail a comment could
            # hide it in, and often the central directory with it
            first, last = min(start, max(0, self.size - (256 << 10))), self.size
        self.fetched += last - first
        if self.fetched > INDEX_CAP:
            raise OSError("the archive's index is too large to fetch ahead")
        headers = {"Range": f"bytes={first}-{last - 1}", "Accept-Encoding": "identity"}
        with self.http.get(self.url, headers=headers, stream=True, timeout=self.timeout) as resp:
            served = resp.headers.get("Content-Range", "")
            if resp.status_code != 206 or not served.startswith(f"bytes {first}-"):
                raise OSError(f"no byte ranges (HTTP {resp.status_code})")
            data = b""
            while len(data) < last - first:  # a server may send more than asked: stop reading
                block = resp.raw.read(last - first - len(data))
                if not block:
                    raise OSError("short range")
                data += block
        self.blocks.append((first, data))
        return data[start - first : end - first]


def remote_unpacked_size(url: str, *, timeout: float = 10.0, session: Any = None) -> int | None:
    """What the zip at ``url`` declares it unpacks to, read from its central directory with a
    few small ``Range`` requests, before downloading it; ``None`` when that cannot be known (no
    range support, an encoded body, not a zip, any error). Advisory: the extraction checks the
    real archive again."""
    import requests

    http = session or requests.Session()
    try:
        head = http.head(url, allow_redirects=True, timeout=timeout)
        length = head.headers.get("Content-Length", "")
        encoding = head.headers.get("Content-Encoding", "identity").strip().lower()
        if head.status_code != 200 or not length.isdigit() or encoding not in ("", "identity"):
            return None
        remote = _RemoteFile(http, head.url or url, int(length), timeout)
        with zipfile.ZipFile(remote) as zf:
            return sum(info.file_size for info in zf.infolist())
    except Exception:  # a guess that failed is no guess, never an error
        return None
