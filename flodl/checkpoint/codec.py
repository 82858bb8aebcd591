"""Encoding and decoding of ``.fdl`` streams (see format.py for the layout).

The decoder validates every length against sane limits and the bytes that remain *before*
allocating, rejects payloads whose size disagrees with shape × dtype, duplicate or non-UTF-8
names and unknown dtype tags, and verifies the integrity trailer when the file has one.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import torch
import xxhash

from flodl.checkpoint import format as fmt
from flodl.checkpoint.errors import CheckpointError
from flodl.checkpoint.streams import SLICE_BYTES, Reader

NamedTensors = Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]


@dataclass(frozen=True)
class EntryInfo:
    """One entry of a checkpoint as described by its header (no payload)."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    offset: int  # where the entry starts in the (decompressed) file
    nbytes: int  # payload bytes


@dataclass(frozen=True)
class Header:
    version: int
    hash: bytes
    count: int

    @property
    def structural_hash(self) -> str | None:
        """Lower-case hex of the stored hash, or None when the file carries none (all zeros)."""
        return None if self.hash == fmt.ZERO_HASH else self.hash.hex()


@dataclass
class Decoded:
    header: Header
    entries: list[EntryInfo]
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    checksummed: bool = False  # True when a trailer was present and verified
    trailer: bool = False  # True when a trailer was present (verified or not)


def named_list(named: NamedTensors | None, what: str) -> list[tuple[str, torch.Tensor]]:
    """Normalise a dict or an iterable of ``(name, tensor)`` pairs, checking names are unique."""
    if named is None:
        return []
    items = list(named.items()) if isinstance(named, Mapping) else list(named)
    seen: set[str] = set()
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise CheckpointError(
                f"{what} must be a dict or (name, tensor) pairs, got an item {type(item).__name__}"
            )
        name, tensor = item
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise CheckpointError(
                f"{what}: expected (str, Tensor) pairs, got ({type(name).__name__}, {type(tensor).__name__})"
            )
        if name in seen:
            raise CheckpointError(
                f"{what}: duplicate name {name!r} — every entry needs a unique name"
            )
        seen.add(name)
    return items


# ---------------------------------------------------------------------------------- checksums


def xxh3(data: bytes) -> int:
    return xxhash.xxh3_64_intdigest(data)


# ---------------------------------------------------------------------------------- decoding


def decode(
    reader: Reader,
    *,
    keep: Callable[[EntryInfo], bool] | None = None,
    on_header: Callable[[Header], None] | None = None,
    payloads: bool = True,
    verify: bool = True,
) -> Decoded:
    """Parse a whole checkpoint from ``reader``.

    ``keep`` selects the entries whose tensors are materialised (default: all); the others are
    still read and checksummed but not kept. ``on_header`` runs before any entry is read (the
    architecture-hash check lives there so a mismatch fails fast). With ``payloads=False`` only
    headers are parsed and payloads skipped without checksum verification (for listing keys).
    ``verify=False`` parses and bounds-checks everything, the trailer's own digests included,
    but does not hash the payloads, so it cannot notice a flipped bit inside tensor data.
    """
    header = _decode_header(reader)
    if on_header is not None:
        on_header(header)
    out = Decoded(header, [])
    digests: list[int] = []
    _decode_entries(reader, header, out, digests, keep, payloads, verify)
    if payloads:
        out.trailer = _verify_trailer(reader, header, out.entries, digests if verify else None)
        out.checksummed = out.trailer and verify
    return out


