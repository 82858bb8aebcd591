"""Module-level checkpoint API on named tensors: save, load (partial, validated, all-or-nothing), inspect."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch

from flodl.checkpoint import codec, listeners
from flodl.checkpoint import format as fmt
from flodl.checkpoint.codec import EntryInfo, Header, NamedTensors
from flodl.checkpoint.errors import CheckpointError, CheckpointWarning, HashRefusedError
from flodl.checkpoint.explain import explain_names, other_kind_of_file
from flodl.checkpoint.streams import (
    Destination,
    Source,
    describe,
    is_path,
    open_destination,
    open_source,
)
from flodl.errors import _renamed
from flodl.log import get_logger

# ``Mismatched`` was this module's name for HashRefusedError; it still resolves, with a warning.
__getattr__ = _renamed(__name__, {"Mismatched": HashRefusedError})

log = get_logger("flodl.checkpoint")

HASH_OPT_OUT = "pass structural_hash=None to load the matching entries anyway"
VERIFIED = "checksums verified"
UNVERIFIED = "not verified: no integrity trailer"
SKIPPED = "not verified: checksums skipped (verify=False)"
NO_MATCH_OPT_OUT = "pass allow_no_match=True to accept a load that changes nothing"


@dataclass(frozen=True)
class Mismatch:
    """An entry present in both the file and the model whose shape or dtype differs.

    Shape mismatches are never loaded (and are an error unless ``strict_shapes=False``);
    dtype mismatches are loaded with a cast to the model's dtype and reported here too.
    """

    name: str
    kind: Literal["shape", "dtype"]
    checkpoint: str
    model: str

    def __str__(self) -> str:
        return f"{self.name}: {self.kind} checkpoint={self.checkpoint} model={self.model}"


@dataclass
class LoadReport:
    """What a load did: ``loaded`` (model order), ``skipped`` (file entries the model lacks, file
    order), ``missing`` (model entries absent from the file; they keep their values) and
    ``mismatches`` (see :class:`Mismatch`). ``verified`` is True when the file carried an
    integrity trailer and every checksum matched; when False (a file from the Rust original, one
    written with ``checksum=False`` or ``rust_compatible=True``, or one cut exactly where its
    trailer began) the repr and ``str`` say ``not verified: no integrity trailer``, and
    ``require_verified=True`` on any load refuses such a file."""

    loaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    version: int = fmt.WRITE_VERSION
    verified: bool = False
    checks_skipped: bool = False  # the file has checksums, but verify=False skipped them

    @property
    def complete(self) -> bool:
        """Every model entry was loaded and every file entry was used."""
        return not (self.skipped or self.missing) and all(
            m.kind == "dtype" for m in self.mismatches
        )

    @property
    def integrity(self) -> str:
        """``"checksums verified"``, ``"not verified: no integrity trailer"``, or
        ``"not verified: checksums skipped (verify=False)"``."""
        if self.verified:
            return VERIFIED
        return SKIPPED if self.checks_skipped else UNVERIFIED

    def __repr__(self) -> str:
        return (
            f"LoadReport(loaded={self.loaded!r}, skipped={self.skipped!r}, "
            f"missing={self.missing!r}, mismatches={self.mismatches!r}, version={self.version}, "
            f"verified={self.verified}, integrity={self.integrity!r})"
        )

    def __str__(self) -> str:
        lines = [
            f"loaded {len(self.loaded)}, skipped {len(self.skipped)}, missing {len(self.missing)}, "
            f"mismatched {len(self.mismatches)} (v{self.version}, {self.integrity})"
        ]
        for label, items in (("skipped", self.skipped), ("missing", self.missing)):
            if items:
                lines.append(f"  {label}: {', '.join(items)}")
        lines.extend(f"  mismatch {m}" for m in self.mismatches)
        return "\n".join(lines)


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint's header and entry table, with every checksum verified when present."""

    version: int
    structural_hash: str | None
    entries: list[EntryInfo]
    verified: bool

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    @property
    def integrity(self) -> str:
        """``"checksums verified"`` or ``"not verified: no integrity trailer"``."""
        return VERIFIED if self.verified else UNVERIFIED


def check_verified(decoded: codec.Decoded, source: str) -> None:
    """Refuse a file without an integrity trailer (``require_verified=True``)."""
    if not decoded.checksummed:
        raise CheckpointError(
            f"{UNVERIFIED} — the file carries no checksums (written by the Rust original, with "
            "checksum=False or rust_compatible=True, or cut exactly where its trailer began), "
            "so corruption cannot be ruled out; nothing was loaded. Pass require_verified=False "
            "to load it unverified",
            source=source,
        )


