"""Turn a traced forward (a ``torch.fx`` graph) into FlowBuilder calls a person would write.

Every traced operation becomes one step: a submodule call is the submodule itself, a tuple
element is ``fl.nn.Select``, a functional call or tensor method with a ``torch.nn`` equivalent is
that module (``F.relu`` -> ``nn.ReLU()``, ``torch.flatten(x, 1)`` -> ``nn.Flatten()``), anything
else is a small named function. The steps are then laid out along one stream: a chain is
``through``; a branch rejoining the stream by addition is ``also`` (``x + f(x)``) or
``also_with`` (``g(x) + f(x)``); branches concatenated are ``split`` + ``merge``; a branch whose
value is needed later is a ``fork`` with a ``tag``; a value read again later is tagged and passed
with ``using``. The layout is found by a bounded search over which consumer continues the stream;
if none fits, a second search also lets an expression that reads only tagged values be a fork
of its own (``.fork(f).using(...)``, ``f`` ignoring the stream). When no layout exists, or the
one found runs some value's readers in another order than the original (autograd sums a
gradient in the order its readers ran), an ordered search lays out every operation in the
original's order, a layer reading tags where it must (``Call(m.down, stream_as=())``); when that
fails too, :class:`~fdl.port.errors.UnsupportedError` is raised and the caller keeps the model
as one opaque step.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import inspect
import keyword
import operator
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

import torch
from torch import fx, nn
from torch.fx.immutable_collections import immutable_dict, immutable_list

from fdl.port.errors import ModeUnsupportedError, UnsupportedError
from fdl.port.trace import (
    EVAL_ONLY,
    NO_GRAD,
    TRAINING_ARGS,
    TRAINING_ONLY,
    assign,
    is_constant,
    shape_checked,
    stored,
)

SEARCH_BUDGET = 20_000
# why a step cannot be written on one particular stream (another layout may still fit)
OFF_STREAM = "a tuple element read off the stream"
NOT_ON_STREAM = "not on the stream"
NOT_FIRST = "a module's first argument is not the stream"
LAYOUT_REASONS = {OFF_STREAM, NOT_ON_STREAM, NOT_FIRST}
OVER_BUDGET = "no layout found within the search budget"
UNUSED_STREAM = object()  # the first parameter of a function that does not read the stream
DETACHED = object()  # the stream a step reads when it reads only tags (a module called with refs)


# ---------------------------------------------------------------------------------- rendering
INFIX = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
    operator.floordiv: "//", operator.matmul: "@", operator.pow: "**", operator.mod: "%",
    operator.eq: "==", operator.ne: "!=", operator.lt: "<", operator.le: "<=", operator.gt: ">",
    operator.ge: ">=", operator.and_: "&", operator.or_: "|", operator.xor: "^",
}  # fmt: skip
UNARY = {operator.neg: "-", operator.invert: "~", operator.pos: "+"}
RANDOM_NAMES = {
    "rand", "randn", "rand_like", "randn_like", "randint", "randint_like", "randperm",
    "bernoulli", "multinomial", "normal", "poisson", "dropout", "dropout1d", "dropout2d",
    "dropout3d", "alpha_dropout", "feature_alpha_dropout", "uniform_", "normal_",
    "bernoulli_", "random_", "exponential_", "cauchy_", "log_normal_", "geometric_",
}  # fmt: skip


def qualname(fn: Any, imports: set[str]) -> str:
    """How generated code names the function ``fn`` (``F.relu``, ``torch.cat``, ``math.sqrt``)."""
    if fn is shape_checked:
        return "shape_checked"  # defined in the generated module (GUARD_HELPER)
    if isinstance(fn, torch.jit.ScriptFunction):  # ``@torch.jit.script``: named by TorchScript
        scripted: Any = fn  # (its name is a property the stubs call a method)
        defined_in = scripted.qualified_name.removeprefix("__torch__.").rpartition(".")[0]
        namespace = vars(sys.modules.get(defined_in, sys))
        # its own name, or the one it is bound to (``gelu = torch.jit.script(_gelu)``)
        for bound in [scripted.name, *(k for k, v in namespace.items() if v is fn)]:
            if _imported(fn, bound, defined_in, imports) is not None:
                return str(bound)
        raise UnsupportedError(
            f"the TorchScript function {scripted.qualified_name} cannot be imported"
        )
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        raise UnsupportedError(f"cannot name the function {fn!r}")
    if getattr(torch.nn.functional, name, None) is fn:
        imports.add("F")
        return f"F.{name}"
    if getattr(torch, name, None) is fn:
        return f"torch.{name}"
    for sub in ("special", "linalg", "fft"):
        if getattr(getattr(torch, sub), name, None) is fn:
            return f"torch.{sub}.{name}"
    module = getattr(fn, "__module__", None)
    if module in ("math", "operator", "builtins"):
        if module == "builtins":
            return name
        imports.add(module)
        return f"{module}.{name}"
    # a method of a class (an autograd Function's ``apply``): the class imported, the method
    # read from it
    owner_cls = getattr(fn, "__self__", None)
    if isinstance(owner_cls, type) and getattr(owner_cls, name, None) == fn:
        cls_name = _imported(owner_cls, owner_cls.__qualname__, owner_cls.__module__, imports)
        if cls_name is not None:
            return f"{cls_name}.{name}"
    # a function of the script or of a library (a helper torch.fx was told to keep as one
    # call): the port imports it from where it is defined
    if isinstance(module, str) and _imported(fn, name, module, imports) is not None:
        return name
    raise UnsupportedError(f"the function {module}.{name} has no name generated code can import")


def _imported(obj: Any, name: str, module: str, imports: set[str]) -> str | None:
    """``name``, once ``from <package> import name`` (added to ``imports``) gives ``obj``: from
    the highest package that exports it (``from einops import rearrange``, not ``from
    einops.einops import rearrange``); None when no package does (a class defined in a
    function, a script run as ``__main__``)."""
    if module == "__main__" or not name.isidentifier():
        return None
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        where = ".".join(parts[:depth])
        try:
            owner = importlib.import_module(where)
        except Exception:
            continue
        if getattr(owner, name, None) is obj:
            imports.add(f"from {where} import {name}")
            return name
    return None


def imported_names(imports: set[str]) -> set[str]:
    """The names ``from X import name`` lines bind."""
    return {line.rsplit(" ", 1)[1] for line in imports if line.startswith("from ")}


class Source(str):
    """An argument written as this source text (``training``: a mode-following function's
    parameter), not as a constant."""


def literal(value: Any) -> str:
    """Python source for a constant argument."""
    if isinstance(value, Source):
        return str(value)
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return repr(value)
    if isinstance(value, float):
        text = repr(value)
        return f"float({text!r})" if text in ("inf", "-inf", "nan") else text
    if isinstance(value, tuple):
        items = ", ".join(literal(v) for v in value)
        return f"({items},)" if len(value) == 1 else f"({items})"
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, slice):
        return f"slice({literal(value.start)}, {literal(value.stop)}, {literal(value.step)})"
    if value is Ellipsis:
        return "..."
    if isinstance(value, torch.dtype | torch.memory_format | torch.layout):
        return repr(value)
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    raise UnsupportedError(f"cannot write the constant {value!r:.60} as source")


def _subscript(index: Any, render) -> str:
    def one(item: Any) -> str:
        if isinstance(item, slice):
            parts = ["" if v is None else render(v) for v in (item.start, item.stop, item.step)]
            text = f"{parts[0]}:{parts[1]}"
            return f"{text}:{parts[2]}" if parts[2] else text
        return render(item)

    if isinstance(index, tuple):
        return ", ".join(one(i) for i in index) if index else "()"
    return one(index)


def unwrap(text: str) -> str:
    """``(a * b)`` -> ``a * b`` when the outer parentheses enclose the whole text."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth, comma = 0, False
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        comma = comma or (ch == "," and depth == 1)
        if depth == 0 and i < len(text) - 1:
            return text
    return text if comma else text[1:-1]  # a tuple keeps its parentheses: (2, 3), (x,)


