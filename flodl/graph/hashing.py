"""``structural_hash``: a SHA-256 of a graph's architecture, stable across processes and builds.

It covers node ids and kinds, every module's type, hyper-parameters (``extra_repr``) and
parameter/buffer shapes (recursively), merge ops, loop kinds and counts, map modes, edges, refs,
tags, inputs with their default values, the output and the tags a multi-output graph returns
(``.output(...)``). Plain callables held by a module (a ``.through(lambda t: t * 2)``
step, a function stored as a public attribute) count by what they compute: qualified name plus
their code object's bytecode, constants (recursively, nested functions included), names,
default values and simple closure values, so ``lambda t: t * 2`` and ``lambda t: t * 3`` differ.
Bytecode is the same in every process of one Python minor version (hash seeds do not matter),
but changes between versions: a graph holding plain Python functions hashes differently under
another Python (builtins such as ``torch.relu`` and modules are unaffected). It leaves out
parameter values, dtype, device, labels and state.

A module whose ``extra_repr()`` is empty says nothing of its hyper-parameters there
(``nn.MultiheadAttention``'s ``num_heads``, a custom layer's ``self.scale``): it counts by its
public plain attributes instead (numbers, strings, booleans, None and tuples of them; not
``training``, nor ``inplace``, which changes no result). A module that keeps a counter in such an
attribute should say what defines it in ``extra_repr``. Files saved before these attributes were
hashed carry the hash without them (``structural_hash(graph, legacy=True)``), which loads accept.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import types
from typing import TYPE_CHECKING, Any

from torch import nn

if TYPE_CHECKING:
    from flodl.graph.graph import Graph

_SCALARS = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis))


def _value(value: Any, seen: frozenset[int] = frozenset()) -> str:
    """A process-independent text for a constant: no memory addresses, no set ordering."""
    if isinstance(value, _SCALARS):
        return repr(value)
    if id(value) in seen:  # a closure that holds itself, a list that contains itself
        return "<recursive>"
    seen = seen | {id(value)}
    if isinstance(value, types.CodeType):
        return _code(value, seen)
    if isinstance(value, tuple | list):
        return "(" + ",".join(_value(v, seen) for v in value) + ")"
    if isinstance(value, frozenset | set):  # iteration order varies with the hash seed
        return "{" + ",".join(sorted(_value(v, seen) for v in value)) + "}"
    if isinstance(value, dict):
        items = (f"{_value(k, seen)}:{_value(v, seen)}" for k, v in value.items())
        return "{" + ",".join(sorted(items)) + "}"
    if is_plain_callable(value):
        return callable_identity(value, seen)
    kind = type(value)
    return f"<{kind.__module__}.{kind.__qualname__}>"  # other objects: their type only


def _code(code: types.CodeType, seen: frozenset[int]) -> str:
    consts = ",".join(_value(c, seen) for c in code.co_consts)
    return f"code[{code.co_code.hex()}|{consts}|{','.join(code.co_names)}]"


def is_plain_callable(value: Any) -> bool:
    """A function, lambda, method, builtin or ``functools.partial`` (not a module or a class)."""
    return isinstance(
        value,
        types.FunctionType
        | types.MethodType
        | types.BuiltinFunctionType
        | types.BuiltinMethodType
        | functools.partial,
    )


def callable_identity(fn: Any, seen: frozenset[int] = frozenset()) -> str:
    """What a plain callable computes, as text stable across processes (same Python version).

    >>> from flodl.graph.hashing import callable_identity
    >>> callable_identity(lambda t: t * 2) != callable_identity(lambda t: t * 3)
    True
    """
    seen = seen | {id(fn)}
    if isinstance(fn, functools.partial):
        parts = (callable_identity(fn.func, seen), _value(fn.args, seen), _value(fn.keywords, seen))
        return "partial(" + "|".join(parts) + ")"
    owner = ""
    if inspect.ismethod(fn):
        owner = f"bound to {type(fn.__self__).__qualname__}|"
        fn = fn.__func__
    name = f"{getattr(fn, '__module__', None) or ''}.{getattr(fn, '__qualname__', '')}"
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return owner + name  # a builtin: its name says what it is
    seen = seen | {id(fn)}
    closure = [cell.cell_contents for cell in fn.__closure__ or () if _filled(cell)]
    return (
        f"{owner}{name}|{_code(code, seen)}|defaults={_value(fn.__defaults__, seen)}"
        f"|kwdefaults={_value(fn.__kwdefaults__, seen)}|closure={_value(closure, seen)}"
    )


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


# Attributes of a module that change no architecture: its mode, and whether it writes in place.
_NOT_ARCHITECTURE = frozenset({"training", "inplace"})


def _plain_setting(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_plain_setting(v) for v in value)
    return isinstance(value, _SCALARS)


def _module_fingerprint(
    module: nn.Module, out: list[str], prefix: str = "", *, legacy: bool = False
) -> None:
    from flodl.graph.graph import Graph

    kind = type(module)
    out.append(f"M{prefix}|{kind.__module__}.{kind.__qualname__}")
    if isinstance(module, Graph):
        out.append(
            f"G{structural_hash(module, legacy=True) if legacy else module.structural_hash()}"
        )
        return
    described = module.extra_repr()
    out.append(f"R{described}")
    if not described and not legacy:
        settings = [
            (k, v)
            for k, v in vars(module).items()
            if k[:1] != "_" and k not in _NOT_ARCHITECTURE and _plain_setting(v)
        ]
        out += [f"A{name}|{_value(value)}" for name, value in sorted(settings)]
    # Filtered before sorting (names are unique, so the order is the same): a module's instance
    # dict holds a dozen private entries, and this runs once per node of every build.
    plain = [(k, v) for k, v in vars(module).items() if k[:1] != "_" and is_plain_callable(v)]
    for name, value in sorted(plain):
        out.append(f"F{name}|{callable_identity(value)}")
    for name, shape in _own_tensors(module._parameters):
        out.append(f"P{name}|{shape}")
    for name, shape in _own_tensors(module._buffers):
        out.append(f"B{name}|{shape}")
    for name, child in module.named_children():
        _module_fingerprint(child, out, f"{prefix}.{name}", legacy=legacy)


def _own_tensors(tensors: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of a module's own parameters or buffers, sorted by name: what
    ``named_parameters(recurse=False)`` lists (no ``None``, a tensor registered twice once),
    without its generator machinery."""
    seen: set[int] = set()
    found = []
    for name, value in tensors.items():
        if value is not None and id(value) not in seen:
            seen.add(id(value))
            found.append((name, tuple(value.shape)))
    return sorted(found)