def _all_named(
    named_params: NamedTensors | None, named_buffers: NamedTensors | None
) -> tuple[list[tuple[str, torch.Tensor]], list[tuple[str, torch.Tensor]]]:
    params = codec.named_list(named_params, "named_params")
    buffers = codec.named_list(named_buffers, "named_buffers")
    return params, buffers


def _check_arguments(verb: str, file: object, named_params: object) -> None:
    """``fl.save_checkpoint(model, path)`` (``torch.save``'s order), a model passed for its
    tensors, or a path after the tensors: say how to call it instead of failing on the first
    item of what was passed."""
    name = "dest" if verb == "save" else "src"
    usage = (
        f"fl.{verb}_checkpoint({name}, named_params, named_buffers) takes a path (or binary "
        "file) first, then named tensors"
    )
    way = (
        f"For a model: model.{verb}_checkpoint(path) on an fl.Graph, or fl.{verb}_checkpoint("
        "path, model.named_parameters(), model.named_buffers())"
    )
    for value, where in ((file, f"as {name}"), (named_params, "for named_params")):
        if isinstance(value, torch.nn.Module):
            raise CheckpointError(f"{usage}; got a {type(value).__name__} {where}. {way}")
    if isinstance(named_params, str | bytes | os.PathLike):
        raise CheckpointError(f"{usage}; got the path {named_params!r} for named_params. {way}")


def save_checkpoint(
    dest: Destination,
    named_params: NamedTensors,
    named_buffers: NamedTensors | None = None,
    structural_hash: str | bytes | None = None,
    *,
    checksum: bool | None = None,
    compress: bool | None = None,
    fsync: bool = True,
    rust_compatible: bool = False,
    background: bool = False,
) -> None:
    """Write named tensors to ``dest`` (a path or a binary file object) in the ``.fdl`` format.

    Parameters come first, then buffers, each in the order given. A path is written atomically
    (a crash mid-save leaves the previous file intact) and gzip-compressed when it ends in
    ``.gz`` (``compress`` overrides; ``compress=True`` on a name without ``.gz`` warns, since the
    Rust original picks gzip by extension and would read such a file as bad magic).
    ``checksum=False`` leaves out flodl's integrity trailer. ``fsync=False`` skips the flushes to
    disk: the write stays atomic against a crashed or killed process, but not against power loss.

    ``rust_compatible=True`` writes exactly the bytes the Rust original writes (version 2, no
    trailer) and refuses, naming the entry, anything it could not read back: a dtype outside its
    six (float16, bfloat16, float32, float64, int32, int64), or gzip that the name does not
    announce with ``.gz`` (or plain bytes under a ``.gz`` name).
    ``background=True`` (a path only) copies the tensors to CPU and returns; a background thread
    writes the file (see :mod:`flodl.checkpoint.background`; ``fl.checkpoint.flush()`` waits).

    >>> import io, torch, flodl as fl
    >>> buf = io.BytesIO()
    >>> fl.save_checkpoint(buf, {"w": torch.ones(2, 3)}, {"step": torch.tensor(7)})
    >>> _ = buf.seek(0)
    >>> fl.checkpoint_keys(buf)
    ['w', 'step']
    >>> try:
    ...     fl.save_checkpoint(io.BytesIO(), {"mask": torch.ones(2, dtype=torch.bool)},
    ...                        rust_compatible=True)
    ... except fl.CheckpointError as err:
    ...     print(str(err)[:53])
    cannot write 'mask' for the Rust original: dtype bool
    """
    _check_arguments("save", dest, named_params)
    options: dict[str, Any] = {
        "checksum": checksum,
        "compress": compress,
        "fsync": fsync,
        "rust_compatible": rust_compatible,
    }
    if background:
        from flodl.checkpoint.background import save_in_background

        save_in_background(
            _write_checkpoint, dest, named_params, named_buffers, structural_hash, **options
        )
        return
    with listeners.writing(dest):
        _write_checkpoint(dest, named_params, named_buffers, structural_hash, **options)