def _decode_entries(
    reader: Reader,
    header: Header,
    out: Decoded,
    digests: list[int],
    keep: Callable[[EntryInfo], bool] | None,
    payloads: bool,
    verify: bool = True,
) -> None:
    seen: set[str] = set()
    for index in range(header.count):
        info, hasher = _decode_entry_header(reader, index)
        if not verify:
            hasher = _Unhashed()
        if info.name in seen:
            raise reader.error(
                f"duplicate entry name {info.name!r} (entry {index}) — the file is corrupted "
                "or was not written by flodl",
                info.offset,
            )
        seen.add(info.name)
        out.entries.append(info)
        what = f"entry {index} {info.name!r}"
        if payloads and (keep is None or keep(info)):
            raw = reader.read_payload(info.nbytes, what, hasher)
            out.tensors[info.name] = _to_tensor(reader, raw, info)
        elif payloads:
            reader.skip_payload(info.nbytes, what, hasher)
        else:
            reader.seek_past(info.nbytes, what)
        digests.append(hasher.intdigest())


def _decode_header(reader: Reader) -> Header:
    data = reader.read_upto(fmt.HEADER.size)
    if not data:
        raise reader.error("empty file — this is not a .fdl checkpoint", 0)
    if data[:4] != fmt.MAGIC:
        raise reader.error(
            f"invalid checkpoint: bad magic {data[:4]!r} (expected .fdl checkpoint, b'FDLC')", 0
        )
    if len(data) < fmt.HEADER.size:
        raise reader.error(
            f"truncated header: {len(data)} of {fmt.HEADER.size} bytes — the file was cut short", 0
        )
    _, version, digest, count = fmt.HEADER.unpack(data)
    if version not in fmt.SUPPORTED_VERSIONS:
        raise reader.error(
            f"unsupported checkpoint version {version} (this build supports 1..=2)"
            " — was it written by a newer flodl?",
            4,
        )
    left = reader.remaining()
    if left is not None and count * fmt.MIN_ENTRY_BYTES > left:
        raise reader.error(
            f"header declares {count} entries but only {left} bytes follow "
            "— the file is truncated or corrupted",
            40,
        )
    return Header(version, digest, count)


def _decode_entry_header(reader: Reader, index: int) -> tuple[EntryInfo, Any]:
    start = reader.pos
    raw_len = reader.read_exact(4, f"the name length of entry {index}")
    (name_len,) = fmt.U32.unpack(raw_len)
    if name_len > fmt.MAX_NAME_BYTES:
        raise reader.error(
            f"entry {index}: name length {name_len} exceeds the {fmt.MAX_NAME_BYTES}-byte limit "
            "— the file is corrupted",
            start,
        )
    reader.check_available(name_len, f"the name of entry {index}")
    raw_name = reader.read_exact(name_len, f"the name of entry {index}")
    try:
        name = raw_name.decode("utf-8")
    except UnicodeDecodeError:
        raise reader.error(
            f"entry {index}: name is not valid UTF-8 ({raw_name[:40]!r}) — the file is corrupted",
            start + 4,
        ) from None
    what = f"entry {index} {name!r}"
    raw_ndim = reader.read_exact(4, f"the rank of {what}")
    (ndim,) = fmt.U32.unpack(raw_ndim)
    if ndim > fmt.MAX_NDIM:
        raise reader.error(
            f"{what}: {ndim} dimensions exceeds the limit of {fmt.MAX_NDIM} — the file is corrupted",
            reader.pos - 4,
        )
    shape_at = reader.pos
    raw_dims = reader.read_exact(8 * ndim, f"the shape of {what}")
    dims = struct.unpack(f"<{ndim}q", raw_dims)
    _check_shape(reader, dims, what, shape_at)
    raw_tail = reader.read_exact(fmt.DTYPE_AND_BYTES.size, f"the dtype and size of {what}")
    tag, nbytes = fmt.DTYPE_AND_BYTES.unpack(raw_tail)
    if tag not in fmt.DTYPE_TAGS:
        raise reader.error(
            f"unknown dtype tag: {tag} in {what} — the file is corrupted or from a newer flodl",
            reader.pos - fmt.DTYPE_AND_BYTES.size,
        )
    expected = math.prod(dims) * fmt.ELEMENT_SIZE[tag]
    left = reader.remaining()
    if left is not None and expected > left:
        raise reader.error(
            f"{what}: shape {fmt.shape_str(dims)} of {fmt.dtype_name(fmt.DTYPE_TAGS[tag])} needs "
            f"{expected} bytes but only {left} remain — the file is truncated or corrupted",
            shape_at,
        )
    if nbytes != expected:
        raise reader.error(
            f"{what}: payload is {nbytes} bytes but shape {fmt.shape_str(dims)} of "
            f"{fmt.dtype_name(fmt.DTYPE_TAGS[tag])} needs {expected} — the file is corrupted",
            reader.pos - 8,
        )
    hasher = xxhash.xxh3_64(raw_len + raw_name + raw_ndim + raw_dims + raw_tail)
    return EntryInfo(name, tuple(dims), fmt.DTYPE_TAGS[tag], start, nbytes), hasher


