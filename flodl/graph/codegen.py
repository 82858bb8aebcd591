"""Compile a graph description into straight-line Python source for ``forward``.

The source is generated once at build time and exec'd; a forward pass then costs what the
same model written by hand costs: one call per module, no dict-walking interpreter. The text is
kept (``graph.code``) and registered with :mod:`linecache`, so tracebacks show it.

No user string is pasted into the source as code. Tags, keywords and attribute names appear only
as string literals (:func:`literal`); the identifiers the source uses are node ids (made by the
builder from ``[a-z0-9_]``) and input names (validated by ``FlowBuilder.input``), and
:func:`identifier` re-checks each one, so a hostile name fails loudly instead of becoming code.
A keyword ref whose name is not an identifier (``using(**{"my-ref": "t"})``) is passed as
``**{'my-ref': value}``.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from flodl.graph.nodes import (
    GateOptions,
    InputOptions,
    LoopKind,
    LoopOptions,
    MergeOptions,
    Node,
    Ref,
    ScanOptions,
)
from flodl.graph.profile import UNTIMED_KINDS
from flodl.graph.scan import emit_scan, state_local
from flodl.nn.fn import Fn

INDENT = "    "
# Names the generated forward uses besides its own ``_``/``v_`` locals: an input named like one
# of them would shadow it (``input("range")`` would break every loop).
RESERVED_NAMES = frozenset({"self", "input", "range", "Exception", "isinstance", "tuple"})


@dataclass
class Generated:
    source: str
    # source line -> (node id, detail) for error notes
    lines: dict[int, tuple[str, str]] = field(default_factory=dict)


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.where: dict[int, tuple[str, str]] = {}

    def emit(self, text: str, depth: int, node: str | None = None, detail: str = "") -> None:
        self.lines.append(INDENT * depth + text)
        if node is not None:
            self.where[len(self.lines)] = (node, detail)


def literal(text: str) -> str:
    """``text`` as a Python string literal.

    ``str.__repr__`` is called on the value itself, so a ``str`` subclass cannot substitute its
    own ``__repr__`` and smuggle code in.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected a string, got {type(text).__name__}")
    return str.__repr__(text)


def is_identifier(text: object) -> bool:
    """A plain ASCII Python identifier that is not a keyword (safe to paste as a name)."""
    return (
        type(text) is str and text.isascii() and text.isidentifier() and not keyword.iskeyword(text)
    )


def identifier(text: str) -> str:
    """``text`` unchanged, after checking it can appear in the source as a name."""
    if not is_identifier(text):
        raise ValueError(f"refusing to generate code with the name {text!r}: not an identifier")
    return text


def keyword_arg(name: str, value: str) -> str:
    """``name=value`` for an identifier, else ``**{'name': value}`` (a ``**kwargs`` receiver)."""
    return f"{name}={value}" if is_identifier(name) else f"**{{{literal(name)}: {value}}}"


def has_named(module: Any) -> bool:
    return callable(getattr(module, "forward_named", None))


