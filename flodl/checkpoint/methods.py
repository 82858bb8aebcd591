"""Checkpoint methods for graph-like modules (``fl.Graph`` inherits them).

The host class must provide ``named_parameters()``, ``named_buffers()``, ``structural_hash()``
(a 64-hex-character SHA-256, or None) and, for subgraph loads, ``subgraph(label)`` returning
the child module mounted under ``label``.

Subgraph name mapping: a child saved on its own (``child.save_checkpoint(path)``) stores its
entries under the child's own names, e.g. ``weight``. Inside the composed model the same tensors
are named ``label`` + :attr:`CheckpointMethods.subgraph_name_separator` + name, e.g.
``encoder.weight``. ``load_subgraph_checkpoint`` loads into the child's tensors directly (so the
file's names are the child's names) and reports ``loaded``, ``missing`` and ``mismatches`` in
the composed model's names; ``skipped`` lists the file's own names.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from flodl.checkpoint.api import LoadReport, load_checkpoint, save_checkpoint
from flodl.checkpoint.errors import CheckpointError
from flodl.checkpoint.streams import Destination, Source, describe

_OPT_OUT = "pass strict_hash=False to load the matching entries anyway (a partial load)"


class CheckpointMethods:
    """Mixin: ``save_checkpoint``, ``load_checkpoint`` and ``load_subgraph_checkpoint``."""

    subgraph_name_separator: ClassVar[str] = "."
    # named_parameters / named_buffers / structural_hash / subgraph come from the host class;
    # they are deliberately not stubbed here, so the mixin never shadows nn.Module's methods.

    def save_checkpoint(
        self,
        path: Destination,
        *,
        checksum: bool = True,
        compress: bool | None = None,
        background: bool = False,
    ) -> None:
        """Save parameters, then buffers, with this model's structural hash (atomic for paths).

        ``background=True`` returns once the tensors are copied to CPU and writes the file on a
        background thread (``fl.checkpoint.flush()`` waits for it and raises its error)."""
        save_checkpoint(
            path,
            list(self.named_parameters()),  # type: ignore[attr-defined]
            list(self.named_buffers()),  # type: ignore[attr-defined]
            _structural_hash(self),
            checksum=checksum,
            compress=compress,
            background=background,
        )

    def load_checkpoint(
        self, path: Source, *, strict_hash: bool = True, strict_shapes: bool = True
    ) -> LoadReport:
        """Load a checkpoint saved from this architecture; returns a :class:`LoadReport`.

        A file saved from a different architecture (both hashes set and different) is an error
        unless ``strict_hash=False``, which loads whatever matches by name and shape (transfer
        learning). Nothing is modified when the load fails.
        """
        return load_checkpoint(
            path,
            list(self.named_parameters()),  # type: ignore[attr-defined]
            list(self.named_buffers()),  # type: ignore[attr-defined]
            _structural_hash(self) if strict_hash else None,
            strict_shapes=strict_shapes,
            _hash_opt_out=_OPT_OUT,
        )

    def load_subgraph_checkpoint(
        self, label: str, path: Source, *, strict_hash: bool = True, strict_shapes: bool = True
    ) -> LoadReport:
        """Load a checkpoint saved from the child ``label`` on its own into that child.

        The child's hash is checked against the file's (opt out with ``strict_hash=False``);
        report names are the composed model's (``label.name``; see the module docstring).
        A label that names no subgraph raises :class:`CheckpointError` ("no subgraph labelled
        …", with the closest valid paths when the host knows them; on a Graph the
        :class:`~flodl.graph.paths.PathError` is chained as ``__cause__``) before anything is read.
        """
        subgraph = getattr(self, "subgraph", None)
        try:
            child = subgraph(label) if callable(subgraph) else None
        except KeyError as exc:  # fl.Graph raises PathError (a FlodlError and a KeyError)
            raise CheckpointError(
                f"no subgraph labelled {label!r}: {exc} — pass the label given to .label() "
                "when the child was built",
                source=describe(path),
            ) from exc
        if child is None:
            raise CheckpointError(
                f"no subgraph labelled {label!r} — pass the label given to .label() when the "
                "child was built",
                source=describe(path),
            )
        report = load_checkpoint(
            path,
            list(child.named_parameters()),
            list(child.named_buffers()),
            _structural_hash(child) if strict_hash else None,
            strict_shapes=strict_shapes,
            _hash_opt_out=_OPT_OUT,
        )
        prefix = f"{label}{self.subgraph_name_separator}"
        report.loaded = [prefix + n for n in report.loaded]
        report.missing = [prefix + n for n in report.missing]
        report.mismatches = [replace(m, name=prefix + m.name) for m in report.mismatches]
        return report


def _structural_hash(module: object) -> str | None:
    method = getattr(module, "structural_hash", None)
    return method() if callable(method) else None
