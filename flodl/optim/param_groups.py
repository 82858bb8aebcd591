"""``param_groups``: torch optimizer parameter groups from graph label paths.

>>> import torch, flodl as fl
>>> from torch import nn
>>> enc = fl.FlowBuilder(nn.Linear(4, 8)).label("encoder").build()
>>> model = fl.FlowBuilder(enc).through(nn.Linear(8, 2)).tag("head").build()
>>> groups = fl.optim.param_groups(model, {"encoder": 1e-4, "head": 1e-3})
>>> opt = torch.optim.SGD(groups, lr=0.1)
>>> [(g["name"], g["lr"], len(g["params"])) for g in opt.param_groups]
[('encoder', 0.0001, 2), ('head', 0.001, 2)]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from flodl.optim.errors import OptimError


def param_groups(
    model: Any, settings: Mapping[str, float | Mapping[str, Any]], *, rest: bool = True
) -> list[dict[str, Any]]:
    """One optimizer param group per label path, in the order given.

    ``settings`` maps a path (``"encoder.scan"``, a tag, a node id) to a learning rate or to a
    dict of group options (``{"lr": 1e-4, "weight_decay": 0.0}``). Every path must resolve
    (:class:`flodl.PathError` otherwise) and hold parameters; two paths sharing a parameter are
    an error naming both (torch would reject the optimizer later, without saying which paths).
    With ``rest=True`` the parameters no path names form a last group ``"(rest)"`` using the
    optimizer's defaults; with ``rest=False`` they are left out (not optimised).
    """
    validate = getattr(model, "validate_path", None)
    if not callable(validate):
        raise OptimError(
            f"param_groups needs a flodl Graph (label paths), got {type(model).__name__}"
        )
    if not settings:
        raise OptimError("param_groups: no paths given — pass {path: lr, ...}")
    groups: list[dict[str, Any]] = []
    owner: dict[int, str] = {}
    for path, value in settings.items():
        params = validate(path).parameters()
        if not params:
            raise OptimError(
                f"param_groups: path '{path}' holds no parameters — name a layer or a subgraph"
            )
        for p in params:
            if id(p) in owner:
                raise OptimError(
                    f"param_groups: paths '{owner[id(p)]}' and '{path}' overlap (they share a "
                    f"parameter of shape {list(p.shape)}) — a parameter can be in one group only; "
                    "name disjoint parts"
                )
            owner[id(p)] = path
        groups.append({"params": params, "name": path, **_options(path, value)})
    if rest:
        leftover = [p for p in _unique(model.parameters()) if id(p) not in owner]
        if leftover:
            groups.append({"params": leftover, "name": "(rest)"})
    return groups


def _options(path: str, value: float | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(value, Mapping):
        options = dict(value)
        if "params" in options:
            raise OptimError(f"param_groups: options for '{path}' cannot set 'params'")
        return options
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise OptimError(
            f"param_groups: the learning rate for '{path}' must be a number >= 0 or a dict of "
            f"group options, got {value!r}"
        )
    return {"lr": float(value)}


def _unique(params: Any) -> list[nn.Parameter]:
    seen: set[int] = set()
    out = []
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out