def _write_checkpoint(
    dest: Destination,
    named_params: NamedTensors,
    named_buffers: NamedTensors | None,
    structural_hash: str | bytes | None,
    *,
    checksum: bool | None,
    compress: bool | None,
    fsync: bool,
    rust_compatible: bool,
) -> None:
    """The blocking write behind :func:`save_checkpoint` (no listeners told)."""
    params, buffers = _all_named(named_params, named_buffers)
    both = params + buffers
    codec.named_list(both, "named_params + named_buffers")  # names must be unique across both
    digest = fmt.encode_hash(structural_hash)
    if rust_compatible:
        if checksum:
            raise CheckpointError(
                "rust_compatible=True writes the original's bytes, which have no integrity "
                "trailer — drop checksum=True"
            )
        checksum = False
        check_rust_dtypes(both)
    compress = check_compression(dest, compress, rust_compatible=rust_compatible)
    prepared = codec.prepare(both)
    with open_destination(dest, compress=compress, fsync=fsync) as f:
        codec.encode(f, prepared, digest, checksum=checksum is not False)


def check_rust_dtypes(named: list[tuple[str, torch.Tensor]]) -> None:
    """Refuse, naming the entry, a dtype the Rust original has no tag for."""
    for name, tensor in named:
        tag = fmt.TAG_OF_DTYPE.get(tensor.dtype)
        if tag not in fmt.ORIGINAL_TAGS:
            known = ", ".join(fmt.dtype_name(fmt.DTYPE_TAGS[t]) for t in sorted(fmt.ORIGINAL_TAGS))
            raise CheckpointError(
                f"cannot write {name!r} for the Rust original: dtype "
                f"{fmt.dtype_name(tensor.dtype)} has no tag there (it reads only {known}) "
                "— cast it first, or save without rust_compatible=True"
            )


def check_compression(
    dest: Destination, compress: bool | None, *, rust_compatible: bool
) -> bool | None:
    """Check ``compress`` against the destination's name (the Rust flodl gunzips ``.gz`` only)."""
    if not is_path(dest):
        if rust_compatible and compress:
            raise CheckpointError(
                "rust_compatible=True with compress=True on a file object: the Rust original "
                "gunzips only files whose name ends in .gz — save to a path ending in .gz"
            )
        return compress
    name = os.fspath(dest)
    gz_name = name.endswith(".gz")
    if compress is None or compress == gz_name:
        return compress
    if compress:
        problem = (
            f"compress=True on {name!r}, whose name does not end in .gz: the Rust original "
            "picks gzip by extension and reads this file as bad magic"
        )
    else:
        problem = (
            f"compress=False on {name!r}, whose name ends in .gz: the Rust original would try "
            "to gunzip it"
        )
    if rust_compatible:
        raise CheckpointError(f"{problem} — rename the file or drop compress=", source=name)
    warnings.warn(f"{problem}; flodl reads it either way", CheckpointWarning, stacklevel=3)
    return compress


def hash_matches(header: Header, expected: str | bytes | None) -> bool:
    """True unless both the file and the model carry a hash and they differ (zero = no hash)."""
    if expected is None:
        return True
    wanted = fmt.encode_hash(expected)
    return wanted == fmt.ZERO_HASH or header.hash == fmt.ZERO_HASH or wanted == header.hash


def check_hash(
    header: Header, expected: str | bytes | None, *, source: str, opt_out: str = HASH_OPT_OUT
) -> None:
    """Fail when both the file and the model carry a hash and they differ (zero = no hash)."""
    if not hash_matches(header, expected):
        raise hash_mismatch(header, expected, source=source, opt_out=opt_out)


def hash_mismatch(
    header: Header,
    expected: str | bytes | None,
    *,
    source: str,
    opt_out: str,
    explanation: str = "",
) -> CheckpointError:
    model = expected.hex() if isinstance(expected, bytes | bytearray) else str(expected)
    return CheckpointError(
        f"checkpoint architecture mismatch: file={header.hash.hex()} model={model} "
        f"— the file was saved from a different architecture{explanation}; {opt_out}",
        source=source,
        offset=8,
    )


Rename = Callable[[str], str]


def entries_again(src: Source, start: int | None) -> list[EntryInfo] | None:
    """The entry table of ``src`` read a second time (None when the source cannot rewind)."""
    if start is not None:
        src.seek(start)  # type: ignore[union-attr]
    elif not is_path(src):
        return None
    try:
        with open_source(src) as reader:
            return codec.decode(reader, payloads=False).entries
    except CheckpointError:
        return None