class Expr:
    """Renders fx nodes as Python expressions; tensor values by name, the rest inline."""

    def __init__(self, names: dict[Any, str], kinds: dict[Any, str], imports: set[str]):
        self.names = names
        self.kinds = kinds
        self.imports = imports
        self.reads_training = False  # an expression passed the module's mode: see call()
        self.in_mode_branch = False  # rendering what runs in one mode only
        self.checks: list[tuple[str, bool]] = []  # shape tests decided for the example

    def __call__(self, value: Any) -> str:
        if isinstance(value, fx.Node):
            if value in self.names:
                return self.names[value]
            if value.op == "get_attr" and self.kinds.get(value) == "inline":
                return self.constant(value)
            if self.kinds.get(value) not in ("meta", "inline"):
                raise UnsupportedError(f"{value.name} is not available here")
            return self.call(value)
        if isinstance(value, tuple | list) and any(isinstance(v, fx.Node) for v in value):
            items = ", ".join(self(v) for v in value)
            if isinstance(value, list):
                return f"[{items}]"
            return f"({items},)" if len(value) == 1 else f"({items})"
        if isinstance(value, slice):
            return f"slice({self(value.start)}, {self(value.stop)}, {self(value.step)})"
        return literal(value)

    def constant(self, node: fx.Node) -> str:
        """A tensor made from constants, written as ``torch.tensor(<values>, dtype=...)``."""
        value = getattr(node.graph.owning_module, str(node.target))
        return f"torch.tensor({literal(value.tolist())}, dtype={value.dtype!r})"

    def arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        items = [self(a) for a in args] + [f"{k}={self(v)}" for k, v in kwargs.items()]
        return ", ".join(unwrap(t) for t in items)

    def call(self, node: fx.Node) -> str:
        by_mode = self.kinds.get(node) in ("tensor", "inline")  # a shape is computed either way
        if by_mode and not self.in_mode_branch:
            if TRAINING_ONLY in node.meta:
                return self.in_one_mode(node, training=True)
            if EVAL_ONLY in node.meta:
                return self.in_one_mode(node, training=False)
        args, kwargs = node.args, node.kwargs
        flags = node.meta.get(TRAINING_ARGS)
        if flags:  # a value that depends on the mode: the function's own mode decides
            args = tuple(_by_mode(a, flags[i]) if i in flags else a for i, a in enumerate(args))
            kwargs = {k: _by_mode(v, flags[k]) if k in flags else v for k, v in kwargs.items()}
            self.reads_training = True
        if node.op == "call_method":
            return f"{self(args[0])}.{node.target}({self.arguments(args[1:], kwargs)})"
        if node.op != "call_function":
            raise UnsupportedError(f"{node.op} {node.target} cannot be written as an expression")
        fn = node.target
        if fn in INFIX and len(args) == 2 and not kwargs:
            return f"({self(args[0])} {INFIX[fn]} {self(args[1])})"
        if fn in UNARY and len(args) == 1:
            return f"({UNARY[fn]}{self(args[0])})"
        if fn is operator.getitem:
            return f"{self(args[0])}[{_subscript(args[1], self)}]"
        if fn is shape_checked:  # the test as written, for its error message
            test = unwrap(self(args[1]))
            self.checks.append((test, bool(args[2])))
            return f"shape_checked({self(args[0])}, {test}, {args[2]!r}, {test!r})"
        if fn is builtins.getattr:
            return f"{self(args[0])}.{args[1]}"
        kwargs = _default_free(fn, kwargs)
        return f"{qualname(fn, self.imports)}({self.arguments(args, kwargs)})"

    def in_one_mode(self, node: fx.Node, training: bool) -> str:
        """``node``, which the original runs in training only (``training``) or in eval mode
        only: ``(<node> if training else <eval's value in its place>)``, or ``(<training's
        value> if training else <node>)``. With no such value (an effect, ``nbt.add_(1) if
        training else nbt``, or a value only that mode reads), its first input."""
        other = _other_mode_value(node)
        self.in_mode_branch = True
        try:
            text = self.call(node)
        finally:
            self.in_mode_branch = False
        self.reads_training = True
        if training:
            return f"({text} if training else {unwrap(self(other))})"
        return f"({unwrap(self(other))} if training else {text})"


# fx records a returned list or dict as its own immutable kinds of them
_LISTS = (list, immutable_list)
_DICTS = (dict, immutable_dict)


def _structure_source(value: Any, names: dict[fx.Node, str]) -> str:
    """Source building ``value`` (what a forward returns) from its values, each by its name:
    tuples, lists and dicts of values and constants. Another container (a named tuple, a dict
    keyed by a float) raises :class:`UnsupportedError`."""
    if isinstance(value, fx.Node):
        return names[value]
    if type(value) in _DICTS:
        if any(type(k) not in (str, int) for k in value):
            raise UnsupportedError("a returned dict has a key other than a string or an int")
        items = ", ".join(f"{k!r}: {_structure_source(v, names)}" for k, v in value.items())
        return f"{{{items}}}"
    if type(value) is tuple or type(value) in _LISTS:
        items = ", ".join(_structure_source(v, names) for v in value)
        if type(value) in _LISTS:
            return f"[{items}]"
        return f"({items},)" if len(value) == 1 else f"({items})"
    if isinstance(value, tuple | list | dict):
        raise UnsupportedError(f"a returned {type(value).__name__} is not written as source")
    return literal(value)


def _by_mode(training: Any, evaluating: Any) -> Source:
    """An argument whose value the original chose by its mode, as source choosing by the
    function's: ``training`` itself for ``self.training``, else ``(a if training else b)``."""
    if training is True and evaluating is False:
        return Source("training")
    return Source(f"({literal(training)} if training else {literal(evaluating)})")


def _other_mode_value(node: fx.Node) -> Any:
    """What the other mode has in the place of ``node``, an operation run in one mode only:
    the value its trace reads instead, else (an effect, ``nbt.add_(1)``, or a value read in
    that mode only) its first input."""
    instead = node.meta[TRAINING_ONLY] if TRAINING_ONLY in node.meta else node.meta[EVAL_ONLY]
    if instead is None and node.all_input_nodes:
        instead = node.all_input_nodes[0]  # (read only in training: any of its inputs will do)
    return instead


def _assignment(node: fx.Node, expr: Expr, taken: set[str]) -> str:
    """The body of a function writing ``target[key] = value`` (an ``assign`` node) and returning
    the target; a target computed in the function itself gets a local name first."""
    target, key, value = node.args
    lines = []
    written = expr(target)
    if not written.isidentifier():
        local = next(
            n for n in ("t", *(f"t{i}" for i in range(2, len(taken) + 3))) if n not in taken
        )
        lines.append(f"{local} = {unwrap(written)}")
        written = local
    lines.append(f"{written}[{unwrap(_subscript(key, expr))}] = {unwrap(expr(value))}")
    return "\n    ".join([*lines, f"return {written}"])


