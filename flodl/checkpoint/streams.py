"""Where checkpoint bytes come from and go to: paths or binary file objects, plain or gzip.

Reads are bounded: a length read from the file is never trusted for an allocation larger than
the bytes that actually remain (known for files; for gzip and pipes the payload is read in
chunks, so memory only grows with data that really arrives). Writes to a path are atomic:
temp file in the same directory, flush, fsync, ``os.replace``, fsync of the directory. While a
large file is written, its pages are handed to the disk in the background (``fdatasync`` on a
helper thread every :data:`WRITEBACK_BYTES`), so the final fsync waits for the tail only instead
of the whole file: durability at little more than the cost of the writes.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import io
import mmap
import os
import secrets
import stat
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeGuard

import torch

from flodl.checkpoint.errors import CheckpointError
from flodl.files import destination

PathLike = str | os.PathLike[str]
Source = PathLike | BinaryIO
Destination = PathLike | BinaryIO

GZIP_MAGIC = b"\x1f\x8b"
CHUNK_BYTES = 16 * 1024 * 1024
SLICE_BYTES = 1024 * 1024  # hash granularity: small enough to stay in cache
WRITEBACK_BYTES = 32 * 1024 * 1024  # start writing back to disk after this many new bytes
_GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def is_path(obj: object) -> TypeGuard[str | os.PathLike[str]]:
    return isinstance(obj, str | os.PathLike)


def describe(obj: object) -> str:
    if is_path(obj):
        return os.fspath(obj)
    name = getattr(obj, "name", None)
    return name if isinstance(name, str) else "<stream>"


class _Prefixed(io.RawIOBase):
    """A non-seekable stream with bytes already read (the sniffed magic) put back in front."""

    def __init__(self, prefix: bytes, rest: BinaryIO):
        self._prefix = prefix
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        if self._prefix:
            n = min(len(view), len(self._prefix))
            view[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        data = self._rest.read(len(view))
        view[: len(data)] = data
        return len(data)


class _Discard:
    def update(self, _data: object) -> None:
        pass


class Reader:
    """Sequential, bounds-checked reading with the logical offset kept for error messages."""

    def __init__(self, stream: BinaryIO, *, name: str, size: int | None, gzipped: bool):
        self.name = name
        self.size = size  # logical size when known (plain files and seekable objects)
        self.gzipped = gzipped
        self.pos = 0
        self._f = stream
        self._scratch: torch.Tensor | None = None

    def error(self, message: str, offset: int | None = None) -> CheckpointError:
        return CheckpointError(
            message, source=self.name, offset=self.pos if offset is None else offset
        )

    def remaining(self) -> int | None:
        return None if self.size is None else self.size - self.pos

    def _readinto(self, view: memoryview) -> int:
        total = 0
        try:
            while total < len(view):
                n = self._f.readinto(view[total:])  # type: ignore[attr-defined]
                if not n:
                    break
                total += n
        except _GZIP_ERRORS as exc:
            raise self.error(
                f"corrupt gzip stream ({exc}) — the compressed file is damaged or truncated",
                self.pos + total,
            ) from exc
        except OSError as exc:
            raise self.error(f"io: {exc}", self.pos + total) from exc
        return total

    def read_upto(self, n: int) -> bytes:
        """Up to ``n`` bytes; fewer only at the end of the data."""
        buf = bytearray(n)
        got = self._readinto(memoryview(buf))
        self.pos += got
        return bytes(buf[:got])

    def read_exact(self, n: int, what: str) -> bytes:
        start = self.pos
        data = self.read_upto(n)
        if len(data) != n:
            raise self.error(
                f"truncated file: needed {n} bytes for {what}, only {len(data)} left "
                "— the file was cut short (an interrupted copy or download?)",
                start,
            )
        return data

    def check_available(self, n: int, what: str) -> None:
        left = self.remaining()
        if left is not None and n > left:
            raise self.error(
                f"{what} declares {n} bytes but only {left} remain "
                "— the file is truncated or corrupted"
            )

    def read_payload(self, n: int, what: str, hasher: Any) -> torch.Tensor:
        """``n`` bytes as a uint8 tensor, never allocating more than the data that exists.

        Each slice is fed to ``hasher.update`` right after it is read, while it is in cache.
        """
        self.check_available(n, what)
        start = self.pos
        if self.size is not None or n <= CHUNK_BYTES:
            out = torch.empty(n, dtype=torch.uint8)
            self._fill(out.numpy().data, hasher, n, what, start)
            return out
        chunks = []
        while self.pos - start < n:
            chunk = torch.empty(min(n - (self.pos - start), CHUNK_BYTES), dtype=torch.uint8)
            self._fill(chunk.numpy().data, hasher, n, what, start)
            chunks.append(chunk)
        return torch.cat(chunks)

    def _fill(self, view: memoryview, hasher: Any, n: int, what: str, start: int) -> None:
        for offset in range(0, len(view), SLICE_BYTES):
            part = view[offset : offset + SLICE_BYTES]
            got = self._readinto(part)
            self.pos += got
            if got != len(part):
                raise self._short(n, self.pos - start, what, start)
            hasher.update(part)

    def seek_past(self, n: int, what: str) -> None:
        """Skip ``n`` bytes unread when the size is known (plain files); else read them."""
        self.check_available(n, what)
        if self.size is None:
            self.skip_payload(n, what, _Discard())
            return
        try:
            self._f.seek(n, io.SEEK_CUR)
        except OSError as exc:
            raise self.error(f"io: {exc}") from exc
        self.pos += n

    def skip_payload(self, n: int, what: str, hasher: Any) -> None:
        """Consume ``n`` bytes without keeping them, feeding them to ``hasher.update``."""
        self.check_available(n, what)
        start = self.pos
        if self._scratch is None:
            self._scratch = torch.empty(min(max(n, 1), CHUNK_BYTES), dtype=torch.uint8)
        view = self._scratch.numpy().data
        left = n
        while left:
            part = view[: min(left, len(view))]
            got = self._readinto(part)
            self.pos += got
            hasher.update(part[:got])
            if got != len(part):
                raise self._short(n, n - left + got, what, start)
            left -= got

    def _short(self, n: int, got: int, what: str, start: int) -> CheckpointError:
        return self.error(
            f"truncated file: {what} needs {n} bytes, only {got} left "
            "— the file was cut short (an interrupted copy or download?)",
            start,
        )


class MappedReader(Reader):
    """A :class:`Reader` over a memory-mapped plain file: payloads are views, not copies.

    The mapping is private and copy-on-write, so a tensor viewing it can be written without
    touching the file; the pages come from the page cache as they are first read (by the
    checksum, then by the copy into the model), with no read() copies and no staging buffers.
    """

    def __init__(self, mapped: mmap.mmap, *, name: str):
        super().__init__(io.BytesIO(), name=name, size=len(mapped), gzipped=False)
        self._map = mapped
        self._view = memoryview(mapped)

    def read_upto(self, n: int) -> bytes:
        data = self._view[self.pos : self.pos + n].tobytes()
        self.pos += len(data)
        return data

    def read_payload(self, n: int, what: str, hasher: Any) -> torch.Tensor:
        self.check_available(n, what)
        hasher.update(self._view[self.pos : self.pos + n])
        if n:
            out = torch.frombuffer(self._map, dtype=torch.uint8, count=n, offset=self.pos)
        else:
            out = torch.empty(0, dtype=torch.uint8)
        self.pos += n
        return out

    def skip_payload(self, n: int, what: str, hasher: Any) -> None:
        self.check_available(n, what)
        hasher.update(self._view[self.pos : self.pos + n])
        self.pos += n

    def seek_past(self, n: int, what: str) -> None:
        self.check_available(n, what)
        self.pos += n

    def release(self) -> None:
        """Drop this reader's own reference (tensors viewing the map keep it alive)."""
        self._view.release()