def load_checkpoint(
    src: Source,
    named_params: NamedTensors,
    named_buffers: NamedTensors | None = None,
    structural_hash: str | bytes | None = None,
    *,
    strict_shapes: bool = True,
    require_verified: bool = False,
    allow_no_match: bool = False,
    verify: bool = True,
    _hash_opt_out: str = HASH_OPT_OUT,
    _alternates: dict[bytes, Rename] | None = None,
    _warn_partial: bool = True,
) -> LoadReport:
    """Load ``src`` into the given tensors, matching by name; returns a :class:`LoadReport`.

    All-or-nothing: the whole file is parsed and verified (checksums, shapes, architecture hash
    when ``structural_hash`` is given) before a single tensor is modified. Values are cast to
    each target's dtype and copied onto its device in place. A shape mismatch is an error unless
    ``strict_shapes=False``, which skips those entries and reports them. Only entries with a
    target of the same name and shape are materialised (decided from the entry's header); the
    others stream past unallocated, so memory is bounded by the targets, not by the file.

    A hash mismatch names the entries that differ and the likely cause (a renamed tag). A load
    in which no file entry matches any target name is an error naming a few names from each
    side (``allow_no_match=True`` accepts it). A partial load (entries missing from the file,
    left unused, or skipped for their shape) succeeds and logs a warning on the
    ``flodl.checkpoint`` logger naming a few of them. ``require_verified=True`` refuses a file
    with no integrity trailer (see :class:`LoadReport`).

    A plain file given by path is memory-mapped: payloads are checksummed and copied straight
    from the page cache into the targets, with no read() copies or staging buffers (a file
    truncated in place by another program during the load can then crash the process, as with
    any memory map; flodl's own saves replace files atomically and never do that).
    ``verify=False`` skips hashing the payloads (everything else is still checked: bounds,
    shapes, dtypes, names, the header and trailer digests), so a flipped bit inside tensor data
    goes unnoticed; the report then says ``not verified: checksums skipped (verify=False)``.

    >>> import io, torch, flodl as fl
    >>> buf = io.BytesIO()
    >>> fl.save_checkpoint(buf, {"w": torch.ones(2), "old": torch.zeros(1)})
    >>> _ = buf.seek(0)
    >>> w, b = torch.zeros(2), torch.zeros(3)
    >>> report = fl.load_checkpoint(buf, {"w": w, "b": b})
    >>> report.loaded, report.skipped, report.missing, w.tolist()
    (['w'], ['old'], ['b'], [1.0, 1.0])
    """
    _check_arguments("load", src, named_params)
    params, buffers = _all_named(named_params, named_buffers)
    start = src.tell() if not is_path(src) and seekable(src) else None  # type: ignore[union-attr]
    rename: list[Rename] = []

    def on_header(header: Header) -> None:
        if hash_matches(header, structural_hash):
            return
        alternate = (_alternates or {}).get(header.hash)
        if alternate is None:
            raise HashRefusedError(header)
        rename.append(alternate)

    targets = loadable(params, buffers, lambda name: rename[0](name) if rename else name)
    if require_verified and not verify:
        raise CheckpointError("require_verified=True needs the checksums that verify=False skips")
    try:
        with open_source(src, mapped=True) as reader:
            decoded = codec.decode(reader, keep=targets, on_header=on_header, verify=verify)
    except HashRefusedError as refused:
        entries = entries_again(src, start)
        other = None if entries is None else other_kind_of_file([e.name for e in entries])
        if other is not None:
            raise CheckpointError(other, source=describe(src)) from None
        explanation = "" if entries is None else explain_names(entries, params, buffers)
        raise hash_mismatch(
            refused.header,
            structural_hash,
            source=describe(src),
            opt_out=_hash_opt_out,
            explanation=explanation,
        ) from None
    if require_verified:
        check_verified(decoded, reader.name)
    if rename:
        decoded = renamed(decoded, rename[0])
    report, plan = plan_load(
        decoded, params, buffers, strict_shapes=strict_shapes, source=reader.name
    )
    if not allow_no_match:
        check_some_match(report, decoded, params, buffers, source=reader.name)
    commit(plan)
    if _warn_partial:
        warn_if_partial(report, reader.name)
    return report


