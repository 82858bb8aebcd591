"""Migration of a checkpoint to a model's current names (such as a v1 file's auto-generated ids)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from flodl.checkpoint import codec, listeners
from flodl.checkpoint import format as fmt
from flodl.checkpoint.codec import NamedTensors
from flodl.checkpoint.errors import CheckpointError
from flodl.checkpoint.streams import (
    Destination,
    Source,
    describe,
    is_path,
    open_destination,
    open_source,
)


@dataclass
class MigrateReport:
    """How each entry was carried over: ``unchanged`` (same name and shape), ``remapped``
    ((old, new) pairs matched by shape and dtype, in order), ``dropped`` (file entries nothing
    matched) and ``missing`` (model entries nothing matched)."""

    unchanged: list[str] = field(default_factory=list)
    remapped: list[tuple[str, str]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def is_complete(self) -> bool:
        return not (self.dropped or self.missing)

    def __str__(self) -> str:
        lines: list[str] = []
        sections: list[tuple[str, list[str]]] = [
            ("unchanged", self.unchanged),
            ("remapped", [f"{old} -> {new}" for old, new in self.remapped]),
            ("dropped", self.dropped),
            ("missing", self.missing),
        ]
        for title, items in sections:
            if items:
                lines.append(f"{title} ({len(items)}):")
                lines.extend(f"  {item}" for item in items)
        return "\n".join(lines)


def _same_file(src: Source, dst: Destination) -> bool:
    if not (is_path(src) and is_path(dst)):
        return src is dst
    a, b = Path(src), Path(dst)
    if a.resolve() == b.resolve():
        return True
    try:
        return a.samefile(b)
    except OSError:
        return False


def migrate_checkpoint_file(
    src: Source,
    dst: Destination,
    named_params: NamedTensors,
    named_buffers: NamedTensors | None = None,
    *,
    checksum: bool = True,
    compress: bool | None = None,
    require_verified: bool = False,
) -> MigrateReport:
    """Rewrite ``src`` under the names of the given model tensors, into ``dst`` (never in place).

    Pass 1 keeps entries whose name and shape match; pass 2 assigns each remaining model entry
    the first unused file entry (file order) with the same shape and dtype. The output is v2 in
    model order with no structural hash (it was not produced from this exact architecture).
    ``require_verified=True`` refuses a source without an integrity trailer (nothing is written).

    >>> import io, torch, flodl as fl
    >>> old = io.BytesIO()
    >>> fl.save_checkpoint(old, {"linear_0/weight": torch.ones(2, 2)})
    >>> _ = old.seek(0)
    >>> report = fl.migrate_checkpoint_file(old, io.BytesIO(), {"encoder/weight": torch.zeros(2, 2)})
    >>> print(report)
    remapped (1):
      linear_0/weight -> encoder/weight
    """
    if _same_file(src, dst):
        raise CheckpointError(
            "migrate_checkpoint_file: source and destination are the same file "
            "— write the migrated checkpoint to a new path, then rename it",
            source=describe(src),
        )
    targets = codec.named_list(named_params, "named_params") + codec.named_list(
        named_buffers, "named_buffers"
    )
    with open_source(src) as reader:
        decoded = codec.decode(reader)
    if require_verified:
        from flodl.checkpoint.api import check_verified

        check_verified(decoded, reader.name)
    entries = decoded.entries
    by_name = {e.name: i for i, e in enumerate(entries)}
    used = [False] * len(entries)
    report = MigrateReport()
    chosen: dict[int, int] = {}  # target index -> entry index
    unmatched: list[int] = []
    for t, (name, tensor) in enumerate(targets):
        i = by_name.get(name)
        if i is not None and not used[i] and entries[i].shape == tuple(tensor.shape):
            used[i] = True
            chosen[t] = i
            report.unchanged.append(name)
        else:
            unmatched.append(t)
    for t in unmatched:
        name, tensor = targets[t]
        for i, entry in enumerate(entries):
            if not used[i] and entry.shape == tuple(tensor.shape) and entry.dtype == tensor.dtype:
                used[i] = True
                chosen[t] = i
                report.remapped.append((entry.name, name))
                break
        else:
            report.missing.append(name)
    report.dropped = [e.name for i, e in enumerate(entries) if not used[i]]
    out = [
        (targets[t][0], decoded.tensors[entries[chosen[t]].name])
        for t in range(len(targets))
        if t in chosen
    ]
    prepared = codec.prepare(out)
    from flodl.checkpoint.api import check_compression

    compress = check_compression(dst, compress, rust_compatible=False)
    with listeners.writing(dst), open_destination(dst, compress=compress) as f:
        codec.encode(f, prepared, fmt.ZERO_HASH, checksum=checksum)
    return report