def _check_shape(reader: Reader, dims: tuple[int, ...], what: str, offset: int) -> None:
    """Refuse shapes torch cannot represent, before anything is built from them.

    An empty tensor may legitimately have large non-zero dimensions (it holds no bytes, so the
    remaining-bytes bound does not apply to it), but their product must still fit in int64.
    """
    if any(d < 0 for d in dims):
        raise reader.error(
            f"{what}: negative dimension in shape {fmt.shape_str(dims)} — the file is corrupted",
            offset,
        )
    if math.prod(d for d in dims if d) > fmt.MAX_NUMEL:
        raise reader.error(
            f"{what}: shape {fmt.shape_str(dims)} has more elements than a tensor can hold "
            "(the product of its dimensions overflows int64) — the file is corrupted",
            offset,
        )


def _to_tensor(reader: Reader, raw: torch.Tensor, info: EntryInfo) -> torch.Tensor:
    if info.dtype == torch.bool and raw.numel() and bool((raw > 1).any()):
        raise reader.error(
            f"entry {info.name!r}: bool tensor holds bytes other than 0 and 1 — the file is corrupted",
            info.offset,
        )
    return raw.view(info.dtype).reshape(info.shape)


class _Unhashed:
    """Stands in for an entry's hasher under ``verify=False``."""

    def update(self, _data: object) -> None:
        pass

    def intdigest(self) -> int:
        return 0


def _verify_trailer(
    reader: Reader, header: Header, entries: list[EntryInfo], digests: list[int] | None
) -> bool:
    body_len = reader.pos
    magic = reader.read_upto(4)
    if not magic:
        return False  # no trailer (checksum=False, or a Rust flodl file): nothing to verify
    if magic != fmt.TRAILER_MAGIC:
        raise reader.error(
            f"unexpected data after the last of {header.count} entries "
            "— the entry count or the file is corrupted",
            body_len,
        )
    head = magic + reader.read_exact(fmt.TRAILER_HEAD.size - 4, "the integrity trailer")
    _, version, count, header_digest = fmt.TRAILER_HEAD.unpack(head)
    if version != fmt.TRAILER_VERSION:
        raise reader.error(
            f"unsupported integrity trailer version {version} — was it written by a newer flodl?",
            body_len,
        )
    if count != header.count:
        raise reader.error(
            f"integrity trailer lists {count} entries, header says {header.count} "
            "— the file is corrupted",
            body_len,
        )
    table = reader.read_exact(fmt.DIGEST_BYTES * count, "the integrity trailer checksums")
    tail = reader.read_exact(fmt.TRAILER_TAIL.size, "the integrity trailer")
    stored_body_len, trailer_digest = fmt.TRAILER_TAIL.unpack(tail)
    if xxh3(head + table + tail[:8]) != trailer_digest or stored_body_len != body_len:
        raise reader.error(
            "integrity trailer is corrupted — restore the file from a good copy", body_len
        )
    if reader.read_upto(1):
        raise reader.error(
            "unexpected data after the integrity trailer — the file is corrupted", reader.pos - 1
        )
    header_bytes = fmt.HEADER.pack(fmt.MAGIC, header.version, header.hash, header.count)
    if xxh3(header_bytes) != header_digest:
        raise reader.error("checksum mismatch in the header — the file is corrupted", 0)
    if digests is None:  # verify=False: the structure is checked, the payloads are not
        return True
    stored = struct.unpack(f"<{count}Q", table)
    for info, actual, expected in zip(entries, digests, stored, strict=True):
        if actual != expected:
            raise reader.error(
                f"checksum mismatch in entry {info.name!r} — the file is corrupted "
                "(bit flip, bad disk or bad transfer); restore it from a good copy",
                info.offset,
            )
    return True


