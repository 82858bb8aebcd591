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

from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar

from flodl.checkpoint import listeners
from flodl.checkpoint.api import LoadReport, load_checkpoint, save_checkpoint, warn_if_partial
from flodl.checkpoint.errors import CheckpointError
from flodl.checkpoint.sidecar import write_source_config
from flodl.checkpoint.streams import Destination, Source, describe, is_path

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
        checksum: bool | None = None,
        compress: bool | None = None,
        rust_compatible: bool = False,
        background: bool = False,
    ) -> None:
        """Save parameters, then buffers, with this model's structural hash (atomic for paths).

        ``rust_compatible=True`` writes the file the Rust original writes for the equivalent
        graph: its entry names (``tag/param``, ``node_id/param``), its structural hash
        (``structural_hash(scheme="rust")``) and its exact bytes; a step with no counterpart
        there raises, naming the node. When :attr:`source_config` is set, its text is written
        verbatim next to a path as ``<stem>.config.json``, where the Rust flodl puts it.

        ``background=True`` returns once the tensors are copied to CPU and writes the file on a
        background thread (``fl.checkpoint.flush()`` waits for it and raises its error).
        """
        if rust_compatible:
            from flodl.checkpoint.rust_graph import rust_layout

            layout = rust_layout(self)
            named = dict([*self.named_parameters(), *self.named_buffers()])  # type: ignore[attr-defined]
            params = [(rust, named[py]) for rust, py in layout.params]
            buffers = [(rust, named[py]) for rust, py in layout.buffers]
            structural_hash: str | bytes | None = layout.hash
        else:
            params = list(self.named_parameters())  # type: ignore[attr-defined]
            buffers = list(self.named_buffers())  # type: ignore[attr-defined]
            structural_hash = _structural_hash(self)
        # A host that knows where training stands (a Graph set up for Graph mode: its step)
        # labels the save for the save listeners.
        labels = getattr(self, "_checkpoint_tags", None)
        with listeners.save_tags(**(labels() if callable(labels) else {})):
            save_checkpoint(
                path,
                params,
                buffers,
                structural_hash,
                checksum=checksum,
                compress=compress,
                rust_compatible=rust_compatible,
                background=background,
            )
        if self.source_config is not None and is_path(path):
            write_source_config(path, self.source_config)

    # ------------------------------------------------------------------ source config sidecar
    @property
    def source_config(self) -> str | None:
        """Text describing where the model came from (e.g. a Hugging Face ``config.json``).

        When set, :meth:`save_checkpoint` writes it verbatim to ``<stem>.config.json`` beside
        the checkpoint (``model.fdl`` and ``model.fdl.gz`` both give ``model.config.json``), the
        sidecar the Rust original writes; :func:`flodl.checkpoint.read_source_config` reads it.
        flodl never interprets the text.
        """
        return self.__dict__.get("_source_config")

    def set_source_config(self, content: str) -> None:
        """Attach ``content`` (any text) as :attr:`source_config`."""
        if not isinstance(content, str):
            raise CheckpointError(f"source_config must be text, got {type(content).__name__}")
        self.__dict__["_source_config"] = content

    def clear_source_config(self) -> None:
        """Drop :attr:`source_config`: later saves write no sidecar."""
        self.__dict__.pop("_source_config", None)

    def load_checkpoint(
        self,
        path: Source,
        *,
        strict_hash: bool = True,
        strict_shapes: bool = True,
        require_verified: bool = False,
        allow_no_match: bool = False,
        verify: bool = True,
    ) -> LoadReport:
        """Load a checkpoint saved from this architecture; returns a :class:`LoadReport`.

        A file saved from a different architecture (both hashes set and different) is an error
        that names the entries that differ and the likely cause, unless ``strict_hash=False``,
        which loads whatever matches by name and shape (transfer learning). A file carrying this
        graph's Rust hash (``structural_hash(scheme="rust")``: written by the Rust original for
        the equivalent graph) is accepted under strict checking too, and its entry names
        (``tag/param``, ``node_id/param``) are mapped to this graph's. A load that matches no
        entry at all is an error unless ``allow_no_match=True``; ``require_verified=True``
        refuses a file with no integrity trailer; ``verify=False`` skips hashing the payloads
        (see :func:`flodl.load_checkpoint`). Nothing is modified when the load fails.
        """
        return load_checkpoint(
            path,
            list(self.named_parameters()),  # type: ignore[attr-defined]
            list(self.named_buffers()),  # type: ignore[attr-defined]
            _structural_hash(self) if strict_hash else None,
            strict_shapes=strict_shapes,
            require_verified=require_verified,
            allow_no_match=allow_no_match,
            verify=verify,
            _hash_opt_out=_OPT_OUT,
            _alternates=_alternate_hashes(self) if strict_hash else None,
        )

    def load_subgraph_checkpoint(
        self,
        label: str,
        path: Source,
        *,
        strict_hash: bool = True,
        strict_shapes: bool = True,
        require_verified: bool = False,
        allow_no_match: bool = False,
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
            require_verified=require_verified,
            allow_no_match=allow_no_match,
            _hash_opt_out=_OPT_OUT,
            _alternates=_alternate_hashes(child) if strict_hash else None,
            _warn_partial=False,  # said below, in the composed model's names
        )
        prefix = f"{label}{self.subgraph_name_separator}"
        report.loaded = [prefix + n for n in report.loaded]
        report.missing = [prefix + n for n in report.missing]
        report.mismatches = [replace(m, name=prefix + m.name) for m in report.mismatches]
        warn_if_partial(report, describe(path))
        return report


def _alternate_hashes(module: object) -> dict[bytes, Callable[[str], str]]:
    """The other hashes a file from this architecture may carry, each with how to rename the
    file's entries: the Rust original's, and the one flodl wrote before it hashed the plain
    attributes of modules with an empty ``extra_repr`` (a file from then cannot tell more)."""
    from flodl.checkpoint.rust_graph import RustMappingError, rust_layout

    found: dict[bytes, Callable[[str], str]] = {}
    earlier = getattr(module, "_earlier_structural_hash", None)
    if callable(earlier):
        found[bytes.fromhex(earlier())] = lambda name: name
    try:
        layout = rust_layout(module)
    except (RustMappingError, AttributeError):
        return found
    names = {**layout.aliases, **dict(layout.params + layout.buffers)}
    found[bytes.fromhex(layout.hash)] = lambda name: names.get(name, name)
    return found


def _structural_hash(module: object) -> str | None:
    method = getattr(module, "structural_hash", None)
    return method() if callable(method) else None