def _mapped(f: BinaryIO, size: int | None) -> mmap.mmap | None:
    """A private read-write (copy-on-write) map of the whole file, or None when impossible."""
    if not size or not hasattr(mmap, "MAP_PRIVATE"):
        return None
    try:
        return mmap.mmap(
            f.fileno(), size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE
        )
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def open_source(src: Source, *, mapped: bool = False) -> Iterator[Reader]:
    """A :class:`Reader` over ``src``; gzip is detected from the content (and implied by ``.gz``).

    ``mapped=True`` memory-maps a plain (not gzip) file given by path: payloads come back as
    views of the map (see :class:`MappedReader`); other sources are read as usual.
    """
    name = describe(src)
    with contextlib.ExitStack() as stack:
        if is_path(src):
            try:
                f: BinaryIO = stack.enter_context(open(src, "rb"))
            except OSError as exc:
                raise CheckpointError(
                    f"cannot open checkpoint: {exc.strerror or exc}", source=name
                ) from exc
            try:
                size: int | None = os.fstat(f.fileno()).st_size
            except OSError:
                size = None
            head = f.peek(2)[:2]  # type: ignore[attr-defined]
        elif hasattr(src, "read"):
            f = src  # type: ignore[assignment]
            size = None
            seekable = getattr(f, "seekable", lambda: False)()
            if seekable:
                start = f.tell()
                size = f.seek(0, io.SEEK_END) - start
                f.seek(start)
                head = f.read(2)
                f.seek(start)
            else:
                head = f.read(2)
                f = io.BufferedReader(_Prefixed(head, f))
        else:
            raise CheckpointError(
                f"cannot read a checkpoint from {type(src).__name__} "
                "— pass a path or a binary file object opened with 'rb'"
            )
        gzipped = head == GZIP_MAGIC
        if gzipped:
            f = stack.enter_context(gzip.GzipFile(fileobj=f, mode="rb"))  # type: ignore[assignment]
            size = None
        elif mapped and is_path(src) and (region := _mapped(f, size)) is not None:
            reader = MappedReader(region, name=name)
            try:
                yield reader
            finally:
                reader.release()
            return
        yield Reader(f, name=name, size=size, gzipped=gzipped)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms/filesystems cannot open directories; the rename is done
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _Writeback:
    """A file being written whose pages go to the disk while it grows (one sync at a time).

    Only :meth:`write` is offered: the checkpoint writers need nothing else. :meth:`wait` waits
    for the sync in flight; :meth:`drain` also re-raises its error, if any.
    """

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._since = 0
        self._thread: threading.Thread | None = None
        self._error: OSError | None = None

    def write(self, data: Any) -> int:
        n = self._raw.write(data)
        self._since += n
        if self._since >= WRITEBACK_BYTES and (self._thread is None or not self._thread.is_alive()):
            self._raw.flush()  # what Python still buffers reaches the kernel first
            self._since = 0
            self._thread = threading.Thread(target=self._sync, name="flodl-writeback", daemon=True)
            self._thread.start()
        return n

    def _sync(self) -> None:
        try:
            os.fdatasync(self._raw.fileno())
        except OSError as exc:
            self._error = exc

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def drain(self) -> None:
        self.wait()
        if self._error is not None:
            raise self._error