# ---------------------------------------------------------------------------------- encoding


@dataclass(frozen=True)
class Prepared:
    name: bytes
    tensor: torch.Tensor  # CPU, contiguous, detached
    tag: int


def prepare(named: list[tuple[str, torch.Tensor]]) -> list[Prepared]:
    """Validate and bring every tensor to CPU before a single byte is written."""
    out = []
    for name, tensor in named:
        raw_name = name.encode("utf-8")
        if len(raw_name) > fmt.MAX_NAME_BYTES:
            raise CheckpointError(
                f"entry name {name[:40]!r}… is longer than {fmt.MAX_NAME_BYTES} bytes"
            )
        tag = fmt.TAG_OF_DTYPE.get(tensor.dtype)
        if tag is None:
            supported = ", ".join(fmt.dtype_name(d) for d in fmt.TAG_OF_DTYPE)
            raise CheckpointError(
                f"cannot save {name!r}: dtype {fmt.dtype_name(tensor.dtype)} is not supported "
                f"by the .fdl format ({supported}) — cast it first"
            )
        if tensor.layout != torch.strided or tensor.is_meta:
            raise CheckpointError(
                f"cannot save {name!r}: only dense tensors with data can be saved "
                f"(got layout {tensor.layout}{', meta device' if tensor.is_meta else ''})"
            )
        out.append(Prepared(raw_name, tensor.detach().cpu().contiguous(), tag))
    return out


def _bytes_view(tensor: torch.Tensor) -> memoryview:
    return tensor.reshape(-1).view(torch.uint8).numpy().data


def encode(f: BinaryIO, entries: list[Prepared], structural_hash: bytes, *, checksum: bool) -> None:
    header = fmt.HEADER.pack(fmt.MAGIC, fmt.WRITE_VERSION, structural_hash, len(entries))
    f.write(header)
    digests: list[int] = []
    body_len = _encode_entries(f, entries, digests if checksum else None) + len(header)
    if checksum:
        trailer = (
            fmt.TRAILER_HEAD.pack(
                fmt.TRAILER_MAGIC, fmt.TRAILER_VERSION, len(entries), xxh3(header)
            )
            + struct.pack(f"<{len(digests)}Q", *digests)
            + fmt.U64.pack(body_len)
        )
        f.write(trailer + fmt.U64.pack(xxh3(trailer)))


def _encode_entries(f: BinaryIO, entries: list[Prepared], digests: list[int] | None) -> int:
    body_len = 0
    for entry in entries:
        shape = entry.tensor.shape
        payload = _bytes_view(entry.tensor)
        head = b"".join(
            (
                fmt.U32.pack(len(entry.name)),
                entry.name,
                fmt.U32.pack(len(shape)),
                struct.pack(f"<{len(shape)}q", *shape),
                fmt.DTYPE_AND_BYTES.pack(entry.tag, len(payload)),
            )
        )
        f.write(head)
        if digests is None:
            if len(payload):
                f.write(payload)
        else:
            # Hash and write slice by slice: each slice is hashed while it is still in cache.
            hasher = xxhash.xxh3_64(head)
            for start in range(0, len(payload), SLICE_BYTES):
                part = payload[start : start + SLICE_BYTES]
                hasher.update(part)
                f.write(part)
            digests.append(hasher.intdigest())
        body_len += len(head) + len(payload)
    return body_len