def _default_free(fn: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` less those equal to ``fn``'s defaults: fx records every argument a function
    passes on (``F.softmax(x, dim=-1)`` is recorded with ``_stacklevel=3, dtype=None``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return dict(kwargs)
    return {
        k: v
        for k, v in kwargs.items()
        if not (k in params and not isinstance(v, fx.Node) and _is_default(v, params[k].default))
    }


def _base_name(node: fx.Node) -> str:
    """The name a function computing ``node`` is given (``view``, ``index``, ``logits``)."""
    base = re.sub(r"\W+", "_", _target_name(node) or node.name).strip("_").lower() or "fn"
    if node.target is operator.getitem:
        base = "index"
    elif node.target is builtins.getattr and isinstance(node.args[1], str):
        base = node.args[1]  # x.logits: "logits", not a function shadowing getattr
    return INFIX_NAMES.get(base, base)


# ---------------------------------------------------------------------------------- steps
ACTIVATIONS = {
    "relu": "ReLU", "sigmoid": "Sigmoid", "tanh": "Tanh", "gelu": "GELU", "silu": "SiLU",
    "elu": "ELU", "selu": "SELU", "leaky_relu": "LeakyReLU", "softplus": "Softplus",
    "mish": "Mish", "relu6": "ReLU6", "hardtanh": "Hardtanh", "hardswish": "Hardswish",
    "hardsigmoid": "Hardsigmoid", "softsign": "Softsign", "logsigmoid": "LogSigmoid",
    "softmax": "Softmax", "log_softmax": "LogSoftmax", "softmin": "Softmin",
}  # fmt: skip
POOLS = {
    "max_pool1d": ("MaxPool1d", ["kernel_size", "stride", "padding", "dilation", "ceil_mode",
                                 "return_indices"]),
    "max_pool2d": ("MaxPool2d", ["kernel_size", "stride", "padding", "dilation", "ceil_mode",
                                 "return_indices"]),
    "max_pool3d": ("MaxPool3d", ["kernel_size", "stride", "padding", "dilation", "ceil_mode",
                                 "return_indices"]),
    "avg_pool1d": ("AvgPool1d", ["kernel_size", "stride", "padding", "ceil_mode",
                                 "count_include_pad"]),
    "avg_pool2d": ("AvgPool2d", ["kernel_size", "stride", "padding", "ceil_mode",
                                 "count_include_pad", "divisor_override"]),
    "avg_pool3d": ("AvgPool3d", ["kernel_size", "stride", "padding", "ceil_mode",
                                 "count_include_pad", "divisor_override"]),
    "adaptive_avg_pool1d": ("AdaptiveAvgPool1d", ["output_size"]),
    "adaptive_avg_pool2d": ("AdaptiveAvgPool2d", ["output_size"]),
    "adaptive_avg_pool3d": ("AdaptiveAvgPool3d", ["output_size"]),
    "dropout": ("Dropout", ["p", "training", "inplace"]),
    "dropout1d": ("Dropout1d", ["p", "training", "inplace"]),
    "dropout2d": ("Dropout2d", ["p", "training", "inplace"]),
    "dropout3d": ("Dropout3d", ["p", "training", "inplace"]),
}  # fmt: skip
ACTIVATION_ARGS = {"leaky_relu": ["negative_slope", "inplace"], "elu": ["alpha", "inplace"],
                   "softmax": ["dim"], "log_softmax": ["dim"], "softmin": ["dim"],
                   "hardtanh": ["min_val", "max_val", "inplace"], "relu": ["inplace"],
                   "relu6": ["inplace"], "selu": ["inplace"], "gelu": ["approximate"],
                   "softplus": ["beta", "threshold"], "silu": ["inplace"]}  # fmt: skip


def _target_name(node: fx.Node) -> str:
    if node.op == "call_method":
        return str(node.target)
    return getattr(node.target, "__name__", "")


def _is_torch_fn(node: fx.Node, name: str) -> bool:
    """``F.name``/``torch.name`` called, or the tensor method ``name``."""
    if node.op == "call_method":
        return node.target == name
    if node.op != "call_function":
        return False
    fn = node.target
    return fn is getattr(torch.nn.functional, name, None) or fn is getattr(torch, name, None)


def _named(node: fx.Node, names: list[str]) -> dict[str, Any] | None:
    """The node's constant arguments after the input, by name; None if some are tensors."""
    extra = dict(zip(names, node.args[1:], strict=False))
    if len(node.args) - 1 > len(names):
        return None
    extra.update(node.kwargs)
    extra.pop("_stacklevel", None)  # fx's normalised F.softmax call carries it
    if extra.get("dtype", 0) is None:
        del extra["dtype"]
    if any(isinstance(v, fx.Node) for v in extra.values()):
        return None
    if any(k not in names for k in extra):
        return None
    return extra


def _without_defaults(cls: str, extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` less the arguments equal to ``nn.<cls>``'s defaults."""
    try:
        params = inspect.signature(getattr(nn, cls)).parameters
    except (TypeError, ValueError):
        return extra
    return {
        k: v
        for k, v in extra.items()
        if not (k in params and params[k].default is not params[k].empty and params[k].default == v
                and type(params[k].default) is type(v))
    }  # fmt: skip


def torch_module(node: fx.Node) -> str | None:
    """The ``torch.nn`` module doing what this call does (``nn.ReLU()``), or None."""
    name = _target_name(node)
    if node.op not in ("call_function", "call_method") or not node.args:
        return None
    if not _is_torch_fn(node, name):
        return None
    if name in ("softmax", "log_softmax", "softmin") and "dtype" in node.kwargs:
        return None
    if name in ACTIVATIONS:
        extra = _named(node, ACTIVATION_ARGS.get(name, []))
        if extra is None:
            return None
        if name in ("softmax", "log_softmax", "softmin") and extra.get("dim") is None:
            return None
        extra = _without_defaults(ACTIVATIONS[name], extra)
        args = ", ".join(f"{k}={literal(v)}" for k, v in extra.items())
        return f"nn.{ACTIVATIONS[name]}({args})"
    if name in POOLS and node.op == "call_function":
        cls, names = POOLS[name]
        extra = _named(node, names)
        if extra is None:
            return None
        if cls.startswith("Dropout") and extra.pop("training", True) is not True:
            return None  # F.dropout(..., training=False) is not a dropout layer
        extra = _without_defaults(cls, extra)
        parts = [f"{k}={literal(v)}" for k, v in extra.items()]
        if parts and not cls.startswith("Dropout") and parts[0].startswith(names[0] + "="):
            parts[0] = parts[0].split("=", 1)[1]
        return f"nn.{cls}({', '.join(parts)})"
    if name == "flatten":
        extra = _named(node, ["start_dim", "end_dim"])
        if extra is None:
            return None
        start, end = extra.get("start_dim", 0), extra.get("end_dim", -1)
        if end != -1:
            return f"nn.Flatten({start}, {end})"
        return "nn.Flatten()" if start == 1 else f"nn.Flatten({start})"
    if name in ("view", "reshape") and len(node.args) == 3 and not node.kwargs:
        size, rest = node.args[1], node.args[2]
        if (
            rest == -1
            and isinstance(size, fx.Node)
            and size.op == "call_method"
            and size.target == "size"
            and size.args == (node.args[0], 0)
        ):
            return "nn.Flatten()"  # x.view(x.size(0), -1): the batch kept, the rest flattened
    return None


def module_expr(path: str, root: str = "m") -> str:
    """``layer1.0.conv1`` -> ``m.layer1[0].conv1``."""
    text = root
    for part in path.split("."):
        if part.isdigit():
            text += f"[{part}]"
        elif part.isidentifier() and not keyword.iskeyword(part):
            text += f".{part}"
        else:
            text += f".get_submodule({part!r})"
    return text


CALL_HELPER = '''
class Call(nn.Module):
    """``module`` called by keyword: the stream as each argument in ``stream_as``, fixed keyword
    arguments from the original call, refs wired with ``using`` by name."""

    def __init__(self, module: nn.Module, stream_as: tuple[str, ...], **kwargs):
        super().__init__()
        self.module = module
        self.stream_as = tuple(stream_as)
        self.kwargs = kwargs

    def forward(self, x, **refs):
        return self.module(**dict.fromkeys(self.stream_as, x), **self.kwargs, **refs)
'''


SHARED_HELPER = '''
def shared(value: nn.Parameter) -> fl.nn.Param:
    """An ``fl.nn.Param`` step holding ``value`` itself (shared, not copied); the stream is
    ignored: ``.fork(shared(m.pos)).tag("pos")`` makes the parameter a tag for ``using``."""
    step = fl.nn.Param(tuple(value.shape), mode="value")
    step.value = value
    return step
'''


HELD_HELPER = '''
class Held(nn.Module):
    """A buffer the original's forward reads directly (a mask, an index table), as a step that
    returns it, the stream ignored; shared, not copied, and saved only if the original saves it:
    ``.fork(Held(m.attn, "index")).tag("index")`` makes it a tag for ``using``."""

    def __init__(self, owner: nn.Module, name: str):
        super().__init__()
        saved = name not in owner._non_persistent_buffers_set
        self.register_buffer("value", owner.get_buffer(name), persistent=saved)

    def forward(self, x):
        return self.value
'''


NO_GRAD_HELPER = '''
class NoGrad(nn.Module):
    """A step the original's forward ran under ``torch.no_grad()`` (a teacher, a target), run
    in that mode: what it makes carries no autograd history, as the original's does not."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def forward(self, *args, **kwargs):
        with torch.no_grad():
            return self.step(*args, **kwargs)
'''


STORE_HELPER = '''
class Store(nn.Module):
    """What the original's forward leaves on a module (``self.last_attn = attn``, an auxiliary
    loss): a step writing the stream into ``owner``'s attribute ``name`` each time the graph
    runs, so a caller reads it there as from the original; ``Store(m, "last_loss", None)``
    writes that constant instead. Returns the stream."""

    def __init__(self, owner: nn.Module, name: str, *constant):
        super().__init__()
        self.owner = [owner]  # in a list: not a submodule (the graph does not own it)
        self.attribute = name
        self.constant = constant

    def forward(self, x, *value):
        """``x``, or the one tagged value passed instead (``.fork(Store(m,
        "loss")).using("loss")``)."""
        shown = value[0] if value else x
        setattr(self.owner[0], self.attribute, self.constant[0] if self.constant else shown)
        return shown
'''


ATTR_HELPER = '''
class Attr(nn.Module):
    """A tensor the original's forward reads from a plain attribute (``self.pe``, neither a
    parameter nor a buffer), as a step that returns it, the stream ignored: read from the
    module at each call, as the original reads it (the graph neither holds nor saves it):
    ``.fork(Attr(m.pos, "pe")).tag("pe")`` makes it a tag for ``using``."""

    def __init__(self, owner: nn.Module, name: str):
        super().__init__()
        self.owner = [owner]  # in a list: not a submodule (the graph does not own it)
        self.attribute = name

    def forward(self, x):
        return getattr(self.owner[0], self.attribute)
'''


@dataclass
class Step:
    """How one traced operation is written: ``code`` is a builder step; ``using`` wires refs."""

    code: str  # an expression: m.conv1, nn.ReLU(), fl.nn.Select(0), a function's name
    is_function: bool = False
    refs: Sequence[tuple[str | None, Any]] = field(default_factory=list)  # (keyword, value)
    random: bool = False
    what: str = ""  # the original, for the report


@dataclass
class Op:
    node: fx.Node
    inputs: list[fx.Node]  # the tensor values it reads, in order of first appearance
    module: nn.Module | None = None


def _tensor_inputs(node: fx.Node, kinds: dict[Any, str], shapes: bool = True) -> list[fx.Node]:
    """The values ``node`` reads, through the expressions folded into it and (``shapes``)
    through the shapes, devices and other metadata it uses; without ``shapes``, only those it
    reads as tensors, which autograd sends gradients to."""
    seen: list[fx.Node] = []

    def visit(n: fx.Node) -> None:
        kind = kinds.get(n)
        if kind == "meta" and n.op != "placeholder" and not shapes:
            return
        if kind in ("meta", "inline") and n.op != "placeholder":
            for inner in n.all_input_nodes:
                visit(inner)
        elif n not in seen:
            seen.append(n)

    for n in node.all_input_nodes:
        visit(n)
    return seen


# ---------------------------------------------------------------------------------- search
@dataclass(frozen=True)
class Frag:
    text: str
    value: fx.Node | None  # the value current after this call (a fork's branch for .fork)
    ops: tuple[fx.Node, ...] = ()  # the traced operations this call runs, in the order it does


@dataclass
class State:
    stream: fx.Node
    done: frozenset[fx.Node]
    frags: tuple[Frag, ...]
    tagged: frozenset[fx.Node]


@dataclass
class Translation:
    """The builder chain and the definitions it needs (all Python source)."""

    chain: list[str]  # builder calls after the entry: ".through(m.conv1)", ...
    entry: str  # "fl.FlowBuilder(m.conv1)" or "fl.FlowBuilder()"
    functions: list[str]  # module-level function definitions
    needs_call: bool
    needs_shared: bool
    needs_held: bool
    imports: set[str]
    steps: list[dict[str, str]]  # what each traced operation became, for the report
    inputs: list[tuple[str, Any]]  # auxiliary graph inputs: (name, default or NO_DEFAULT)
    order_note: str = ""  # why gradients might differ in the last bits on other inputs
    strict: bool = False  # every operation a step of its own, in the original's order
    needs_guard: bool = False  # a shape test the forward branched on is checked
    checks: list[tuple[str, bool]] = field(default_factory=list)  # (test, its value) each
    needs_attr: bool = False  # a plain tensor attribute is read (ATTR_HELPER)
    needs_store: bool = False  # the forward leaves a value on a module (STORE_HELPER)
    needs_no_grad: bool = False  # a step runs under torch.no_grad() (NO_GRAD_HELPER)


NO_DEFAULT = object()


class Translator:
    def __init__(
        self,
        gm: fx.GraphModule,
        root: nn.Module,
        kinds: dict[Any, str],
        output_names: list[str | None] | None = None,
        fold: bool = True,
    ):
        """``fold``: write a plain expression read only by another as part of that one's function
        (``torch.exp(0.5 * logvar)``); without, every operation is a step of its own, run where
        the original runs it."""
        self.gm = gm
        self.root = root
        self.kinds = kinds
        self.imports: set[str] = set()
        self.functions: dict[str, str] = {}  # name -> source
        self.function_names: dict[str, str] = {}  # body -> name
        self.mode_functions: set[str] = set()  # functions taking the graph's mode: training=
        self.checks: list[tuple[str, bool]] = []  # shape tests decided for the example
        self.needs_call = False
        self.needs_shared = False
        self.needs_held = False
        self.report: dict[fx.Node, dict[str, str]] = {}
        self.budget = SEARCH_BUDGET
        self.allow_detached = False
        self.ordered = False  # the search keeps the original's order of operations
        self.laid_in_order = False  # the layout found was searched in that order
        nodes = list(gm.graph.nodes)
        self.placeholders = [n for n in nodes if n.op == "placeholder"]
        outputs = [n for n in nodes if n.op == "output"]
        self.output = outputs[0].args[0]
        self.params: list[fx.Node] = []  # tensors read directly: self.pos, self.mask
        self.buffers: set[fx.Node] = set()  # those of them that are buffers
        self.attributes: set[fx.Node] = set()  # those that are plain tensor attributes
        self.needs_attr = False
        kinds = dict(kinds)
        for n in nodes:
            if is_constant(n):  # written where it is read (the tracer kept bigger ones whole)
                kinds[n] = "inline"
            elif n.op == "get_attr" and kinds.get(n) != "meta":
                try:
                    root.get_parameter(str(n.target))
                except AttributeError:
                    try:
                        root.get_buffer(str(n.target))
                        self.buffers.add(n)
                    except AttributeError:
                        if not _plain_tensor(root, str(n.target)):
                            raise UnsupportedError(
                                f"the forward reads self.{n.target}, a tensor that is neither a "
                                "parameter, a buffer nor a tensor attribute"
                            ) from None
                        self.attributes.add(n)
                self.params.append(n)
        for n in nodes:  # what runs in one mode only: a tensor the other has a value for
            one_mode = TRAINING_ONLY in n.meta or EVAL_ONLY in n.meta
            if not one_mode or n.op == "get_attr":  # a read: harmless in either mode
                continue
            if kinds.get(n) not in ("tensor", "meta"):
                raise ModeUnsupportedError(f"{n.name} runs in one mode only and is not a tensor", n)
            if kinds.get(n) == "tensor" and not isinstance(_other_mode_value(n), fx.Node):
                raise ModeUnsupportedError(
                    f"{n.name} runs in one mode only; the other has no value", n
                )
        self.ops: list[Op] = []
        self.op_of: dict[fx.Node, Op] = {}
        kinds = self.kinds = _mark_inline(nodes, kinds) if fold else dict(kinds)
        self.folded = any(kinds.get(n) == "inline" for n in nodes)
        for n in nodes:
            if n.op in ("call_module", "call_function", "call_method") and kinds.get(n) not in (
                "meta",
                "inline",
            ):
                op = Op(n, _tensor_inputs(n, kinds))
                if n.op == "call_module":
                    op.module = root.get_submodule(str(n.target))
                if not op.inputs:
                    raise UnsupportedError(
                        f"{n.name} creates a value from no input ({n.format_node()})"
                    )
                self.ops.append(op)
                self.op_of[n] = op
        self.users: dict[fx.Node, list[Op]] = {}
        for op in self.ops:
            for v in op.inputs:
                self.users.setdefault(v, []).append(op)
        # the operations each value reaches autograd through (not through its shape), in the
        # original's order
        self.grad_readers: dict[fx.Node, list[fx.Node]] = {}
        for op in self.ops:
            for v in _tensor_inputs(op.node, kinds, shapes=False):
                if kinds.get(v) == "tensor":  # a tuple's parts are tensors of their own
                    self.grad_readers.setdefault(v, []).append(op.node)
        # what the forward returns: a value (the stream), a tuple of values (``.output``), or
        # another structure of values and constants (``return logits, None``, a dict, a list),
        # which a last step builds from them (:meth:`returned_step`)
        self.returned: Any = None
        out = self.output
        if isinstance(out, fx.Node):
            self.outputs, self.multi = [out], False
        elif (
            type(out) is tuple
            and all(isinstance(v, fx.Node) for v in out)
            and len(set(out)) == len(out)
        ):
            self.outputs, self.multi = list(out), True
        else:
            found: list[fx.Node] = []
            fx.node.map_arg(out, found.append)
            try:
                _structure_source(out, dict.fromkeys(found, ""))  # (only whether it can be)
            except UnsupportedError:
                found = []
            if not found:
                raise UnsupportedError(
                    "the forward returns a structure other than values in tuples, lists and "
                    "dicts with constants"
                )
            self.returned = out
            self.outputs = list(dict.fromkeys(found))
            self.multi = len(self.outputs) > 1
        if not self.placeholders or self.kinds.get(self.placeholders[0]) == "meta":
            raise UnsupportedError("the forward's first argument is not a tensor")
        from flodl.graph.codegen import RESERVED_NAMES  # fdl imports flodl only when it runs

        for p in self.placeholders[1:]:
            if p.name in RESERVED_NAMES or p.name.startswith("_"):
                raise UnsupportedError(
                    f"the forward's argument name {p.name!r} cannot be a graph input"
                )
            if self.kinds.get(p) == "meta" and self.users.get(p):
                raise UnsupportedError(f"the forward's argument {p.name} is not a tensor")
        for p in self.placeholders:
            if p in self.outputs:
                raise UnsupportedError("the forward returns one of its inputs")
        # tags of returned values: the names the forward's return statement gives them
        taken = {n.name for n in nodes}
        self.names: dict[Any, str] = {}
        if output_names and len(output_names) == len(self.outputs):
            for value, name in zip(self.outputs, output_names, strict=True):
                if name and name not in taken and name not in self.names.values():
                    self.names[value] = name

    # ------------------------------------------------------------------ steps
    def tag_name(self, value: fx.Node) -> str:
        name = self.names.get(value)
        if name is None:
            name = value.name
            if value.op != "placeholder":  # an input keeps the forward's argument name
                # fx names values like flodl names nodes (add_16): a tag spelt as another
                # node's id is refused, so a tag from fx never ends in _<number>
                base = name = re.sub(r"_+(\d+)$", r"\1", name)
                used = set(self.names.values()) | {p.name for p in self.placeholders}
                i = 1
                while name in used:
                    i += 1
                    name = f"{base}v{i}"
            self.names[value] = name
        return name

    def function(self, node: fx.Node, params: list[tuple[fx.Node, str]]) -> str:
        """A module-level function computing ``node`` from ``params``; returns its name."""
        names = dict(params)
        expr = Expr(names, self.kinds, self.imports)
        expr.checks = self.checks
        if node.target is assign:
            base, body = "assign", _assignment(node, expr, set(names.values()))
        else:
            value = unwrap(expr.call(node))
            callee = value.removesuffix(f"({params[0][1]})")
            if len(params) == 1 and callee in imported_names(self.imports):
                return callee  # an imported function applied to the stream is the step itself
            base, body = _base_name(node), f"return {value}"
        if not expr.reads_training:
            return self._named_function(base, body, params)
        # the original passed its self.training: fl.nn.Fn(f, pass_training=True) passes the mode
        name = self._named_function(base, body, params, keywords="training")
        self.mode_functions.add(name)
        return name

    def function_step(self, name: str) -> str:
        """The builder step running the function ``name``: the function itself, or the ``Fn``
        passing it the graph's mode."""
        if name in self.mode_functions:
            return f"fl.nn.Fn({name}, pass_training=True)"
        return name

    def _named_function(
        self, base: str, body: str, params: list[tuple[fx.Node, str]], keywords: str = ""
    ) -> str:
        """The name of the module-level function ``def <base>(<params>, *, <keywords>):
        <body>``, written once for every step computing the same thing."""
        signature = ", ".join([n for _, n in params] + ([f"*, {keywords}"] if keywords else []))
        key = f"({signature}): {body}"
        if key in self.function_names:
            return self.function_names[key]
        # never a keyword, nor a builtin a body may call (``def float(x)`` would be called by
        # another body's ``float('-inf')``)
        base = f"{base}_" if keyword.iskeyword(base) or hasattr(builtins, base) else base
        name, i = base, 1
        imported = imported_names(self.imports)
        while name in self.functions or name in TAKEN or name in imported:
            i += 1
            name = f"{base}_{i}"
        self.functions[name] = f"def {name}({signature}):\n    {body}\n"
        self.function_names[key] = name
        return name

    def step(self, op: Op, stream: fx.Node) -> Step:
        """How ``op`` is written when ``stream`` is the current value (run under
        ``torch.no_grad()`` where the original ran it so)."""
        return self.in_mode(op, self._step(op, stream))

    def in_mode(self, op: Op, step: Step) -> Step:
        """``step``, wrapped to run under ``torch.no_grad()`` when the original ran ``op`` so
        (``NoGrad(m.teacher)``): not a pick from a tuple, nor a store, which no mode changes."""
        node = op.node
        if not node.meta.get(NO_GRAD) or node.target is stored:
            return step
        if node.target is operator.getitem and self.kinds.get(node.args[0]) == "tuple":
            return step
        return replace(step, code=f"NoGrad({step.code})", is_function=False)

    def _step(self, op: Op, stream: fx.Node) -> Step:
        node = op.node
        random = _random_expression(node, self.kinds)
        if node.op == "call_module":
            return self.module_step(op, stream)
        if node.target is operator.getitem and self.kinds.get(node.args[0]) == "tuple":
            if node.args[0] is not stream or isinstance(node.args[1], fx.Node):
                raise UnsupportedError(OFF_STREAM)
            return Step(f"fl.nn.Select({literal(node.args[1])})", what=f"[{node.args[1]!r}]")
        if node.target is stored:  # ``self.last_attn = attn``: the stream, written
            value, owner, name, *constant = node.args
            if value is not stream:
                raise UnsupportedError(NOT_ON_STREAM)
            holder = module_expr(str(owner)) if owner else "m"
            fixed = "".join(f", {literal(c)}" for c in constant)
            return Step(f"Store({holder}, {name!r}{fixed})", what=f"self.{name} =")
        by_mode = TRAINING_ONLY in node.meta or EVAL_ONLY in node.meta
        if op.inputs == [stream] and not node.meta.get(TRAINING_ARGS) and not by_mode:
            module = torch_module(node)
            if module is not None:
                return Step(module, random=random, what=_describe(node))
        if stream not in op.inputs:
            raise UnsupportedError(NOT_ON_STREAM)
        extras = [v for v in op.inputs if v is not stream]
        stream_name = "x" if all(self.tag_name(v) != "x" for v in extras) else "stream"
        params = [(stream, stream_name)] + [(v, self.tag_name(v)) for v in extras]
        name = self.function(node, params)
        code = self.function_step(name)
        return Step(code, code == name, [(None, v) for v in extras], random, _describe(node))

    def held(self, value: fx.Node) -> str:
        """The step making a parameter or buffer the forward reads directly a value."""
        path = str(value.target)
        owner, _, name = path.rpartition(".")
        if value in self.attributes:
            self.needs_attr = True
            return f"Attr({module_expr(owner) if owner else 'm'}, {name!r})"
        if value not in self.buffers:
            self.needs_shared = True
            return f"shared({module_expr(path)})"
        self.needs_held = True
        return f"Held({module_expr(owner) if owner else 'm'}, {name!r})"

    def obstacle(self) -> str:
        """``: <the first operation no layout can write, and why>`` ('' when every operation
        could be written on some stream, and only their arrangement failed)."""
        for op in self.ops:
            reason = ""
            for stream in op.inputs:
                try:
                    self.step(op, stream)
                    break
                except UnsupportedError as exc:
                    reason = str(exc)
            else:
                if reason not in LAYOUT_REASONS:
                    if op.node.op == "call_module":  # the reason names self.<module>
                        return f": {reason}"
                    return f": {op.node.name} ({_describe(op.node)}): {reason}"
        return ""

    def module_step(self, op: Op, stream: fx.Node) -> Step:
        node, module = op.node, op.module
        assert module is not None
        path = module_expr(str(node.target))
        random = not _all_deterministic(module)
        what = f"self.{node.target}"
        args, kwargs = node.args, dict(node.kwargs)
        passed = [a for a in (*args, *kwargs.values()) if isinstance(a, fx.Node)]
        if all(self.kinds.get(a) == "meta" for a in passed):
            raise UnsupportedError(f"{what} is called with no tensor, only values read off shapes")
        by_position = bool(args) and args[0] is stream
        if stream is DETACHED:
            if not self.ordered:
                raise UnsupportedError(NOT_ON_STREAM)
        elif (
            not by_position
            and all(v is not stream for v in kwargs.values())
            # the stream as another argument, by name: only where the original's order needs it
            and (not self.ordered or stream not in args)
        ):
            raise UnsupportedError(NOT_FIRST)
        nodes_elsewhere = [a for a in args if isinstance(a, fx.Node) and a is not stream]
        nodes_elsewhere += [v for v in kwargs.values() if isinstance(v, fx.Node)]
        if any(self.kinds.get(v) == "meta" for v in nodes_elsewhere):
            raise UnsupportedError(f"{what} is called with a value computed from a tensor's shape")
        simple = (
            by_position
            and all(isinstance(a, fx.Node) and a is not stream for a in args[1:])
            and all(isinstance(v, fx.Node) and v is not stream for v in kwargs.values())
        )
        try:
            signature = inspect.signature(module.forward)
            params = list(signature.parameters.values())
            bound = signature.bind(*args, **kwargs).arguments
        except (TypeError, ValueError):
            if simple and not kwargs and by_position:
                return Step(path, refs=[(None, a) for a in args[1:]], random=random, what=what)
            raise UnsupportedError(
                f"{what} is called in a way its signature does not show"
            ) from None
        if any(p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY) for p in params):
            if simple and not kwargs and by_position:
                return Step(path, refs=[(None, a) for a in args[1:]], random=random, what=what)
            raise UnsupportedError(f"{what} takes *args or positional-only arguments")
        bound = _explicit_arguments(bound, signature)
        first = params[0].name
        stream_as = [k for k, v in bound.items() if v is stream]
        refs = [(k, v) for k, v in bound.items() if isinstance(v, fx.Node) and v is not stream]
        consts = {k: v for k, v in bound.items() if not isinstance(v, fx.Node)}
        if stream_as == [first] and not consts:
            return Step(path, refs=refs, random=random, what=what)
        self.needs_call = True
        extra = "".join(f", {k}={literal(v)}" for k, v in consts.items())
        names = ", ".join(repr(k) for k in stream_as) + ("," if len(stream_as) == 1 else "")
        return Step(f"Call({path}, stream_as=({names}){extra})", refs=refs, random=random,
                    what=what)  # fmt: skip

    def chain_step(self, ops: list[Op], start: fx.Node) -> tuple[str, bool]:
        """One step for a chain of single-input operations: the step, or ``nn.Sequential``."""
        steps, value, random = [], start, False
        for op in ops:
            s = self.step(op, value)
            if s.refs:
                raise UnsupportedError("a chained step needs refs")
            self.note(op, s)
            steps.append(s)
            random = random or s.random
            value = op.node
        if len(steps) == 1:
            return steps[0].code, random
        parts = [f"fl.nn.Fn({s.code})" if s.is_function else s.code for s in steps]
        return f"nn.Sequential({', '.join(parts)})", random

    def note(self, op: Op, step: Step) -> None:
        self.report[op.node] = {"original": step.what, "as": step.code}

    # ------------------------------------------------------------------ layout search
    def remaining_users(self, value: fx.Node, done: frozenset[fx.Node]) -> list[Op]:
        return [op for op in self.users.get(value, []) if op.node not in done]

    def ready(self, op: Op, state: State) -> bool:
        return all(v is state.stream or v in state.done for v in op.inputs) and (
            state.stream in op.inputs
        )

    def try_step(self, op: Op, state: State) -> Step | None:
        try:
            return self.step(op, state.stream)
        except UnsupportedError:
            return None

    def single_input_chain(
        self, end: fx.Node, start: fx.Node, join: Op, done: frozenset
    ) -> list[Op] | None:
        """The operations from ``start`` to ``end`` (read only by ``join``), each reading only
        the previous value."""
        ops: list[Op] = []
        value = end
        while value is not start:
            op = self.op_of.get(value)
            if op is None or op.node in done or len(op.inputs) != 1:
                return None
            if self.remaining_users(value, done) != [ops[0] if ops else join]:
                return None
            if value in self.outputs:
                return None
            ops.insert(0, op)
            value = op.inputs[0]
        return ops

    def forward_chain(self, first: Op, done: frozenset) -> list[Op]:
        """``first`` and the single-input operations that follow it alone (a fork's branch)."""
        ops = [first]
        while True:
            value = ops[-1].node
            users = self.remaining_users(value, done)
            if len(users) != 1 or value in self.outputs:
                return ops
            nxt = users[0]
            if nxt.inputs != [value] or (
                nxt.node.op == "call_module" and nxt.node.args[0] is not value
            ):
                return ops
            ops.append(nxt)

    def diamond(self, state: State) -> State | None:
        """Branches from the stream rejoined by ``+`` (also / also_with) or ``cat`` (split)."""
        stream, done = state.stream, state.done
        pending = self.remaining_users(stream, done)
        for join in self.ops:
            node = join.node
            if node in done:
                continue
            kind = _join_kind(node)
            if kind is None:
                continue
            operands: Sequence[Any] = node.args[0] if kind == "cat" else node.args[:2]  # type: ignore[assignment]  # cat's first argument is its list of tensors
            branches = []
            for v in operands:
                chain = self.single_input_chain(v, stream, join, done) if v is not stream else []
                if chain is None:
                    break
                branches.append(chain)
            else:
                firsts = {b[0].node for b in branches if b}
                if any(b == [] for b in branches):
                    firsts.add(node)
                if {op.node for op in pending} != firsts or len(branches) < 2:
                    continue
                if kind == "add" and all(b == [] for b in branches):
                    continue
                try:
                    laid = self.lay_diamond(kind, node, branches, stream)
                except UnsupportedError:
                    continue
                if laid is None:
                    continue
                new, order = laid
                ran = (*(op.node for b in order for op in b), node)
                return replace(
                    state,
                    stream=node,
                    done=done | set(ran),
                    frags=(*state.frags, Frag(new, node, ran)),
                )
        return None

    def lay_diamond(
        self, kind: str, join: fx.Node, branches: list[list[Op]], start: fx.Node
    ) -> tuple[str, list[list[Op]]] | None:
        """The builder call for branches rejoined at ``join``, and the branches in the order
        the graph runs them."""
        made = [self.chain_step(b, start) if b else ("nn.Identity()", False) for b in branches]
        random = any(r for _, r in made)
        if kind == "add":
            self.report[join] = {"original": "+", "as": "residual add"}
            if branches[0] == [] or branches[1] == []:
                inner = made[1][0] if branches[0] == [] else made[0][0]
                self.report[join]["as"] = "also"
                return f".also({inner})", branches
            a, b = made
            # also_with runs skip first: with randomness keep the original's order; else the
            # shorter branch is the skip path (a + b and b + a are the same floats)
            first_is_a = _position(branches[0][0].node) < _position(branches[1][0].node)
            if random or len(branches[0]) == len(branches[1]):
                a_first = first_is_a
            else:
                a_first = len(branches[0]) < len(branches[1])
            order = [a, b] if a_first else [b, a]
            self.report[join]["as"] = "also_with"
            ran = branches if a_first else branches[::-1]
            return f".also_with({order[0][0]}, {order[1][0]})", ran
        if random and _fx_index(branches) != sorted(_fx_index(branches)):
            return None  # the graph would draw random numbers in another order
        dim = join.kwargs.get("dim", join.args[1] if len(join.args) > 1 else 0)
        if isinstance(dim, fx.Node):
            return None
        self.report[join] = {"original": "torch.cat", "as": f"merge(fl.MergeOp.CAT({dim}))"}
        return f".split({', '.join(m for m, _ in made)}).merge(fl.MergeOp.CAT({dim}))", branches

    def search(self, state: State) -> State | None:
        self.budget -= 1
        if self.budget < 0:
            raise UnsupportedError(OVER_BUDGET)
        if all(op.node in state.done for op in self.ops):
            return self.finish(state)
        new = self.diamond(state)
        if new is not None and self.in_order(new.frags[-1].ops, state.done):
            found = self.search(new)
            if found is not None:
                return found
        pending = self.remaining_users(state.stream, state.done)
        candidates = [op for op in pending if self.ready(op, state)]
        if self.ordered:  # only the next operation of the original's order can run
            candidates = [op for op in candidates if self.in_order([op.node], state.done)]
        options: list[tuple[str, Op]] = []
        if len(pending) > 1 or state.stream in self.outputs:
            options += [("fork", op) for op in candidates]
        # in the original's order, the stream follows each operation: the later readers of a
        # value it leaves are tagged anyway, and forks would make the next steps read tags
        through = [("through", op) for op in candidates]
        options = through + options if self.ordered else options + through
        if self.ordered:  # the next operation in the original's order, reading only tags
            options += [(how, op) for op in self.detached(state)[:1] for how in DETACHED_HOWS]
        elif self.allow_detached:
            options += [("detached", op) for op in self.detached(state)[:1]]
        for how, op in options:
            new = self.advance(how, op, state)
            if new is None or not self.in_order(new.frags[-1].ops, state.done):
                continue
            found = self.search(new)
            if found is not None:
                return found
        return None

    def using(self, refs: Sequence[tuple[str | None, Any]]) -> str:
        if not refs:
            return ""
        parts = [f"{k}={self.tag_name(v)!r}" if k else repr(self.tag_name(v)) for k, v in refs]
        return f".using({', '.join(parts)})"

    def detached(self, state: State) -> list[Op]:
        """Expressions that read only tagged values, not the stream (a table built from a
        weight's device, an element of a tagged tuple): each can be a fork of its own, tried
        when no layout continuing the stream exists (the first in the original's order only:
        the others are tried after it, and trying each first would multiply the search).

        In an ordered search, the next operation of the original's order is one too, whatever
        it reads (a module called with tags, or the stream passed as a tag), as a fork or as the
        step that continues the stream: some layout in the original's order always exists."""
        if self.ordered:
            nxt = next(op for op in self.ops if op.node not in state.done)
            return [nxt] if all(v in state.done for v in nxt.inputs) else []
        return [
            op
            for op in self.ops
            if op.node not in state.done
            and op.node.op in ("call_function", "call_method")
            and state.stream not in op.inputs
            and all(v in state.done for v in op.inputs)
            and not _random_expression(op.node, self.kinds)
        ]

    def in_order(self, ran: Sequence[fx.Node], done: frozenset[fx.Node]) -> bool:
        """Whether running ``ran`` after ``done`` keeps the original's order of operations;
        always true outside an ordered search. In that order autograd numbers the operations
        as the original does, so its backward runs them, and sums each gradient, in the same
        order: exact where any other order may differ in the last bits."""
        if not self.ordered:
            return True
        k = 0
        while k < len(self.ops) and self.ops[k].node in done:
            k += 1
        return [op.node for op in self.ops[k : k + len(ran)]] == list(ran)

    def detached_step(self, op: Op) -> tuple[str, Sequence[tuple[str | None, Any]]]:
        """``op`` as a step that ignores the stream and reads its inputs as tags."""
        if op.module is not None:
            step = self.in_mode(op, self.module_step(op, DETACHED))  # type: ignore[arg-type]
            self.note(op, step)
            return step.code, step.refs
        if op.node.target is stored:  # .fork(Store(m, "last_loss")).using("loss")
            step = self.step(op, op.node.args[0])  # type: ignore[arg-type]
            self.note(op, step)
            return step.code, [(None, op.node.args[0])]
        params = [(UNUSED_STREAM, "_"), *((v, self.tag_name(v)) for v in op.inputs)]
        name = self.function_step(self.function(op.node, params))  # type: ignore[arg-type]
        step = self.in_mode(op, Step(name, what=_describe(op.node)))
        self.report[op.node] = {"original": _describe(op.node), "as": step.code}
        return step.code, [(None, v) for v in op.inputs]

    def advance(self, how: str, op: Op, state: State) -> State | None:
        if how in DETACHED_HOWS:  # .fork(f).using(...): f ignores the stream, reads the tags
            try:
                code, refs = self.detached_step(op)
            except UnsupportedError:
                return None
            text = f".{'through' if how == 'detached_through' else 'fork'}({code})"
            text += self.using(refs)
            return replace(
                state,
                stream=op.node if how == "detached_through" else state.stream,
                done=state.done | {op.node},
                frags=(*state.frags, Frag(text, op.node, (op.node,))),
                tagged=state.tagged
                | {v for _, v in refs}
                | ({op.node} if how == "detached" else set()),
            )
        if how == "through":
            step = self.try_step(op, state)
            if step is None:
                return None
            self.note(op, step)
            text = f".through({step.code}){self.using(step.refs)}"
            tagged = state.tagged | {v for _, v in step.refs}
            return replace(
                state,
                stream=op.node,
                done=state.done | {op.node},
                frags=(*state.frags, Frag(text, op.node, (op.node,))),
                tagged=tagged,
            )
        chain = self.forward_chain(op, state.done)
        try:
            if len(chain) == 1:
                step = self.step(op, state.stream)
                self.note(op, step)
                code, refs = step.code, step.refs
            else:
                code, _ = self.chain_step(chain, state.stream)
                refs = []
        except UnsupportedError:
            return None
        end = chain[-1].node
        text = f".fork({code}){self.using(refs)}"
        return replace(
            state,
            done=state.done | {o.node for o in chain},
            frags=(*state.frags, Frag(text, end, tuple(o.node for o in chain))),
            tagged=state.tagged | {v for _, v in refs} | {end},
        )

    def finish(self, state: State) -> State | None:
        if not self.multi:
            return state if self.outputs[0] is state.stream else None
        return replace(state, tagged=state.tagged | set(self.outputs))

    def returned_step(self) -> str:
        """The last step, building what the forward returns from its values: the stream alone
        (``def returned(x): return (x, None)``), or the tagged values read by ``using``."""
        if not self.multi:
            names = {self.outputs[0]: "x"}
            params = ["x"]
        else:
            names = {v: self.tag_name(v) for v in self.outputs}
            stream = "x" if "x" not in names.values() else "stream"
            params = [stream, *names.values()]
        body = _structure_source(self.returned, names)
        self.functions["returned"] = f"def returned({', '.join(params)}):\n    return {body}\n"
        if not self.multi:
            return ".through(returned)"
        return f".through(returned).using({', '.join(repr(n) for n in names.values())})"

    def order_hazard(self, state: State) -> fx.Node | None:
        """A value three or more operations read, which the layout reads in another order than
        the original (None: there is none). Autograd sums the gradients a value receives in
        the order its readers were run, and floating-point sums of three or more terms depend
        on their order: the gradients could differ in the last bits."""
        ran = {node: i for i, node in enumerate(n for f in state.frags for n in f.ops)}
        for value, readers in self.grad_readers.items():
            if len(readers) >= 3 and sorted(readers, key=lambda n: ran.get(n, -1)) != readers:
                return value
        return None

    # ------------------------------------------------------------------ result
    def translate(self, ordered: bool = False) -> Translation:
        """The builder chain. A layout that reads some value in another order than the original
        (so gradients could differ in the last bits) is replaced by one in the original's order
        of operations where one exists; ``ordered`` asks for that order from the start."""
        start = self.placeholders[0]
        # each learned tensor is a fork at the start: fl.nn.Param holding it, tagged
        frags = tuple(Frag(f".fork({self.held(p)})", p) for p in self.params)
        state = State(
            start, frozenset(self.placeholders + self.params), frags, frozenset(self.params)
        )
        unwritable = self.obstacle()  # an operation no layout can write: no need to search
        if unwritable:
            raise UnsupportedError(
                "the data flow could not be laid out as builder calls" + unwritable
            )
        limit = sys.getrecursionlimit()  # the search recurses once per step of the chain
        sys.setrecursionlimit(max(limit, 4 * len(self.ops) + 1000))
        try:
            # detached forks only where no layout continuing the stream exists: they would
            # otherwise end a search early in a worse layout than backtracking finds
            self.allow_detached = False
            found = None
            if not ordered:
                with contextlib.suppress(UnsupportedError):
                    found = self.search(state)
            if found is None and not ordered:
                self.allow_detached, self.budget = True, SEARCH_BUDGET
                try:
                    found = self.search(state)
                except UnsupportedError:
                    found = None
            if found is None or self.order_hazard(found) is not None:
                # a layout in the original's order: modules and expressions may read tags
                # instead of the stream, and the stream may be passed by name
                self.ordered, self.budget = True, SEARCH_BUDGET
                report = dict(self.report)
                try:
                    kept = self.search(state)
                except UnsupportedError:
                    kept = None
                self.ordered = False
                self.laid_in_order = kept is not None
                if kept is None:
                    self.report = report  # what each operation became in the layout kept
                found = kept or found
        finally:
            sys.setrecursionlimit(limit)
        if found is None:
            raise UnsupportedError("the data flow could not be laid out as builder calls")
        aux = set(self.placeholders[1:])
        chain: list[str] = []
        for frag in found.frags:
            chain.append(frag.text)
            if (
                frag.value in found.tagged
                and frag.value not in aux
                and frag.value.target is not stored  # (what a store returns is never read)
            ):
                chain.append(f".tag({self.tag_name(frag.value)!r})")
        inputs = []
        for p in self.placeholders[1:]:
            default = p.args[0] if p.args else NO_DEFAULT
            inputs.append((p.name, default))
        entry = "fl.FlowBuilder()"
        if start in found.tagged:
            chain.insert(0, f".tag({self.tag_name(start)!r})")
        elif (
            chain
            and not inputs
            and chain[0].startswith(".through(")
            and (len(chain) == 1 or not chain[1].startswith(".using("))
        ):
            text = chain.pop(0)
            if ").using(" not in text:
                entry = f"fl.FlowBuilder({text[len('.through(') : -1]})"
            else:
                chain.insert(0, text)
        if inputs:
            names = ", ".join(repr(n) for n, _ in inputs)
            groups: dict[Any, list[str]] = {}
            for name, default in inputs:
                groups.setdefault(repr(default) if default is not NO_DEFAULT else "", []).append(
                    name
                )
            decl = []
            for default, group in groups.items():
                names = ", ".join(repr(n) for n in group)
                decl.append(
                    f".input({names}, default={default})" if default else f".input({names})"
                )
            chain = decl + chain
        if self.returned is not None:
            chain.append(self.returned_step())
        elif self.multi:
            chain.append(f".output({', '.join(repr(self.tag_name(v)) for v in self.outputs)})")
        steps = [
            {"node": n.name, **self.report[n]} for n in self.gm.graph.nodes if n in self.report
        ]
        # the search may have written functions for layouts it then abandoned: keep the used ones
        text = "\n".join([entry, *chain])
        used = {
            name: source
            for name, source in self.functions.items()
            if re.search(rf"(?<![\w\"'.]){re.escape(name)}(?![\w\"'])", text)
        }
        # ...and number the used ones of each name in the order the flow uses them, as if the
        # abandoned ones had never been written (add_41, add_8 -> add, add_2)
        text_order = "\n".join([entry, *chain])
        first_use = {}
        for name in used:
            found_at = re.search(rf"(?<![\w\"'.]){re.escape(name)}(?![\w\"'])", text_order)
            first_use[name] = found_at.start() if found_at else 0
        used = {name: used[name] for name in sorted(used, key=first_use.__getitem__)}
        by_base: dict[str, list[str]] = {}
        for name in used:
            by_base.setdefault(re.sub(r"_\d+$", "", name), []).append(name)
        blocked = TAKEN | imported_names(self.imports)
        renamed: dict[str, str] = {}
        for base, group in by_base.items():
            free = (f"{base}_{i}" if i > 1 else base for i in range(1, 10**6))
            for name in group:
                renamed[name] = next(n for n in free if n not in blocked)
        if any(old != new for old, new in renamed.items()):
            word = re.compile(rf"(?<![\w\"'.])({'|'.join(map(re.escape, renamed))})(?![\w\"'])")

            def rename(text: str) -> str:
                return word.sub(lambda match: renamed[match.group(1)], text)

            used = {renamed[n]: rename(src) for n, src in used.items()}
            chain = [rename(c) for c in chain]
            entry = rename(entry)
            steps = [{**step, "as": rename(step["as"])} for step in steps]
        code = "\n".join([entry, *chain, *used.values()])
        imports = {
            line
            for line in self.imports
            if not line.startswith("from ")
            or re.search(rf"(?<![\w\"'.]){re.escape(line.rsplit(' ', 1)[1])}(?![\w\"'])", code)
        }
        return Translation(
            chain=chain,
            entry=entry,
            functions=list(used.values()),
            needs_call="Call(" in text,
            needs_shared=self.needs_shared,
            needs_held=self.needs_held,
            needs_attr=self.needs_attr,
            needs_store=re.search(r"(?<![\w.])Store\(", code) is not None,
            needs_no_grad=re.search(r"(?<![\w.])NoGrad\(", code) is not None,
            needs_guard="shape_checked(" in code,
            checks=list(dict.fromkeys(c for c in self.checks if f"{c[0]!r}" in code)),
            imports=imports,
            steps=steps,
            inputs=inputs,
            order_note=self.order_note(found),
            strict=(ordered or self.laid_in_order) and not self.folded,
        )

    def order_note(self, found: State) -> str:
        value = self.order_hazard(found)
        if value is None:
            return ""
        if value.op == "placeholder":
            what = "the input" if value is self.placeholders[0] else f"the input {value.name}"
        else:
            what = f"the output of {self.report.get(value, {}).get('original', value.name)}"
        n = len(self.grad_readers[value])
        return (
            f"{what} is read by {n} operations, which the port runs in another order than the "
            "original: autograd sums the terms of its gradient in that order, so gradients can "
            "differ in the last bits"
        )