def generate(
    nodes: list[Node],
    modules: dict[str, nn.Module],
    output: str,
    tags: dict[str, str],
    inputs: list[str],
    profile: bool = False,
    defaults: frozenset[str] = frozenset(),
    outputs: list[str] | None = None,
    direct: frozenset[int] = frozenset(),
) -> Generated:
    """Source of ``def forward(self, input, <aux inputs>)`` for the described graph.

    ``profile=True`` generates the profiling variant: each node's statements are bracketed by
    clock reads (``_now`` synchronises CUDA). The plain variant has no timing code at all.
    ``defaults`` names the inputs that fall back to ``self._input_defaults[name]`` when not
    passed; ``outputs`` (node ids) makes ``forward`` return their values as a tuple.
    ``direct`` (the ``id()`` of each module to call directly) generates the direct-dispatch
    variant: those modules are called through their ``forward`` (an ``Fn`` through its
    function), skipping ``nn.Module.__call__``; the graph runs it only when
    :func:`flodl.graph.dispatch.direct_ok` says nothing can tell.
    """
    # Inputs exist from the start of the pass, so refs may read them before their node.
    for node in nodes:
        identifier(node.id)
    for name in inputs:
        identifier(name)
    var: dict[str, str] = {
        n.id: n.options.name for n in nodes if isinstance(n.options, InputOptions)
    }
    state_slots: dict[str, str] = {}  # forward-referenced tag -> local holding last call's value
    for node in nodes:
        for leaf in (leaf for ref in node.refs for leaf in ref.leaves()):
            if leaf.forward and leaf.tag not in state_slots:
                state_slots[leaf.tag] = f"_s{len(state_slots)}"

    w = _Writer()
    params = ["self", "input", *(f"{name}=_MISSING" for name in inputs), "**_unexpected"]
    w.emit(f"def forward({', '.join(params)}):", 0)
    w.emit("if _unexpected:", 1)
    w.emit("_unexpected_inputs(self, _unexpected)", 2)
    for name in inputs:
        w.emit(f"if {name} is _MISSING:", 1)
        if name in defaults:
            w.emit(f"{name} = self._input_defaults[{literal(name)}]", 2)
        else:
            w.emit(f"_missing_input(self, {literal(name)})", 2)
    # Modules are looked up in the _modules dict directly: nn.Module.__getattr__ costs about a
    # microsecond per call, which is all the overhead a graph would otherwise add.
    w.emit("_m = self._modules", 1)
    w.emit("try:", 1)
    if profile:
        w.emit("_prof = []", 2)
        w.emit("_t_start = _now()", 2)
    if state_slots:
        w.emit("_st = self._state", 2)
        for tag, slot in state_slots.items():
            w.emit(f"{slot} = _st[{literal(tag)}]", 2)

    def ref_value(ref: Ref, primary: str) -> str:
        if ref.members is not None:  # a tag group: the list of its members' values
            return "[" + ", ".join(ref_value(m, primary) for m in ref.members) + "]"
        if ref.source is not None:
            return var[ref.source]
        slot = state_slots[ref.tag]
        return f"({slot} if {slot} is not None else _torch.zeros_like({primary}))"

    def call(callee: str, module: Any, primary: str, refs: list[Ref]) -> str:
        if not refs:
            return f"{invoke(callee, module)}({primary})"
        if has_named(module):
            items = ", ".join(f"{literal(r.key)}: {ref_value(r, primary)}" for r in refs)
            return f"{callee}.forward_named({primary}, {{{items}}})"
        parts = [primary] + [ref_value(r, primary) for r in refs if r.keyword is None]
        parts += [keyword_arg(r.keyword, ref_value(r, primary)) for r in refs if r.keyword]
        return f"{invoke(callee, module)}({', '.join(parts)})"

    def invoke(callee: str, module: Any) -> str:
        """How to call ``module`` (named ``callee``): ``__call__``, or ``forward`` if direct."""
        return f"{callee}.forward" if id(module) in direct else callee

    def split_refs(module: Any, refs: list[Ref], primary: str) -> tuple[str, str]:
        """(args tuple, kwargs dict) source for a composite's ``run``."""
        if has_named(module):
            items = [f"{literal(r.key)}: {ref_value(r, primary)}" for r in refs]
            return "()", "{" + ", ".join(items) + "}"
        pos = [ref_value(r, primary) for r in refs if r.keyword is None]
        kw = [f"{literal(r.keyword)}: {ref_value(r, primary)}" for r in refs if r.keyword]
        return f"({', '.join(pos)}{',' if len(pos) == 1 else ''})", "{" + ", ".join(kw) + "}"

    for node in nodes:
        v = f"v_{node.id}"
        timed = profile and node.kind not in UNTIMED_KINDS
        if timed:
            w.emit("_t = _now()", 2)
        primary = var[node.inputs[0]] if node.inputs else "input"
        # the module's type follows node.kind (a Loop for "loop", a Gate for "gate"...)
        module: Any = modules.get(node.id)
        own = f"_m[{literal(node.attr)}]" if node.attr else ""  # only kinds with a module use it
        if node.kind in ("identity", "input"):  # the value is an argument of forward
            var[node.id] = "input" if node.kind == "identity" else node.opts(InputOptions).name
        else:
            var[node.id] = v
        if node.kind in ("identity", "input"):
            pass
        elif node.kind == "module":
            if id(module) in direct and isinstance(module, Fn) and not node.refs:
                w.emit(f"{v} = {own}.fn({primary})", 2, node.id)
            else:
                w.emit(f"{v} = {call(own, module, primary, node.refs)}", 2, node.id)
        elif node.kind == "add":
            w.emit(f"{v} = {var[node.inputs[0]]} + {var[node.inputs[1]]}", 2, node.id)
        elif node.kind == "merge":
            expr = node.opts(MergeOptions).op.expression([var[i] for i in node.inputs])
            w.emit(f"{v} = {expr}", 2, node.id)
        elif (
            isinstance(node.options, LoopOptions)
            and node.options.kind is LoopKind.FOR_N
            and module.inlinable()
        ):
            body = f"_b_{node.id}"
            w.emit(f"{body} = {own}.body", 2, node.id)
            refs = []
            for k, ref in enumerate(node.refs):
                tmp = f"_r{k}_{node.id}"
                w.emit(f"{tmp} = {ref_value(ref, primary)}", 2, node.id)
                refs.append(Ref(ref.tag, ref.keyword, ref.site, source=f"@{tmp}"))
                var[f"@{tmp}"] = tmp
            w.emit(f"{v} = {primary}", 2, node.id)
            w.emit(f"for _i_{node.id} in range({int(node.options.n)}):", 2, node.id)
            w.emit(f"{v} = {call(body, module.body, v, refs)}", 3, node.id, "loop")
        elif node.kind == "gate":
            weights = f"_w_{node.id}"
            w.emit(
                f"{weights} = {call(own + '.router', module.router, primary, node.refs)}",
                2,
                node.id,
                "router",
            )
            n = int(node.opts(GateOptions).n)
            experts = [f"_g{i}_{node.id}" for i in range(n)]
            outs = [f"_o{i}_{node.id}" for i in range(n)]
            w.emit(f"{', '.join(experts)}, = {own}.experts", 2, node.id)
            for i in range(n):
                w.emit(
                    f"{outs[i]} = {invoke(experts[i], module.experts[i])}({primary})",
                    2,
                    node.id,
                    f"expert {i} of {n}",
                )
            w.emit(
                f"{v} = (_torch.stack(({', '.join(outs)},), dim=-2) * "
                f"{weights}.unsqueeze(-1)).sum(dim=-2)",
                2,
                node.id,
                "weighted sum of the experts (weights [..., n] must match outputs [..., D])",
            )
        elif node.kind in ("loop", "switch"):
            receiver = module.body if node.kind == "loop" else module.selector
            args, kwargs = split_refs(receiver, node.refs, primary)
            w.emit(f"{v} = {own}.run({primary}, {args}, {kwargs})", 2, node.id)
        elif node.kind == "map":
            w.emit(f"{v} = {own}.run({primary})", 2, node.id)
        elif node.kind == "scan":
            scan = node.opts(ScanOptions)
            initial = var[scan.state] if scan.state is not None else "None"
            emit_scan(w.emit, node.id, invoke(own, module), primary, scan.dim, initial, v, 2)
        elif node.kind == "scan_state":  # the value is the scan's carried state: no code
            var[node.id] = state_local(node.inputs[0])
        else:  # pragma: no cover - the builder creates no other kinds
            raise AssertionError(f"unknown node kind {node.kind}")
        for tag in node.writes_state:
            w.emit(f"_st[{literal(tag)}] = {var[node.id]}", 2, node.id)
        if timed:
            w.emit(f"_prof.append(({literal(node.id)}, _now() - _t))", 2)
    if tags:
        items = ", ".join(f"{literal(tag)}: {var[node_id]}" for tag, node_id in tags.items())
        # Straight into the instance dict: nn.Module.__setattr__ costs ~2 us a call.
        w.emit(f"self.__dict__['_tagged'] = {{{items}}}", 2)
    if profile:
        w.emit("_prof_done(self, _prof, _now() - _t_start)", 2)
    if outputs:
        values = ", ".join(var[node_id] for node_id in outputs)
        w.emit(f"return ({values}{',' if len(outputs) == 1 else ''})", 2)
    else:
        w.emit(f"return {var[output]}", 2)
    w.emit("except Exception as _e:", 1)
    w.emit("_annotate(self, _e)", 2)
    w.emit("raise", 2)
    return Generated("\n".join(w.lines) + "\n", w.where)
