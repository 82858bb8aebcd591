"""The ``<stem>.config.json`` sidecar: a model's source configuration beside its checkpoint.

The Rust original writes a graph's ``source_config`` text (for example the Hugging Face
``config.json`` a model was built from) verbatim next to the checkpoint, so tools can rebuild
the architecture from the checkpoint alone. The name drops a trailing ``.gz``, then replaces
the last extension with ``config.json``: ``model.fdl`` and ``model.fdl.gz`` both give
``model.config.json``; ``weights`` gives ``weights.config.json``.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from flodl.checkpoint.errors import CheckpointError
from flodl.checkpoint.streams import PathLike


def _split_extension(name: str) -> tuple[str, str | None]:
    """(stem, extension) as Rust's ``Path`` sees them: a leading dot starts no extension."""
    dot = name.rfind(".")
    return (name, None) if dot <= 0 else (name[:dot], name[dot + 1 :])


def sidecar_config_path(checkpoint: PathLike) -> Path:
    """Where the source config of ``checkpoint`` lives.

    >>> from flodl.checkpoint import sidecar_config_path
    >>> str(sidecar_config_path("runs/model.fdl.gz"))
    'runs/model.config.json'
    """
    path = Path(os.fspath(checkpoint))
    stem, extension = _split_extension(path.name)
    if extension == "gz":
        stem, _ = _split_extension(stem)
    return path.with_name(f"{stem}.config.json")


def write_source_config(checkpoint: PathLike, content: str) -> Path:
    """Write ``content`` verbatim (UTF-8) to the sidecar of ``checkpoint``, atomically."""
    target = sidecar_config_path(checkpoint)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_bytes(content.encode("utf-8"))
        tmp.replace(target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CheckpointError(
            f"save_checkpoint: cannot write sidecar {target}: {exc.strerror or exc}",
            source=os.fspath(checkpoint),
        ) from exc
    return target


def read_source_config(checkpoint: PathLike) -> str | None:
    """The text of ``checkpoint``'s ``<stem>.config.json`` sidecar, or None when there is none.

    >>> import tempfile, pathlib, flodl as fl
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "m.config.json").write_text('{"model_type": "bert"}')
    >>> fl.read_source_config(d / "m.fdl")
    '{"model_type": "bert"}'
    """
    target = sidecar_config_path(checkpoint)
    try:
        return target.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(
            f"cannot read sidecar {target}: {exc}", source=os.fspath(checkpoint)
        ) from exc