DETACHED_HOWS = ("detached_through", "detached")
INFIX_NAMES = {"add": "add", "iadd": "add", "truediv": "div", "getitem": "index"}
TAKEN = {"build", "from_torch", "flow", "Call", "shared", "Held", "Attr", "Store", "NoGrad",
         "shape_checked",
         "settings_checked", "shown_setting", "SETTINGS", "torch", "nn", "F", "fl", "math",
         "operator", "m", "x", "module"}  # fmt: skip


def _plain_tensor(root: nn.Module, path: str) -> bool:
    """``path`` names a tensor held as a plain attribute of a module of ``root``."""
    owner, _, name = path.rpartition(".")
    try:
        module = root.get_submodule(owner) if owner else root
    except AttributeError:
        return False
    return isinstance(vars(module).get(name), torch.Tensor)


def _explicit_arguments(bound: dict[str, Any], signature: inspect.Signature) -> dict[str, Any]:
    """A call's arguments by name, ``**kwargs`` spread out, and without the constants that only
    repeat a parameter's default (fx records ``attention_mask=None`` the caller passed or the
    forward forwarded): ``model(input_ids)`` rather than ``model(input_ids, mask=None, ...)``."""
    explicit: dict[str, Any] = {}
    for name, value in bound.items():
        param = signature.parameters[name]
        if param.kind is param.VAR_KEYWORD:
            explicit.update(value)
        elif not _is_default(value, param.default):
            explicit[name] = value
    return explicit


