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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from flodl._torch_release import TORCH_RELEASE
from flodl.graph import inline
from flodl.graph.composites import FOR_N, GATE_SUM, UNTIL_COND, WHILE_COND
from flodl.graph.nodes import (
    GateOptions,
    InputOptions,
    LoopKind,
    LoopOptions,
    MergeOptions,
    Node,
    NodeKind,
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
# The tagged values go straight into the instance dict (nn.Module.__setattr__ costs about 2 us a
# call); torch.compile traces such a store from torch 2.7 on, so before it they are set as an
# attribute.
_TAG_STORE = "self.__dict__['_tagged'] = " if TORCH_RELEASE >= (2, 7) else "self._tagged = "


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


class _Gen:
    """What the emit functions share while one forward is generated: the writer, the local
    holding each node's value, the locals of last call's state and the direct-call set."""

    def __init__(
        self,
        w: _Writer,
        var: dict[str, str],
        state_slots: dict[str, str],
        direct: frozenset[int],
        nested: frozenset[int],
    ) -> None:
        self.w = w
        self.var = var
        self.state_slots = state_slots
        self.direct = direct
        self.nested = nested
        self.freed: set[str] = set()  # locals an emitter deleted itself (see _Step.last_read)

    def emit_lines(self, lines: list[tuple[int, str, str]], node: str) -> None:
        """Statements filled from a composite's :class:`~flodl.graph.composites.Source`."""
        for indent, text, detail in lines:
            self.w.emit(text, 2 + indent, node, detail)

    def ref_value(self, ref: Ref, primary: str) -> str:
        """The expression delivering ``ref``'s value (``primary`` shapes a first-call zero)."""
        if ref.members is not None:  # a tag group: the list of its members' values
            return "[" + ", ".join(self.ref_value(m, primary) for m in ref.members) + "]"
        if ref.source is not None:
            return self.var[ref.source]
        slot = self.state_slots[ref.tag]
        return f"({slot} if {slot} is not None else _torch.zeros_like({primary}))"

    def ref_values(self, refs: list[Ref], primary: str) -> list[tuple[Ref, str]]:
        return [(r, self.ref_value(r, primary)) for r in refs]

    def call(self, callee: str, module: Any, primary: str, refs: list[tuple[Ref, str]]) -> str:
        """The call of ``module`` (named ``callee``) on ``primary`` with (ref, value) pairs."""
        if not refs:
            return self.apply(callee, module, primary)
        if has_named(module):
            items = ", ".join(f"{literal(r.key)}: {value}" for r, value in refs)
            if id(module) in self.direct:  # nothing observes it (direct_ok): no __call__
                return f"{callee}.forward_named({primary}, {{{items}}})"
            return f"_named({callee}, {primary}, {{{items}}})"  # composites.call_named
        parts = [primary] + [value for r, value in refs if r.keyword is None]
        keywords = [r.keyword for r, _ in refs if r.keyword]
        written = inline.call(module, len(parts), keywords) if id(module) in self.direct else None
        parts += [keyword_arg(r.keyword, value) for r, value in refs if r.keyword]
        if written is not None:  # a known layer's call written out (inline.call)
            return f"{written}({callee}, {', '.join(parts)})"
        return f"{self.invoke(callee, module)}({', '.join(parts)})"

    def invoke(self, callee: str, module: Any) -> str:
        """How to call ``module`` (named ``callee``): ``__call__``, or ``forward`` if direct."""
        return f"{callee}.forward" if id(module) in self.direct else callee

    def apply(self, callee: str, module: Any, x: str) -> str:
        """``module`` (named ``callee``) applied to the local ``x``: if direct, a known layer
        written out as its functional call (:mod:`flodl.graph.inline`), else ``invoke(x)``."""
        if id(module) in self.direct:
            if id(module) in self.nested:  # a nested graph: its direct forward, called here
                return f"(_q := {callee})._direct_fn(_q, {x})"
            written = inline.expression(module, callee, x)
            if written is not None:
                return written
        return f"{self.invoke(callee, module)}({x})"

    def split_refs(self, module: Any, refs: list[Ref], primary: str) -> tuple[str, str]:
        """(args tuple, kwargs dict) source for a composite's ``run``."""
        if has_named(module):
            items = [f"{literal(r.key)}: {self.ref_value(r, primary)}" for r in refs]
            return "()", "{" + ", ".join(items) + "}"
        pos = [self.ref_value(r, primary) for r in refs if r.keyword is None]
        kw = [f"{literal(r.keyword)}: {self.ref_value(r, primary)}" for r in refs if r.keyword]
        return f"({', '.join(pos)}{',' if len(pos) == 1 else ''})", "{" + ", ".join(kw) + "}"


@dataclass(slots=True)  # not frozen: a frozen init costs a setattr call per field, per node
class _Step:
    """One node as its emit function sees it."""

    node: Node
    module: Any  # the node's module (its type follows the kind: a Loop for a loop...) or None
    own: str  # the expression reaching the module (empty for kinds without one)
    primary: str  # the local holding the node's first input
    out: str  # the local the node's value goes to
    # True when nothing reads ``primary`` after this node: an emitter may free it early (and
    # adds it to ``_Gen.freed``); otherwise ``generate`` deletes it after the node
    last_read: bool = False

    @property
    def id(self) -> str:
        return self.node.id


def _emit_identity(g: _Gen, s: _Step) -> str:
    return "input"  # the value is forward's first argument: no code


def _emit_input(g: _Gen, s: _Step) -> str:
    return s.node.opts(InputOptions).name  # a keyword argument of forward: no code


def _emit_module(g: _Gen, s: _Step) -> str:
    if id(s.module) in g.direct and isinstance(s.module, Fn) and not s.node.refs:
        mode = f", training={s.own}.training" if s.module.pass_training else ""
        g.w.emit(f"{s.out} = {s.own}.fn({s.primary}{mode})", 2, s.id)
    else:
        refs = g.ref_values(s.node.refs, s.primary)
        g.w.emit(f"{s.out} = {g.call(s.own, s.module, s.primary, refs)}", 2, s.id)
    return s.out


def _emit_add(g: _Gen, s: _Step) -> str:
    a, b = (g.var[i] for i in s.node.inputs)
    g.w.emit(f"{s.out} = {a} + {b}", 2, s.id)
    return s.out


def _emit_merge(g: _Gen, s: _Step) -> str:
    expr = s.node.opts(MergeOptions).op.expression([g.var[i] for i in s.node.inputs])
    g.w.emit(f"{s.out} = {expr}", 2, s.id)
    return s.out


def _emit_loop(g: _Gen, s: _Step) -> str:
    loop = s.node.opts(LoopOptions)
    if not s.module.inlinable():  # a reset or a trace around the iterations: Loop.run does it
        return _emit_run(g, s, s.module.body)
    body = f"_b_{s.id}"
    g.w.emit(f"{body} = {s.own}.body", 2, s.id)
    refs = []
    for k, (ref, value) in enumerate(g.ref_values(s.node.refs, s.primary)):
        tmp = f"_r{k}_{s.id}"  # refs are evaluated once, before the iterations
        g.w.emit(f"{tmp} = {value}", 2, s.id)
        refs.append((ref, tmp))
    free = ""
    if s.last_read:  # as `x = body(x)` by hand: the input goes once the loop holds it
        free = f"del {s.primary}"
        g.freed.add(s.primary)
    holes = {
        "state": s.out,
        "x": s.primary,
        "free": free,
        "i": f"_i_{s.id}",
        "n": str(int(loop.n)),
        "step": g.call(body, s.module.body, s.out, refs),
    }
    if loop.kind is LoopKind.FOR_N:
        g.emit_lines(FOR_N.fill(**holes), s.id)
        return s.out
    cond = f"_c_{s.id}"
    g.w.emit(f"{cond} = {s.own}.cond", 2, s.id)
    holes["verdict"] = g.apply(cond, s.module.cond, s.out)
    holes["done"], holes["stop"] = f"_d_{s.id}", f"_h_{s.id}"
    source = WHILE_COND if loop.kind is LoopKind.WHILE else UNTIL_COND
    g.emit_lines(source.fill(**holes), s.id)
    return s.out


def _emit_gate(g: _Gen, s: _Step) -> str:
    n = int(s.node.opts(GateOptions).n)
    gate = s.module
    weights = f"_w_{s.id}"
    router = g.call(s.own + ".router", gate.router, s.primary, g.ref_values(s.node.refs, s.primary))
    g.w.emit(f"{weights} = {router}", 2, s.id, "router")
    experts = [f"_g{i}_{s.id}" for i in range(n)]
    outs = [f"_o{i}_{s.id}" for i in range(n)]
    g.w.emit(f"{', '.join(experts)}, = {s.own}.experts", 2, s.id)
    for i in range(n):
        call = g.apply(experts[i], gate.experts[i], s.primary)
        g.w.emit(f"{outs[i]} = {call}", 2, s.id, f"expert {i} of {n}")
    names = ", ".join(outs)
    holes = {"out": s.out, "stacked": f"_s_{s.id}", "outs": names, "free": f"del {names}"}
    g.emit_lines(GATE_SUM.fill(**holes, weights=weights), s.id)
    return s.out


def _emit_run(g: _Gen, s: _Step, receiver: Any) -> str:
    """A composite that runs itself: ``run(x, args, kwargs)``, refs going to ``receiver``."""
    args, kwargs = g.split_refs(receiver, s.node.refs, s.primary)
    g.w.emit(f"{s.out} = {s.own}.run({s.primary}, {args}, {kwargs})", 2, s.id)
    return s.out


def _emit_switch(g: _Gen, s: _Step) -> str:
    return _emit_run(g, s, s.module.selector)


def _emit_map(g: _Gen, s: _Step) -> str:
    g.w.emit(f"{s.out} = {s.own}.run({s.primary})", 2, s.id)
    return s.out


def _emit_scan(g: _Gen, s: _Step) -> str:
    scan = s.node.opts(ScanOptions)
    initial = g.var[scan.state] if scan.state is not None else "None"
    # a known cell, called directly: each step written out as its kernel call, on the cell
    step = inline.cell_step(s.module) if id(s.module) in g.direct else None
    cell = s.own if step is not None else g.invoke(s.own, s.module)
    emit_scan(g.w.emit, s.id, cell, s.primary, scan.dim, initial, s.out, 2, scan.keep, step)
    return s.out


def _emit_scan_state(g: _Gen, s: _Step) -> str:
    return state_local(s.node.inputs[0])  # the scan's carried state: no code


Emit = Callable[[_Gen, _Step], str]

EMITTERS: dict[NodeKind, Emit] = {
    NodeKind.IDENTITY: _emit_identity,
    NodeKind.MODULE: _emit_module,
    NodeKind.INPUT: _emit_input,
    NodeKind.ADD: _emit_add,
    NodeKind.MERGE: _emit_merge,
    NodeKind.LOOP: _emit_loop,
    NodeKind.GATE: _emit_gate,
    NodeKind.SWITCH: _emit_switch,
    NodeKind.MAP: _emit_map,
    NodeKind.SCAN: _emit_scan,
    NodeKind.SCAN_STATE: _emit_scan_state,
}
"""One emit function per node kind: it writes the node's statements (``g.w.emit``, each line
tagged with the node for error notes) and returns the local holding the node's value: ``s.out``,
or a name no node owns (``input``); ``generate`` deletes ``s.out`` after its last reader."""


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
    nested: frozenset[int] = frozenset(),
    carried: int = 0,
    tagging: int = 0,
) -> Generated:
    """Source of ``def forward(self, input, <aux inputs>)`` for the described graph.

    ``profile=True`` generates the profiling variant: each node's statements are bracketed by
    clock reads (``_now`` synchronises CUDA). The plain variant has no timing code at all.
    ``defaults`` names the inputs that fall back to ``self._input_defaults[name]`` when not
    passed; ``outputs`` (node ids) makes ``forward`` return their values as a tuple.
    ``direct`` (the ``id()`` of each module to call directly) generates the direct-dispatch
    variant: those modules are called through their ``forward`` (an ``Fn`` through its
    function), skipping ``nn.Module.__call__``; the graph runs it only when
    :func:`flodl.graph.dispatch.direct_ok` says nothing can tell. Known layers are written
    out as their functional call (:mod:`flodl.graph.inline`); ``nested`` (ids of nested graphs
    among ``direct``) are called through their own direct forward (``_direct_fn``).

    State is all or nothing: the pass reads last call's state first and writes the new state
    (into the same dict: :class:`~flodl.ExplicitState` reads it there) last, once everything
    else succeeded, so a pass that raises leaves it as it was. ``carried`` is the number of
    graphs nested below this one that keep state (``_c0``, ``_c1``... in the namespace the
    source runs in): each writes its own when its pass ends, so this pass copies their state
    first and puts it back if it raises. ``tagging`` is the number of nested graphs that keep
    tagged values (``_g0``, ``_g1``...): the pass clears theirs first, as it clears its own.
    """
    for node in nodes:
        identifier(node.id)
    for name in inputs:
        identifier(name)
    # Inputs exist from the start of the pass, so refs may read them before their node.
    var: dict[str, str] = {
        n.id: n.options.name for n in nodes if isinstance(n.options, InputOptions)
    }
    state_slots: dict[str, str] = {}  # forward-referenced tag -> local holding last call's value
    for node in nodes:
        for leaf in (leaf for ref in node.refs for leaf in ref.leaves()):
            if leaf.forward and leaf.tag not in state_slots:
                state_slots[leaf.tag] = f"_s{len(state_slots)}"

    w = _Writer()
    _emit_prologue(w, inputs, defaults, profile, state_slots, bool(tags), carried, tagging)
    g = _Gen(w, var, state_slots, direct, nested)
    kept = {*tags.values(), *(outputs or [output])}
    dying = _last_reads(nodes, kept)
    written: dict[str, str] = {}  # state tag -> the local holding this pass's value
    for k, node in enumerate(nodes):
        timed = profile and node.kind not in UNTIMED_KINDS
        if timed:
            w.emit("_t = _now()", 2)
        primary = var[node.inputs[0]] if node.inputs else "input"
        own = f"_m[{literal(node.attr)}]" if node.attr else ""  # only kinds with a module use it
        dead = [f"v_{i}" for i in dying.get(k, ()) if var[i] == f"v_{i}"]
        out = var[node.id] = f"v_{node.id}"
        step = _Step(node, modules.get(node.id), own, primary, out, primary in dead)
        var[node.id] = EMITTERS[node.kind](g, step)
        for tag in node.writes_state:  # a tag: its local lives to the end of the pass
            written[tag] = var[node.id]
        if timed:
            w.emit(f"_prof.append(({literal(node.id)}, _now() - _t))", 2)
        dead = [name for name in dead if name not in g.freed]
        g.freed.clear()
        if dead:  # as `x = layer(x)` does by hand: a value nothing reads any more is freed now
            w.emit(f"del {', '.join(dead)}", 2, node.id)
    state = {tag: written[tag] for tag in state_slots}
    _emit_epilogue(w, var, output, tags, profile, outputs, state, carried)
    return Generated("\n".join(w.lines) + "\n", w.where)


