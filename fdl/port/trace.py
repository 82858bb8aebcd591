"""Record a model's forward with ``torch.fx``; what cannot be traced becomes an opaque leaf.

torch's own layers (``torch.nn``) and ``nn.Sequential`` containers made only of them are kept
whole (the port reuses them as they are). A module whose forward cannot be traced symbolically
(data-dependent control flow, calls fx cannot follow) is retried as a leaf, so the rest of the
model is still translated; the module that failed and the line that stopped the tracer are kept
for the report.
"""

from __future__ import annotations

import inspect
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import fx, nn

TORCH_DIR = str(Path(torch.__file__).parent)
MAX_RETRIES = 32


@dataclass
class Opaque:
    """A part of the model kept as one opaque step: its path ('' is the whole model)."""

    path: str
    cls: str
    location: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"module": self.path or "<model>", "class": self.cls, "location": self.location,
                "reason": self.reason}  # fmt: skip


def is_torch_module(module: nn.Module) -> bool:
    """A layer from torch itself (``nn.Conv2d``, ``nn.LSTM``, ...)."""
    return type(module).__module__.startswith(("torch.nn", "torch.ao.nn"))


def _all_torch(module: nn.Module) -> bool:
    return all(is_torch_module(m) for m in module.modules())


class PortTracer(fx.Tracer):
    """fx's tracer, keeping torch layers, all-torch Sequentials and opaque modules whole."""

    def __init__(self, opaque: set[str]) -> None:
        super().__init__()
        self.opaque = opaque

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if module_qualified_name in self.opaque:
            return True
        if isinstance(m, nn.Sequential):
            return _all_torch(m)
        return is_torch_module(m)


def _failure(exc: BaseException, paths: dict[int, str]) -> tuple[str, str]:
    """(path of the module whose forward failed, 'file:line') from the traceback of ``exc``."""
    tb = exc.__traceback__
    found = ("", "")
    while tb is not None:
        frame = tb.tb_frame
        owner = frame.f_locals.get("self")
        if (
            isinstance(owner, nn.Module)
            and id(owner) in paths
            and not frame.f_code.co_filename.startswith(TORCH_DIR)
        ):
            found = (
                paths[id(owner)],
                f"{_base(frame.f_code.co_filename)}:{tb.tb_lineno}",
            )
        tb = tb.tb_next
    if not found[1]:
        last = traceback.extract_tb(exc.__traceback__)[-1:]
        found = ("", f"{_base(last[0].filename)}:{last[0].lineno}" if last else "?")
    return found


def _base(path: str) -> str:
    return Path(path).name


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def concrete_args(model: nn.Module, n_args: int) -> dict[str, Any]:
    """The forward's parameters no example passes, fixed to their defaults while tracing."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return {}
    fixed = {}
    for param in params[n_args:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.default is not param.empty:
            fixed[param.name] = param.default
    return fixed


def trace(model: nn.Module, n_args: int) -> tuple[fx.GraphModule | None, list[Opaque]]:
    """The traced model, or None when the whole forward stays opaque, and the opaque parts."""
    paths = {id(m): name for name, m in model.named_modules()}
    opaque_paths: set[str] = set()
    opaque: list[Opaque] = []
    fixed = concrete_args(model, n_args)
    for _ in range(MAX_RETRIES):
        tracer = PortTracer(opaque_paths)
        try:
            graph = tracer.trace(model, concrete_args=fixed or None)
        except Exception as exc:
            path, location = _failure(exc, paths)
            cls = type(model.get_submodule(path)).__name__ if path else type(model).__name__
            opaque.append(Opaque(path, cls, location, _reason(exc)))
            if not path or path in opaque_paths:
                return None, [o for o in opaque if o.path == path][-1:]
            opaque_paths.add(path)
            continue
        gm = fx.GraphModule(tracer.root, graph, type(model).__name__)
        gm.graph.eliminate_dead_code()
        return gm, opaque
    return None, opaque