def _is_default(value: Any, default: Any) -> bool:
    if isinstance(value, fx.Node) or default is inspect.Parameter.empty:
        return False
    if value is default:
        return True
    return (
        type(value) is type(default)
        and isinstance(value, bool | int | float | str | tuple)
        and value == default
    )


def _plain_function(node: fx.Node, kinds: dict[Any, str]) -> bool:
    """A tensor expression written as a function of its own (no module stands for it)."""
    return (
        node.op in ("call_function", "call_method")
        and kinds.get(node) == "tensor"
        and node.target is not stored  # a step writing into the model (Store)
        and not (node.target is operator.getitem and kinds.get(node.args[0]) == "tuple")
        and torch_module(node) is None
    )


def _mark_inline(nodes: list[fx.Node], kinds: dict[Any, str]) -> dict[Any, str]:
    """Fold a plain expression read only by another plain expression into that one, so
    ``torch.exp(0.5 * logvar)`` is one function rather than two steps."""
    output = next(n for n in nodes if n.op == "output")
    kinds = dict(kinds)
    for node in nodes:
        users = list(node.users)
        if (
            len(users) == 1
            and users[0] is not output
            and node.target is not assign  # a statement: its own step, never an expression
            and bool(node.meta.get(NO_GRAD)) == bool(users[0].meta.get(NO_GRAD))  # one mode
            and _plain_function(node, kinds)
            and _plain_function(users[0], kinds)
        ):
            kinds[node] = "inline"
    return kinds


