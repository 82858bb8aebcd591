"""``ddp:``, ``training:`` and ``output:`` sections: validated, merged, turned into program flags.

The Rust fdl's manifests describe a training run in three structured sections next to
``entry:`` (defaults) and inside presets (overrides, field by field). Before the entry runs they
become command-line flags, in the Rust fdl's order (``config_to_args``), so programs written for
it receive exactly the flags they were written for::

    ddp:      mode policy backend anchor max_anchor overhead_target divergence_threshold
              max_batch_diff max_grad_norm snapshot_timeout checkpoint_every progressive
              speed_hint (slow_rank:ratio) partition_ratios (a,b,...) lr_scale_ratio timeline
    training: epochs batch_size batches_per_epoch (--batches) lr seed
    output:   dir (--output) monitor

then the preset's ``options:`` sorted by name (``batch_size: 32`` -> ``--batch-size 32``; ``true``
a bare flag; ``false``/``null`` nothing; a list or mapping one JSON string), then the user's
arguments, which therefore win.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

# section -> field -> kind (and the flag, where it is not --field-with-dashes)
STRING, JSON, UINT, FLOAT, BOOL = "string", "json", "uint", "float", "bool"
SECTIONS: dict[str, dict[str, str]] = {
    "ddp": {
        "mode": STRING, "policy": STRING, "backend": STRING, "anchor": JSON,
        "max_anchor": UINT, "overhead_target": FLOAT, "divergence_threshold": FLOAT,
        "max_batch_diff": JSON, "speed_hint": "speed_hint", "partition_ratios": "floats",
        "progressive": JSON, "max_grad_norm": FLOAT, "lr_scale_ratio": FLOAT,
        "snapshot_timeout": UINT, "checkpoint_every": UINT, "timeline": BOOL,
    },
    "training": {
        "epochs": UINT, "batch_size": UINT, "batches_per_epoch": UINT, "lr": FLOAT, "seed": UINT,
    },
    "output": {"dir": STRING, "timeline": BOOL, "monitor": UINT},
}  # fmt: skip

Fail = Callable[[tuple[str | int, ...], str], Exception]


def validate_section(
    section: str, value: Any, key: tuple[str | int, ...], fail: Fail
) -> dict[str, Any]:
    """Check one section's fields and types (``fail(key, problem)`` builds the error to raise)."""
    import difflib

    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(key, f"'{section}:' must be a mapping of its fields")
    fields = SECTIONS[section]
    for name, item in value.items():
        where = (*key, str(name))
        kind = fields.get(str(name))
        if kind is None:
            close = difflib.get_close_matches(str(name), list(fields), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(fields)}"
            raise fail(where, f"unknown key in '{section}:' ({hint})")
        if item is None:
            continue
        if kind == UINT and (isinstance(item, bool) or not isinstance(item, int) or item < 0):
            raise fail(where, f"must be a whole number >= 0, got {item!r}")
        if kind == FLOAT and (isinstance(item, bool) or not isinstance(item, int | float)):
            raise fail(where, f"must be a number, got {item!r}")
        if kind == BOOL and not isinstance(item, bool):
            raise fail(where, f"must be true or false, got {item!r}")
        if kind == STRING and (isinstance(item, bool) or not isinstance(item, str | int | float)):
            raise fail(where, f"must be a string, got {type(item).__name__}")
        if kind == "floats" and not (
            isinstance(item, list)
            and all(isinstance(x, int | float) and not isinstance(x, bool) for x in item)
        ):
            raise fail(where, f"must be a list of numbers, got {item!r}")
        if kind == "speed_hint" and not (
            isinstance(item, dict)
            and set(item) == {"slow_rank", "ratio"}
            and isinstance(item["slow_rank"], int)
            and isinstance(item["ratio"], int | float)
        ):
            raise fail(where, "must be {slow_rank: <int>, ratio: <number>}")
    return dict(value)


def merge(defaults: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Field-by-field: the override's set fields win (a preset over the manifest's defaults)."""
    return {**defaults, **{k: v for k, v in override.items() if v is not None}}


def rust_float(value: float) -> str:
    """A float as Rust's ``Display`` prints it (no exponent, no trailing ``.0``), as flag text.

    >>> [rust_float(v) for v in (0.001, 1.0, 2.5, 1e-7)]
    ['0.001', '1', '2.5', '0.0000001']
    """
    text = format(Decimal(repr(float(value))), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def json_text(value: Any) -> str:
    """A free-form value as flag text: a string as it is, anything else as serde_json writes it.

    >>> [json_text(v) for v in ("mlp", 3, 0.5, True, ["a", 1])]
    ['mlp', '3', '0.5', 'true', '["a",1]']
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        if "e" in text:
            mantissa, exponent = text.split("e")
            return f"{mantissa}e{int(exponent)}"
        return text
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def config_to_args(
    ddp: dict[str, Any], training: dict[str, Any], output: dict[str, Any], options: dict[str, Any]
) -> list[str]:
    """The flags for a resolved configuration, in the order the module docstring lists.

    >>> config_to_args({"mode": "cpu-sync"}, {"epochs": 1, "lr": 0.001}, {"dir": "runs/"},
    ...                {"model": "all", "validate": True, "tags": ["a", "b"]})
    ['--mode', 'cpu-sync', '--epochs', '1', '--lr', '0.001', '--output', 'runs/', '--model', 'all', '--tags', '["a","b"]', '--validate']
    """
    args: list[str] = []

    def put(flag: str, value: Any, text: Callable[[Any], str] = json_text) -> None:
        if value is not None:
            args.extend([flag, text(value)])

    for name in ("mode", "policy", "backend"):
        put(f"--{name}", ddp.get(name), str)
    put("--anchor", ddp.get("anchor"))
    put("--max-anchor", ddp.get("max_anchor"), str)
    put("--overhead-target", ddp.get("overhead_target"), rust_float)
    put("--divergence-threshold", ddp.get("divergence_threshold"), rust_float)
    put("--max-batch-diff", ddp.get("max_batch_diff"))
    put("--max-grad-norm", ddp.get("max_grad_norm"), rust_float)
    put("--snapshot-timeout", ddp.get("snapshot_timeout"), str)
    put("--checkpoint-every", ddp.get("checkpoint_every"), str)
    put("--progressive", ddp.get("progressive"))
    hint = ddp.get("speed_hint")
    if hint is not None:
        args += ["--speed-hint", f"{hint['slow_rank']}:{rust_float(hint['ratio'])}"]
    ratios = ddp.get("partition_ratios")
    if ratios is not None:
        args += ["--partition-ratios", ",".join(rust_float(r) for r in ratios)]
    put("--lr-scale-ratio", ddp.get("lr_scale_ratio"), rust_float)
    if ddp.get("timeline") is True:
        args.append("--timeline")
    put("--epochs", training.get("epochs"), str)
    put("--batch-size", training.get("batch_size"), str)
    put("--batches", training.get("batches_per_epoch"), str)
    put("--lr", training.get("lr"), rust_float)
    put("--seed", training.get("seed"), str)
    put("--output", output.get("dir"), str)
    put("--monitor", output.get("monitor"), str)
    for key in sorted(
        options, key=str
    ):  # sorted by name, the order programs written for the Rust fdl got
        value = options[key]
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is not None and value is not False:
            args += [flag, json_text(value)]
    return args