_CHECK_DIRECTORY = "— check that the directory exists and is writable"
_UNTOUCHED = "(the previous file, if any, is untouched)"


def _refuse_directory(path: Path) -> None:
    if not path.name or path.is_dir():  # "." has no name for a temporary file beside it
        raise CheckpointError(
            f"cannot write checkpoint: {os.strerror(errno.EISDIR)} {_UNTOUCHED}", source=str(path)
        )


def refuse_unwritable(path: Path) -> None:
    """Raise now the error a write to ``path`` would end in for sure (it is a directory, or its
    directory does not exist), as :func:`open_destination` raises it: for a write that happens
    later, elsewhere (a background save)."""
    _refuse_directory(path)
    if not path.parent.is_dir():
        raise CheckpointError(
            f"cannot write checkpoint: {os.strerror(errno.ENOENT)} {_CHECK_DIRECTORY}",
            source=str(path),
        )


def _gzip_writer(raw: BinaryIO) -> gzip.GzipFile:
    """A reproducible gzip stream over ``raw`` (no name, no timestamp)."""
    return gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0, filename="")


def _write_in_place(path: Path, gz: bool) -> Iterator[BinaryIO]:
    """Write into an existing FIFO, device or /dev/stdout (not whole-or-nothing: there is no
    file to swap)."""
    try:
        raw = open(path, "ab")  # noqa: SIM115 (appended, as >> would: a log behind it stays)
    except OSError as exc:
        raise CheckpointError(
            f"cannot write checkpoint: {exc.strerror or exc}", source=str(path)
        ) from exc
    try:
        with raw:
            if gz:
                with _gzip_writer(raw) as z:
                    yield z  # type: ignore[misc]
            else:
                yield raw
    except OSError as exc:
        raise CheckpointError(
            f"cannot write checkpoint: {exc.strerror or exc}", source=str(path)
        ) from exc


