"""Resolve ``name_or_path`` to local files: a directory, or a hub id through the HF cache.

A hub id goes through ``huggingface_hub`` and its cache (``HF_HOME`` / ``HF_HUB_CACHE``, read at
call time). With ``HF_HUB_OFFLINE=1`` only the cache is read, and an id that is not cached raises
:class:`~flodl.hf.errors.HfHubError` naming the id and the cache directory it looked in. Otherwise
the hub is asked once (a HEAD of ``config.json``); when it cannot be reached every file is read
from the cache, as offline, and the error of an id that is not cached names the network failure.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from flodl.hf.errors import HfHubError

log = logging.getLogger("flodl.hf")

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
LEGACY_WEIGHTS = "pytorch_model.bin"
TOKENIZER = "tokenizer.json"
WEIGHTS_INDEX = "model.safetensors.index.json"
# The other tokenizer files transformers writes beside tokenizer.json: carried over on export, so
# that AutoTokenizer reads the export as it read the source (model_max_length, special tokens...)
TOKENIZER_EXTRAS = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "spm.model",
)
# the ones fetched for a hub id (each file asked for is a request)
_HUB_TOKENIZER_EXTRAS = ("tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class ModelFiles:
    """Where a model's files are: ``config``, ``weights`` (one ``model.safetensors``, or the
    shards a ``model.safetensors.index.json`` lists; empty when there are none) and, when
    present, ``tokenizer`` and the other tokenizer files (``tokenizer_extras``)."""

    source: str
    config: Path
    weights: list[Path]
    tokenizer: Path | None
    legacy_weights: Path | None = None
    tokenizer_extras: tuple[Path, ...] = ()


def cache_dir() -> Path:
    """The hub cache directory, from the environment as it is now (``HF_HUB_CACHE``, else
    ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(
        os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    """Is ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) set to a true value?"""
    return _offline_variable() is not None


def _offline_variable() -> str | None:
    return next(
        (
            var
            for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
            if os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}
        ),
        None,
    )


def shard_names(index: Path) -> list[str]:
    """The shard files a ``model.safetensors.index.json`` maps weights to, in order."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise HfHubError(f"{index}: not a safetensors index ({err})") from err
    return sorted(set(weight_map.values()))


def _local(directory: Path) -> ModelFiles:
    config = directory / CONFIG
    if not config.is_file():
        raise HfHubError(f"{directory} has no {CONFIG}: not a HuggingFace model directory")
    weights = [directory / WEIGHTS] if (directory / WEIGHTS).is_file() else []
    if not weights and (directory / WEIGHTS_INDEX).is_file():
        weights = [directory / name for name in shard_names(directory / WEIGHTS_INDEX)]
        absent = [w.name for w in weights if not w.is_file()]
        if absent:
            raise HfHubError(f"{directory}: shard(s) listed in {WEIGHTS_INDEX} missing: {absent}")
    legacy = directory / LEGACY_WEIGHTS
    tokenizer = directory / TOKENIZER
    return ModelFiles(
        source=str(directory),
        config=config,
        weights=weights,
        tokenizer=tokenizer if tokenizer.is_file() else None,
        legacy_weights=legacy if legacy.is_file() else None,
        tokenizer_extras=tuple(
            directory / name for name in TOKENIZER_EXTRAS if (directory / name).is_file()
        ),
    )


def resolve(name_or_path: str | os.PathLike[str], revision: str | None = None) -> ModelFiles:
    """The local files of a model directory or a hub id (downloaded into the cache if online).

    >>> import tempfile, json, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "config.json").write_text(json.dumps({"model_type": "bert"}))
    >>> resolve(d).weights
    []
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return _local(path)
    name = str(name_or_path)
    if path.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise HfHubError(f"{name} is not a model directory (no such directory)")
    return _from_hub(name, revision)


def _unreachable(repo_id: str, revision: str | None) -> Exception | None:
    """Ask the hub once, without retries, for ``config.json``'s metadata: the error when it cannot
    be reached (no network, a timeout, a 5xx or 429), None when it answered, even "not found"
    (``hf_hub_download`` then reports that). huggingface_hub retries each file it cannot reach
    and does not find in the cache (~20 s each, .no_exist markers or not), so the files are then
    read with ``local_files_only`` instead."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    try:
        get_hf_file_metadata(hf_hub_url(repo_id, CONFIG, revision=revision))
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", None)
        if status is not None and status < 500 and status not in (408, 429):
            return None
        return err
    except Exception as err:  # connection refused, DNS, timeout, proxy, SSL: requests or httpx
        return err
    return None


def _from_hub(repo_id: str, revision: str | None) -> ModelFiles:
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError
    except ImportError as err:  # pragma: no cover - the hf extra installs it
        raise HfHubError(
            f"loading {repo_id!r} from the hub needs huggingface_hub: pip install 'flodl[hf]'"
        ) from err
    cache = cache_dir()
    variable = _offline_variable()
    unreachable = None if variable else _unreachable(repo_id, revision)
    local_only = variable is not None or unreachable is not None

    def not_cached(err: Exception) -> HfHubError:
        where = f"it is not in the cache {cache} (revision {revision or 'main'})"
        if variable is not None:
            return HfHubError(
                f"cannot load {repo_id!r}: {variable} is set and {where}; download it once "
                f"online, or unset {variable}"
            )
        cause = unreachable or err.__cause__ or err
        return HfHubError(
            f"cannot load {repo_id!r}: the hub could not be reached ({type(cause).__name__}: "
            f"{cause}) and {where}; check the network (or HF_ENDPOINT), or pass a local model "
            "directory"
        )

    def fetch(filename: str, required: bool) -> Path | None:
        try:
            return Path(
                hf_hub_download(
                    repo_id,
                    filename,
                    revision=revision,
                    cache_dir=cache,
                    local_files_only=local_only,
                )
            )
        except LocalEntryNotFoundError as err:
            if not required:
                return None
            raise not_cached(err) from (unreachable or err)
        except EntryNotFoundError:
            if required:
                raise HfHubError(f"{repo_id!r} has no {filename}") from None
            return None
        except Exception as err:  # network errors, unknown repos, gated repos...
            if not required:
                return None
            raise HfHubError(f"cannot load {repo_id!r} from the hub: {err}") from err

    config = fetch(CONFIG, required=True)
    assert config is not None
    if unreachable is not None:
        log.warning(
            "the hub could not be reached (%s: %s): %r is read from the cache %s",
            type(unreachable).__name__,
            unreachable,
            repo_id,
            cache,
        )
    single = fetch(WEIGHTS, required=False)
    weights = [single] if single is not None else []
    if not weights:
        index = fetch(WEIGHTS_INDEX, required=False)
        if index is not None:
            weights = [fetch(name, required=True) for name in shard_names(index)]  # type: ignore[misc]
    legacy = None if weights else fetch(LEGACY_WEIGHTS, required=False)
    return ModelFiles(
        source=repo_id,
        config=config,
        weights=weights,
        tokenizer=fetch(TOKENIZER, required=False),
        legacy_weights=legacy,
        tokenizer_extras=tuple(
            p for p in (fetch(name, required=False) for name in _HUB_TOKENIZER_EXTRAS) if p
        ),
    )
