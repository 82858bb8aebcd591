"""Prove a port computes what the original does: outputs, input and parameter gradients, buffers,
and the tensors a forward leaves on its modules (``self.last_attn = attn``).

Each example input (each seed's draw of each ``--example-input``) runs through the original and through the port's graph, in eval mode and in
train mode, with the same RNG seed before each side (a model may draw random numbers in either
mode). The graph shares the original's modules, so the same parameters are compared by identity;
the model's state (running statistics, anything a forward updates, the tensor attributes a
forward assigns) is restored between sides.
The backward pass uses a fixed random weighting of every output, so every output element's
gradient path is checked, not only a plain sum.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from fdl.port.load import Example

SEED = 0
WEIGHT_SEED = 1234


@dataclass
class Case:
    example: int
    mode: str
    seed: int = 0
    outputs: float = 0.0
    input_grads: float = 0.0
    param_grads: float = 0.0
    buffers: float = 0.0
    attributes: float = 0.0  # the tensors the forward left on modules
    error: str | None = None

    @property
    def exact(self) -> bool:
        return self.error is None and not any(
            (self.outputs, self.input_grads, self.param_grads, self.buffers, self.attributes)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "example": self.example,
            "seed": self.seed,
            "mode": self.mode,
            "exact": self.exact,
            "max_abs_diff": {
                "outputs": self.outputs,
                "input_grads": self.input_grads,
                "param_grads": self.param_grads,
                "buffers": self.buffers,
                "attributes": self.attributes,
            },
            **({"error": self.error} if self.error else {}),
        }


@dataclass
class Parity:
    cases: list[Case] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return bool(self.cases) and all(c.exact for c in self.cases)

    @property
    def max_abs_diff(self) -> float:
        diffs = [
            max(c.outputs, c.input_grads, c.param_grads, c.buffers, c.attributes)
            for c in self.cases
        ]
        return max(diffs or [0.0])

    def to_dict(self) -> dict[str, Any]:
        return {
            "exact": self.exact,
            "max_abs_diff": _json_float(self.max_abs_diff),
            "cases": [c.to_dict() for c in self.cases],
        }

    def summary(self) -> str:
        n = len({c.example for c in self.cases})
        drawn = len({(c.example, c.seed) for c in self.cases})
        what = f"{n} example input{'s' if n != 1 else ''}"
        if drawn != n:
            what = f"{drawn} inputs ({what}, one draw per seed)"
        what += ", eval and train mode"
        if self.exact:
            return f"exact on {what} (outputs, input and parameter gradients, buffers)"
        errors = [c.error for c in self.cases if c.error]
        if errors:
            return f"NOT proven on {what}: {errors[0]}"
        return f"NOT exact on {what}: max abs diff {self.max_abs_diff:.3g}"


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for k in sorted(value) for t in _tensors(value[k])]
    return []


def skeleton(value: Any) -> str:
    """What ``value`` (a forward's result) is made of, each tensor as ``tensor``, written as
    source would build it: ``(tensor, None)``, ``{'logits': tensor}``, ``Pair(tensor, tensor)``
    for another container type. Two results of one structure have the same skeleton."""
    if isinstance(value, torch.Tensor):
        return "tensor"
    kind = type(value)
    if isinstance(value, dict):
        inner = ", ".join(f"{k!r}: {skeleton(v)}" for k, v in value.items())
        return f"{{{inner}}}" if kind is dict else f"{kind.__qualname__}({{{inner}}})"
    if isinstance(value, tuple | list):
        inner = ", ".join(skeleton(v) for v in value)
        if kind is list:
            return f"[{inner}]"
        if kind is tuple:
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        return f"{kind.__qualname__}({inner})"
    if value is None or kind in (bool, int, float, str):
        return repr(value)
    return f"<{kind.__qualname__}>"


def _diff(a: Sequence[torch.Tensor | None], b: Sequence[torch.Tensor | None]) -> float:
    if len(a) != len(b):
        return math.inf
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        if x is None or y is None:
            if (x is None) != (y is None):
                return math.inf
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return math.inf
        if torch.equal(x, y):
            continue
        if not (x.is_floating_point() or x.is_complex()):
            return math.inf
        d = (x.detach().double() - y.detach().double()).abs()
        nan = torch.isnan(x) != torch.isnan(y)
        worst = max(worst, math.inf if bool(nan.any()) else float(torch.nan_to_num(d).max()))
    return worst


def attributes_of(root: nn.Module) -> dict[tuple[int, str], tuple[nn.Module, Any]]:
    """Every module's own attributes (``vars``), by (module id, name)."""
    return {(id(m), name): (m, value) for m in root.modules() for name, value in vars(m).items()}


def left_by_forward(
    root: nn.Module, paths: dict[int, str], before: dict[tuple[int, str], tuple[nn.Module, Any]]
) -> dict[str, torch.Tensor]:
    """The tensors a forward left as plain attributes (``self.last_attn = attn``: new, or
    another tensor than ``before`` held), by path; the attributes they replaced are given
    back, and a tensor of ``before`` the forward replaced with something else too, so the
    other side starts from the same state."""
    left = {}
    now = attributes_of(root)
    for key, (module, value) in now.items():
        if isinstance(value, torch.Tensor) and (key not in before or before[key][1] is not value):
            left[f"{paths[key[0]]}.{key[1]}"] = value.detach().clone()
            if key in before:
                module.__dict__[key[1]] = before[key][1]
            else:
                del module.__dict__[key[1]]
    for key, (module, value) in before.items():
        if isinstance(value, torch.Tensor) and now.get(key, (None, None))[1] is not value:
            module.__dict__[key[1]] = value
    return left


def _side(
    call: Callable[[tuple[Any, ...]], Any],
    args: tuple[Any, ...],
    params: list[nn.Parameter],
    buffers: Callable[[], list[torch.Tensor]],
) -> tuple[list[torch.Tensor], list[Any], list[Any], list[torch.Tensor], str]:
    leaves = tuple(
        a.detach().clone().requires_grad_(a.is_floating_point())
        if isinstance(a, torch.Tensor)
        else a
        for a in args
    )
    # each side reads a copy of a leaf, as a model reads data: a forward may write into its
    # input (x[:, 0] = 0), which autograd refuses on a leaf that requires grad
    inputs = tuple(
        a.clone() if isinstance(a, torch.Tensor) and a.requires_grad else a for a in leaves
    )
    torch.manual_seed(SEED)
    result = call(inputs)
    out = _tensors(result)
    weights = torch.Generator().manual_seed(WEIGHT_SEED)
    terms = []
    for t in out:
        w = torch.randn(t.shape, generator=weights)
        if t.requires_grad and t.is_floating_point():
            terms.append((t * w.to(t.dtype)).sum())
    grad_inputs = [a for a in leaves if isinstance(a, torch.Tensor) and a.requires_grad]
    wanted = grad_inputs + [p for p in params if p.requires_grad]
    grads: list[torch.Tensor | None]
    if terms and wanted:
        total = torch.stack(terms).sum()
        # retained: a model may cache a tensor computed with grad for its next call (LeViT's
        # attention biases in eval mode), and the other side's backward goes through it again
        grads = list(torch.autograd.grad(total, wanted, allow_unused=True, retain_graph=True))
    else:
        grads = [None] * len(wanted)
    n = len(grad_inputs)
    tensors = [t.detach() for t in out]
    return (tensors, grads[:n], grads[n:], [b.clone() for b in buffers()], skeleton(result))


def check(
    original: nn.Module,
    graph: nn.Module,
    examples: list[Example],
    graph_call: Callable[[nn.Module, tuple[Any, ...]], Any],
) -> Parity:
    """Run every example through both, in eval and train mode; the differences found."""
    params = list(original.parameters())
    extra = [p for p in graph.parameters() if all(p is not q for q in params)]
    saved = original.state_dict()
    state = OrderedDict((k, v.detach().clone()) for k, v in saved.items())
    # each module's version rides along: a layer whose _load_from_state_dict reads it
    # (converting older checkpoints) refuses a state without
    state._metadata = getattr(saved, "_metadata", None)  # type: ignore[attr-defined]
    parity = Parity()
    was_training = original.training
    paths = {id(m): path for path, m in original.named_modules()}
    before = attributes_of(original)  # what each side starts from
    try:
        for example in examples:
            args = example.args
            for mode in ("eval", "train"):
                case = Case(example.number, mode, example.seed)
                parity.cases.append(case)
                if extra:
                    case.error = f"the graph has {len(extra)} parameter(s) the original lacks"
                    continue
                try:
                    original.train(mode == "train")
                    graph.train(mode == "train")
                    a = _side(
                        lambda x: original(*x), args, params, lambda: list(original.buffers())
                    )
                    left_a = left_by_forward(original, paths, before)
                    original.load_state_dict(state)
                    b = _side(
                        lambda x: graph_call(graph, x),
                        args,
                        params,
                        lambda: list(original.buffers()),
                    )
                    left_b = left_by_forward(original, paths, before)
                    original.load_state_dict(state)
                except Exception as exc:
                    left_by_forward(original, paths, before)
                    original.load_state_dict(state)
                    case.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                    continue
                if a[4] != b[4]:
                    case.error = f"the port returns {b[4]} where the original returns {a[4]}"
                    continue
                case.outputs = _diff(a[0], b[0])
                case.input_grads = _diff(a[1], b[1])
                case.param_grads = _diff(a[2], b[2])
                case.buffers = _diff(a[3], b[3])
                case.attributes = (
                    _diff([left_a[k] for k in sorted(left_a)], [left_b[k] for k in sorted(left_a)])
                    if left_a.keys() == left_b.keys()
                    else math.inf
                )
    finally:
        original.train(was_training)
    return parity