@contextlib.contextmanager
def open_destination(
    dest: Destination, *, compress: bool | None = None, fsync: bool = True
) -> Iterator[BinaryIO]:
    """A writable binary stream; for a path the final file appears atomically on success.

    ``compress=None`` means gzip when the path ends in ``.gz`` (never for file objects).
    """
    if is_path(dest):
        path = Path(dest)
        _refuse_directory(path)
        gz = path.name.endswith(".gz") if compress is None else compress
        # What is replaced is the file itself: through a symlink (latest.fdl -> runs/7/m.fdl)
        # the file it points to, beside it; the link stays, the file keeps its mode. A FIFO, a
        # device or /dev/stdout is written into (renaming over it would replace the node).
        try:
            found = destination(path)
        except OSError as exc:
            raise CheckpointError(
                f"cannot write checkpoint: {exc.strerror or exc}", source=str(path)
            ) from exc
        if found is None:
            yield from _write_in_place(path, gz)
            return
        real, mode = found
        tmp = real.with_name(f".{real.name}.{secrets.token_hex(4)}.tmp")
        try:
            # owner-only until complete when it replaces a file (whose mode it then takes)
            perms = 0o600 if mode is not None else 0o666
            raw = open(tmp, "xb", opener=lambda p, flags: os.open(p, flags, perms))  # noqa: SIM115
        except OSError as exc:
            raise CheckpointError(
                f"cannot write checkpoint: {exc.strerror or exc} {_CHECK_DIRECTORY}",
                source=str(path),
            ) from exc
        try:
            with raw:
                if gz:
                    with _gzip_writer(raw) as z:
                        yield z  # type: ignore[misc]
                elif fsync and hasattr(os, "fdatasync"):
                    writeback = _Writeback(raw)
                    try:
                        yield writeback  # type: ignore[misc]
                    except BaseException:
                        writeback.wait()  # never leave a sync running on a closing file
                        raise
                    writeback.drain()
                else:
                    yield raw
                raw.flush()
                if fsync:
                    os.fsync(raw.fileno())
            if mode is not None:
                tmp.chmod(stat.S_IMODE(mode))
            tmp.replace(real)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            if isinstance(exc, OSError):
                raise CheckpointError(
                    f"cannot write checkpoint: {exc.strerror or exc} {_UNTOUCHED}",
                    source=str(path),
                ) from exc
            raise
        if fsync:
            _fsync_dir(real.parent)
    elif hasattr(dest, "write"):
        if compress:
            with _gzip_writer(dest) as z:  # type: ignore[arg-type]
                yield z  # type: ignore[misc]
        else:
            yield dest  # type: ignore[misc]
        with contextlib.suppress(AttributeError, OSError):
            dest.flush()  # type: ignore[union-attr]
    else:
        raise CheckpointError(
            f"cannot write a checkpoint to {type(dest).__name__} "
            "— pass a path or a binary file object opened with 'wb'"
        )