def warn_if_partial(report: LoadReport, source: str) -> None:
    """Log a warning when a load left model entries as they were or file entries unused: a
    partial load is a feature (new heads, transfer learning), but one that happened by
    accident must not pass unnoticed behind a report nobody printed."""
    from flodl.checkpoint.explain import few

    shapes = [m.name for m in report.mismatches if m.kind == "shape"]
    parts = []
    if report.missing:
        parts.append(f"not in the file (they keep their values): {few(report.missing)}")
    if shapes:
        parts.append(f"skipped for their shape: {few(shapes)}")
    if report.skipped:
        parts.append(f"in the file but not in the model (skipped): {few(report.skipped)}")
    if parts:
        total = len(report.loaded) + len(report.missing) + len(shapes)
        log.warning(
            "%s: partial load, %d of %d model entries loaded — %s",
            source,
            len(report.loaded),
            total,
            "; ".join(parts),
        )


def seekable(src: object) -> bool:
    try:
        return bool(getattr(src, "seekable", lambda: False)())
    except (OSError, ValueError):
        return False


def renamed(decoded: codec.Decoded, rename: Rename) -> codec.Decoded:
    """``decoded`` with every entry under the name ``rename`` gives it."""
    return codec.Decoded(
        decoded.header,
        [replace(e, name=rename(e.name)) for e in decoded.entries],
        {rename(n): t for n, t in decoded.tensors.items()},
        decoded.checksummed,
    )


def check_some_match(
    report: LoadReport,
    decoded: codec.Decoded,
    params: list[tuple[str, torch.Tensor]],
    buffers: list[tuple[str, torch.Tensor]],
    *,
    source: str,
) -> None:
    """Refuse a load in which no file entry matched any target by name (it would change nothing)."""
    if report.loaded or report.mismatches or not (params or buffers) or not decoded.entries:
        return
    from flodl.checkpoint.explain import few, name_style_hint

    file_names = [e.name for e in decoded.entries]
    other = other_kind_of_file(file_names)
    if other is not None:
        raise CheckpointError(other, source=source)
    model_names = [n for n, _ in [*params, *buffers]]
    raise CheckpointError(
        f"no entry of the file matches a model name, so nothing was loaded — the file has "
        f"{few(file_names)}; the model has {few(model_names)}"
        f"{name_style_hint(file_names, model_names)}. Rename the entries with "
        f"fl.migrate_checkpoint_file(src, dst, model.named_parameters(), model.named_buffers()), "
        f"or {NO_MATCH_OPT_OUT}",
        source=source,
    )


Plan = list[tuple[torch.Tensor, torch.Tensor]]