def _random_expression(node: fx.Node, kinds: dict[Any, str]) -> bool:
    if _target_name(node) in RANDOM_NAMES:
        return True
    return any(
        _random_expression(n, kinds)
        for n in node.all_input_nodes
        if kinds.get(n) in ("meta", "inline")
    )


def _describe(node: fx.Node) -> str:
    if node.op == "call_method":
        return f".{node.target}()"
    fn = node.target
    if fn in INFIX:
        return INFIX[fn]
    if fn is operator.getitem:
        return "[...]"
    if fn is assign:
        return "[...] ="
    try:
        return qualname(fn, set())
    except UnsupportedError:
        return str(getattr(fn, "__name__", fn))


def _all_deterministic(module: nn.Module) -> bool:
    """No dropout-like layer and no custom (opaque) code that might draw random numbers."""
    from fdl.port.trace import is_torch_module

    for m in module.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) or not is_torch_module(m):
            return False
    return True


def _join_kind(node: fx.Node) -> str | None:
    if (
        node.op == "call_function"
        and node.target in (operator.add, operator.iadd, torch.add)
        and len(node.args) == 2
        and not node.kwargs
        and all(isinstance(a, fx.Node) for a in node.args)
    ):
        return "add" if node.args[0] is not node.args[1] else None
    if node.op == "call_function" and node.target is torch.cat:
        items = node.args[0] if node.args else None
        if (
            isinstance(items, list | tuple)
            and len(items) >= 2
            and all(isinstance(a, fx.Node) for a in items)
            and len(set(items)) == len(items)
            and set(node.kwargs) <= {"dim"}
        ):
            return "cat"
    return None