def _last_reads(nodes: list[Node], kept: set[str]) -> dict[int, list[str]]:
    """For each node position, the nodes whose value is read for the last time there.

    A node's value is read by the nodes that take it as an input, as a same-pass ref, or as a
    scan's initial state. Values in ``kept`` (tagged, returned) live to the end of the pass,
    and so does a value nothing reads (it may be a dead branch, freed on return).
    """
    last: dict[str, int] = {}
    for k, node in enumerate(nodes):
        read = list(node.inputs)
        read += [leaf.source for ref in node.refs for leaf in ref.leaves() if leaf.source]
        if isinstance(node.options, ScanOptions) and node.options.state is not None:
            read.append(node.options.state)
        for source in read:
            last[source] = k
    dying: dict[int, list[str]] = {}
    for source, k in last.items():
        if source not in kept:
            dying.setdefault(k, []).append(source)
    return dying


def _emit_prologue(
    w: _Writer,
    inputs: list[str],
    defaults: frozenset[str],
    profile: bool,
    state_slots: dict[str, str],
    tagged: bool,
    carried: int,
    tagging: int = 0,
) -> None:
    """The signature, the input checks, the module dict, last call's state, and the nested
    graphs' state dicts (put back if the pass raises)."""
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
    for k in range(carried):  # the dict (a loop's reset replaces it) and what it holds
        w.emit(f"_k{k} = _c{k}._state", 1)
        w.emit(f"_j{k} = _k{k}.copy()", 1)
    if tagged:  # last pass's tagged values (and the autograd history they hold) go now
        w.emit(f"{_TAG_STORE}{{}}", 1)
    for k in range(tagging):  # the nested graphs' too, before this pass reaches a parameter
        w.emit(f"{_TAG_STORE.replace('self', f'_g{k}')}{{}}", 1)
    w.emit("try:", 1)
    if profile:
        w.emit("_prof = []", 2)
        w.emit("_t_start = _now()", 2)
    if state_slots:
        w.emit("_st = self._state", 2)
        for tag, slot in state_slots.items():
            w.emit(f"{slot} = _st[{literal(tag)}]", 2)