def loadable(
    params: list[tuple[str, torch.Tensor]],
    buffers: list[tuple[str, torch.Tensor]],
    rename: Callable[[str], str | None] = lambda name: name,
) -> Callable[[EntryInfo], bool]:
    """Which entries are worth materialising: those with a target of the same name and shape.

    Decided from the entry's header alone, so a file entry the load would refuse or skip (a
    200 MB ``w`` for a 2-element ``w``, an unknown name) streams past without being allocated.
    Dtype never disqualifies an entry: every ``.fdl`` dtype casts to the target's. ``rename``
    maps a file name to a target name (None: not a model entry, so not decided here: kept).
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for name, tensor in [*params, *buffers]:
        shapes.setdefault(name, tuple(tensor.shape))  # a parameter wins over a same-named buffer

    def keep(info: EntryInfo) -> bool:
        name = rename(info.name)
        return name is None or shapes.get(name) == info.shape

    return keep


def plan_load(
    decoded: codec.Decoded,
    params: list[tuple[str, torch.Tensor]],
    buffers: list[tuple[str, torch.Tensor]],
    *,
    strict_shapes: bool,
    source: str,
) -> tuple[LoadReport, Plan]:
    """Match decoded entries to targets by name; raises before anything is modified.

    Shapes are compared on the entry headers; only entries that pass are expected among
    ``decoded.tensors`` (decode them with :func:`loadable`).
    """
    report = LoadReport(
        version=decoded.header.version,
        verified=decoded.checksummed,
        checks_skipped=decoded.trailer and not decoded.checksummed,
    )
    entries = {e.name: e for e in decoded.entries}
    claimed: set[str] = set()
    plan: Plan = []
    bad_shapes: list[str] = []
    for kind, items in (("parameter", params), ("buffer", buffers)):
        for name, target in items:
            entry = None if name in claimed else entries.get(name)
            claimed.add(name)  # a name in both lists: the parameter takes the entry
            if entry is None:
                report.missing.append(name)
                continue
            if entry.shape != tuple(target.shape):
                report.mismatches.append(
                    Mismatch(name, "shape", fmt.shape_str(entry.shape), fmt.shape_str(target.shape))
                )
                bad_shapes.append(
                    f'{kind} "{name}": shape mismatch: checkpoint={fmt.shape_str(entry.shape)} '
                    f"model={fmt.shape_str(target.shape)}"
                )
                continue
            if entry.dtype != target.dtype:
                report.mismatches.append(
                    Mismatch(
                        name, "dtype", fmt.dtype_name(entry.dtype), fmt.dtype_name(target.dtype)
                    )
                )
            plan.append((target, decoded.tensors[name]))
            report.loaded.append(name)
    report.skipped = [e.name for e in decoded.entries if e.name not in claimed]
    if bad_shapes and strict_shapes:
        shown = "; ".join(bad_shapes[:10])
        if len(bad_shapes) > 10:
            shown += f"; and {len(bad_shapes) - 10} more"
        raise CheckpointError(
            f"{shown} — nothing was loaded; pass strict_shapes=False to load the other entries "
            "and skip these",
            source=source,
        )
    return report, plan


def commit(plan: Plan) -> None:
    """Copy validated values into their targets (cast to the target's dtype, onto its device)."""
    with torch.no_grad():
        for target, value in plan:
            if _plain_memcpy(target, value):
                # A single-threaded memcpy: as fast as memory allows, and immune to the
                # OpenMP oversubscription that makes torch's parallel copy_ crawl on busy hosts.
                dst = target.detach().reshape(-1).view(torch.uint8).numpy()
                dst[...] = value.reshape(-1).view(torch.uint8).numpy()
                # torch cannot see a write through numpy: bump the version counter as copy_ would,
                # so a backward that saved the old values fails instead of silently using new ones.
                torch.autograd.graph.increment_version(target)
            else:
                target.copy_(value)


def _plain_memcpy(target: torch.Tensor, value: torch.Tensor) -> bool:
    return (
        target.device.type == "cpu"
        and target.dtype == value.dtype
        and target.is_contiguous()
        and value.is_contiguous()
        and target.layout == torch.strided
        and not target.is_conj()
        and not target.is_neg()
    )


def read_checkpoint(
    src: Source, *, max_bytes: int | None = None, require_verified: bool = False
) -> dict[str, torch.Tensor]:
    """Every entry of ``src`` as a CPU tensor, in file order (verified like :func:`load_checkpoint`).

    Every payload is materialised, so memory grows with the file's *decompressed* size: a small
    ``.gz`` can legitimately expand a thousandfold. For a file you do not trust, pass
    ``max_bytes``: an entry that would take the total past it is refused from its header, before
    its payload is read (or use :func:`load_checkpoint`, bounded by your tensors).
    """
    total = 0

    def within_budget(info: EntryInfo) -> bool:
        nonlocal total
        total += info.nbytes
        if max_bytes is not None and total > max_bytes:
            raise CheckpointError(
                f"entry {info.name!r} takes the data to {total} bytes, over max_bytes={max_bytes} "
                "— raise the limit if you trust this file",
                source=reader.name,
                offset=info.offset,
            )
        return True

    with open_source(src) as reader:
        decoded = codec.decode(reader, keep=within_budget)
    if require_verified:
        check_verified(decoded, reader.name)
    return decoded.tensors


def checkpoint_version(src: Source) -> int:
    """The format version stored in ``src`` (checks only the magic; Rust flodl files are 1 or 2)."""
    with open_source(src) as reader:
        data = reader.read_upto(8)
    if not data:
        raise reader.error("empty file — this is not a .fdl checkpoint", 0)
    if data[:4] != fmt.MAGIC:
        raise reader.error(
            f"invalid checkpoint: bad magic {data[:4]!r} (expected .fdl checkpoint, b'FDLC')", 0
        )
    if len(data) < 8:
        raise reader.error("truncated header: no version field — the file was cut short", 4)
    return fmt.U32.unpack(data[4:8])[0]


def checkpoint_keys(src: Source) -> list[str]:
    """Entry names in file order (parameters first, then buffers), without loading tensors."""
    with open_source(src) as reader:
        return [e.name for e in codec.decode(reader, payloads=False).entries]


def checkpoint_info(src: Source) -> CheckpointInfo:
    """Version, stored hash and entry table of ``src``; reads the whole file to verify checksums."""
    with open_source(src) as reader:
        decoded = codec.decode(reader, keep=lambda _: False)
    h = decoded.header
    return CheckpointInfo(h.version, h.structural_hash, decoded.entries, decoded.checksummed)