def structural_hash(graph: Graph, *, legacy: bool = False) -> str:
    """The hash :meth:`Graph.structural_hash` returns; ``legacy=True``: without the plain
    attributes of modules with an empty ``extra_repr`` (what files saved before carry)."""
    parts: list[str] = []
    for node in graph.nodes:
        options = sorted((k, repr(v)) for k, v in node.serialized_options().items())
        parts.append(f"N{node.id}|{node.kind}|{options}|{node.inputs}")
        for ref in node.refs:
            parts.append(f"r{ref.tag}|{ref.keyword}|{ref.source}")
            for member in ref.members or ():
                parts.append(f"m{member.tag}|{member.source}")
        module = graph.module_of(node.id)
        if module is not None:
            _module_fingerprint(module, parts, legacy=legacy)
    parts.append("TAGS")
    parts += [f"{tag}|{node_id}" for tag, node_id in sorted(graph.tag_map.items())]
    parts.append(f"INPUTS|{graph.inputs}|OUTPUT|{graph.output_node}")
    # Added only when present, so a graph without them keeps the hash its checkpoints carry.
    if graph.input_defaults:
        parts.append(f"DEFAULTS|{_value(graph.input_defaults)}")
    if graph.outputs:
        parts.append(f"OUTPUTS|{graph.outputs}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()