def _emit_epilogue(
    w: _Writer,
    var: dict[str, str],
    output: str,
    tags: dict[str, str],
    profile: bool,
    outputs: list[str] | None,
    state: dict[str, str],
    carried: int,
) -> None:
    """Publish the tagged values, close the profile, write the state, return; on failure put
    the nested graphs' state back and annotate the exception."""
    if tags:
        items = ", ".join(f"{literal(tag)}: {var[node_id]}" for tag, node_id in tags.items())
        w.emit(f"{_TAG_STORE}{{{items}}}", 2)
    if profile:
        w.emit("_prof_done(self, _prof, _now() - _t_start)", 2)
    for tag, value in state.items():  # last: nothing after it can fail
        w.emit(f"_st[{literal(tag)}] = {value}", 2)
    if outputs:
        values = ", ".join(var[node_id] for node_id in outputs)
        w.emit(f"return ({values}{',' if len(outputs) == 1 else ''})", 2)
    else:
        w.emit(f"return {var[output]}", 2)
    restore = []
    for k in range(carried):
        restore += [f"_k{k}.update(_j{k})", f"_c{k}.__dict__['_state'] = _k{k}"]
    w.emit("except Exception as _e:", 1)
    for line in restore:
        w.emit(line, 2)
    w.emit("_annotate(self, _e)", 2)
    w.emit("raise", 2)
    if restore:  # an interrupt too: the state stays as it was before the pass
        w.emit("except BaseException:", 1)
        for line in restore:
            w.emit(line, 2)
        w.emit("raise", 2)