def _position(node: fx.Node) -> int:
    for i, n in enumerate(node.graph.nodes):
        if n is node:
            return i
    return -1


def _fx_index(branches: list[list[Op]]) -> list[int]:
    return [_position(b[0].node) for b in branches if b]


def returned_names(forward: Any) -> list[str | None]:
    """The names in the forward's last ``return a, b, c`` (None where it is not a name)."""
    import ast
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(forward)))
    except (OSError, TypeError, SyntaxError):
        return []
    returns = [n for n in ast.walk(tree) if isinstance(n, ast.Return) and n.value is not None]
    if not returns or not isinstance(returns[-1].value, ast.Tuple):
        return []
    return [e.id if isinstance(e, ast.Name) else None for e in returns[-1].value.elts]


def value_kinds(gm: fx.GraphModule, args: tuple[Any, ...]) -> dict[Any, str]:
    """Run the traced graph once and note what each node holds: tensor, tuple or meta."""
    kinds: dict[Any, str] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            result = super().run_node(n)
            kinds[n] = _kind(result)
            return result

    with torch.no_grad():
        Recorder(gm).run(*args)
    return kinds


def _kind(value: Any) -> str:
    """``tensor``; ``tuple``: a structure holding tensors (a tuple or list, a dict, a dataclass
    such as transformers' ``ModelOutput``), whose parts later steps pick; ``meta``: anything else
    (shapes, flags), computed inline where it is used."""
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, Mapping):
        parts: Any = value.values()
    elif is_dataclass(value) and not isinstance(value, type):
        parts = [getattr(value, f.name) for f in fields(value)]
    elif isinstance(value, tuple | list):
        parts = value
    else:
        return "meta"
    if any(isinstance(v, torch.Tensor) or _kind(v) == "tuple" for v in parts):
        return "tuple"
    return "meta"
