"""``Graph``: the torch module a FlowBuilder builds.

A Graph is an ordinary ``nn.Module``: its steps are registered submodules with stable, readable
names (a label or the first tag where present, else the node id), so ``state_dict()`` keys are
the same for identical builds. ``forward`` is straight-line Python generated at build time
(``graph.code``).
"""

from __future__ import annotations

import contextlib
import difflib
import itertools
import linecache
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves, tree_map_only

from flodl.checkpoint.methods import CheckpointMethods
from flodl.graph import dispatch, inline
from flodl.graph.codegen import generate
from flodl.graph.composites import SOURCE_GLOBALS, call_named
from flodl.graph.errors import GraphInputError, GraphStateError, UnknownTagError
from flodl.graph.explicit_state import ExplicitState, _walk
from flodl.graph.fx_tracing import (
    FAKE_EXPORT,
    backward_task,
    exporting_on_fakes,
    fx_tracing,
    holds_no_data,
    transforming,
)
from flodl.graph.hashing import structural_hash
from flodl.graph.nodes import InputOptions, LoopKind, LoopOptions, MergeOptions, Node, NodeKind
from flodl.graph.observe import Metrics, ObservationMethods
from flodl.graph.profile import ProfilingMethods, now, record
from flodl.graph.timing import TimingMethods
from flodl.graph.traces import TraceMethods
from flodl.graph.training import TrainingMethods
from flodl.graph.tree import TreeMethods
from flodl.graph.visual import VisualMethods
from flodl.log import get_logger

_MISSING = object()
log = get_logger("flodl.graph")
_SOURCE_IDS = itertools.count(1)


_Tensor = torch.Tensor  # a global read in forward's check of its first input

# What a pass leaves on the modules it runs: a graph's tagged values, state and profile, a
# loop's traces.
_PER_PASS = ("_tagged", "traces", "named_traces", "_last_profile")


class _Aside(threading.local):
    """How deep this thread is in passes aside (:meth:`Graph._pass_aside`): only the outermost
    puts the tree's values back; the graphs it runs meanwhile run as in an ordinary pass."""

    depth = 0


_aside = _Aside()


def _per_pass_values(graph: Graph) -> list[tuple[nn.Module, dict[str, Any]]]:
    """The per-pass values of every graph and loop in ``graph``'s tree, as they are now (state
    dicts copied: a pass writes into them)."""
    kept = []
    for module in graph.modules():
        found = module.__dict__
        values = {key: found[key] for key in _PER_PASS if key in found}
        if "_state" in found:
            values["_state"] = dict(found["_state"])
        if values:
            kept.append((module, values))
    return kept


def _put_back(kept: list[tuple[nn.Module, dict[str, Any]]]) -> None:
    for module, values in kept:
        module.__dict__.update(values)


def _graphs_below(graph: Graph, key: str, keeps: Callable[[dict[str, Any]], bool]) -> tuple:
    """The graphs nested in ``graph``, at any depth (loop bodies too), whose ``__dict__``
    ``keeps`` says yes to, each once. A nested graph adds the list it made when it was built
    (under ``key``), so building a deep tree stays linear."""
    found: dict[int, Graph] = {}
    seen: set[int] = set()
    pending = [m for m in graph._modules.values() if m is not None]
    while pending:
        module = pending.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        own = module.__dict__
        if isinstance(module, Graph) and keeps(own):
            found.setdefault(id(module), module)
        if isinstance(module, Graph) and key in own:
            for below in own[key]:
                found.setdefault(id(below), below)
        else:  # a graph not installed yet (a pickle being loaded) is walked
            pending += [m for m in module._modules.values() if m is not None]
    return tuple(found.values())


def _stateful_below(graph: Graph) -> tuple[Graph, ...]:
    """The nested graphs that keep state across calls (``_carried``)."""
    return _graphs_below(graph, "_carried", lambda own: bool(own["_state"]))


def _tagging_below(graph: Graph) -> tuple[Graph, ...]:
    """The nested graphs that keep tagged values (``_tags_below``): a pass clears theirs when it
    starts, so no autograd history of the last pass outlives the start of the next one."""
    return _graphs_below(graph, "_tags_below", lambda own: bool(own.get("_tags")))


def _refuse_recomputation(graph: Graph) -> None:
    keys = [
        f"{path}.{tag}" if path else tag
        for path, module in _walk(graph)
        if isinstance(module, Graph)
        for tag in module.__dict__["_state"]
    ]
    name = f"graph '{graph.label}'" if graph.label else "a graph"
    raise GraphStateError(
        f"{name} that carries state across calls (forward references: "
        f"{', '.join(repr(k) for k in keys)}) was run again while autograd runs a backward: "
        "activation checkpointing (torch.utils.checkpoint) recomputes the forward there, but "
        "the state that forward read was replaced when it ran, so the gradients would be "
        "wrong. Checkpoint a part without state instead (a nested graph or module without "
        "forward references: the state-keeping steps run outside the checkpoint), or run "
        "this graph without checkpointing"
    )


# Names a PyTorch or Lightning user reaches for, and the Graph method that does it.
_OTHER_NAMES = {
    "unfreeze": "a frozen path trains again with .thaw(path) (the original's name)",
    "unfreeze_at": "a frozen path trains again with .thaw(path)",
    "freeze_at": "use .freeze(path)",
    "tags": "the tags are .tag_names() (and .tag_map, tag -> node id)",
    "get_tagged": "use .tagged(tag), or .tagged_at('child.tag') through a child",
    "reset_states": "use .reset_state()",
    "detach_states": "use .detach_state()",
}


def _map_tensors(fn: Callable[[torch.Tensor], Any], value: Any) -> Any:
    """``value`` with ``fn`` applied to each tensor in it: state and tagged values may be
    tuples, lists or dicts of tensors (an LSTM cell's ``(h, c)``), nested; other values stay."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (tuple, list, dict)):
        return tree_map_only(torch.Tensor, fn, value)
    return value


def _holds_tensor(value: Any) -> bool:
    return any(isinstance(leaf, torch.Tensor) for leaf in tree_leaves(value))


def _is_to_empty(fn: Callable[..., Any]) -> bool:
    """Whether ``fn``, given to ``_apply``, is ``nn.Module.to_empty``'s: every tensor it maps
    comes out uninitialised."""
    return getattr(fn, "__qualname__", "") == "Module.to_empty.<locals>.<lambda>"


def _missing_input(graph: Graph, name: str) -> None:
    raise GraphInputError(_missing_message(graph, name))


def _missing_message(graph: Graph, name: str) -> str:
    declared = next(
        (
            n.where
            for n in graph.nodes
            if isinstance(n.options, InputOptions) and n.options.name == name
        ),
        "",
    )
    return f"missing graph input '{name}' (declared by {declared}): call it as {graph._signature()}"


def _unexpected_inputs(graph: Graph, extra: dict[str, Any]) -> None:
    names = ", ".join(repr(k) for k in extra)
    raise GraphInputError(
        f"unexpected graph input(s) {names}: this graph takes {graph._signature()}; "
        "declare auxiliary inputs with FlowBuilder.input(name)"
    )


def _traced_inputs(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    names: tuple[str, ...],
    defaults: dict[str, Any],
    signature: str,
    missing: dict[str, str],
) -> tuple[Any, ...]:
    """The graph's inputs ``(input, *auxiliary)`` from the arguments of a module fx traced
    with the graph as its root (``forward(*args, **kwargs)``), taken as the graph's forward
    takes them: auxiliary inputs by position or keyword, defaults for those left out. fx
    records this as one call (the arguments are proxies while it traces), so it runs with the
    traced module's real arguments."""
    if not args or len(args) > len(names) + 1:
        raise GraphInputError(
            f"{len(args)} positional input(s) given: this graph takes {signature}"
        )
    given = dict(zip(names, args[1:], strict=False))
    extra = [k for k in kwargs if k not in names or k in given]
    if extra:
        raise GraphInputError(
            f"unexpected graph input(s) {', '.join(repr(k) for k in extra)}: this graph takes "
            f"{signature}; each input is given once, by position or by keyword"
        )
    values = [args[0]]
    for name in names:
        if name in given:
            values.append(given[name])
        elif name in kwargs:
            values.append(kwargs[name])
        elif name in defaults:
            values.append(defaults[name])
        else:
            raise GraphInputError(missing[name])
    return tuple(values)


def _annotate(graph: Graph, exc: BaseException) -> None:
    """Add a note naming the node that raised: id, path, tags and the builder call site."""
    # A failure here must never hide the user's exception.
    with contextlib.suppress(Exception):
        _add_node_note(graph, exc)


def _add_node_note(graph: Graph, exc: BaseException) -> None:
    tb = exc.__traceback__
    where = graph._line_nodes.get(tb.tb_lineno) if tb is not None else None
    if where is None:
        return
    node_id, detail = where
    node = graph.node(node_id)
    if detail in ("loop", "halt") and tb is not None:
        i = tb.tb_frame.f_locals.get(f"_i_{node_id}")
        loop = node.opts(LoopOptions)
        if i is None:
            detail = ""
        elif detail == "halt":
            detail = f"halting condition at iteration {i + 1}"
        else:  # for_n runs exactly n iterations, a halting loop at most n
            bound = "" if loop.kind is LoopKind.FOR_N else "at most "
            detail = f"iteration {i + 1} of {bound}{loop.n}"
    try:
        inner = exc.__dict__.pop("_flodl_detail", None)
        trail: list[tuple[Graph, Node, str]] = exc.__dict__.setdefault("_flodl_trail", [])
    except AttributeError:
        return
    if not trail and node.kind in (NodeKind.MERGE, NodeKind.ADD) and tb is not None:
        exc.__dict__["_flodl_operands"] = _operand_shapes(graph, node, tb.tb_frame.f_locals)
    trail.append((graph, node, inner or detail))
    note = _render_note(trail) + exc.__dict__.get("_flodl_operands", "")
    notes = getattr(exc, "__notes__", None)
    old = exc.__dict__.get("_flodl_note")
    if notes is not None and old in notes:
        notes.remove(old)
    exc.__dict__["_flodl_note"] = note
    exc.add_note(note)


def _operand_shapes(graph: Graph, node: Node, values: dict[str, Any]) -> str:
    """Each operand of a merge (or a residual add) with its shape and the builder call that
    made it: a shape mismatch names every branch, not only the merge."""
    merge = node.options.op if isinstance(node.options, MergeOptions) else None
    what = f"merge ({merge!r})" if merge is not None else "residual add"
    lines = [f"\n  the {what} combines:"]
    for k, source in enumerate(node.inputs):
        producer = graph.node(source)
        if producer.kind is NodeKind.IDENTITY:
            name = "input"
        elif isinstance(producer.options, InputOptions):
            name = producer.options.name
        else:
            name = f"v_{source}"
        value = values.get(name)
        found = getattr(value, "shape", None)
        shape = tuple(found) if found is not None else type(value).__name__
        if merge is not None:
            role = f"branch {k}"
        elif node.method == "also_with":
            role = ("the skip path", "the main path")[k]
        else:
            role = ("the stream", "the residual")[k]
        lines.append(f"    {role}: shape {shape} from '{source}', added by {producer.where}")
    return "\n".join(lines)


def _hop(graph: Graph, node: Node, inner: Graph) -> str:
    """The path from ``graph`` to ``inner``, which runs inside ``node``: a child's label, else
    the node id plus where ``inner`` sits in the node's module (``loop_2.body``,
    ``gate_3.experts.1``) — a path ``validate_path`` resolves."""
    module = graph.module_of(node.id)
    if module is inner and inner.label:
        return inner.label
    for name, sub in module.named_modules() if module is not None else ():
        if sub is inner:
            return f"{node.id}.{name}" if name else node.id
    return node.id


def note_path(trail: list[tuple[Graph, Node, str]]) -> str:
    """The label path of the innermost node of an error trail (innermost hop first)."""
    hops = list(reversed(trail))
    segments = [_hop(g, n, hops[k + 1][0]) for k, (g, n, _) in enumerate(hops[:-1])]
    return ".".join([*segments, hops[-1][1].id])


def _render_note(trail: list[tuple[Graph, Node, str]]) -> str:
    path = note_path(trail)
    g, n, detail = trail[0]
    module = g.module_of(n.id)
    kind = type(module).__name__ if module is not None else n.kind
    bits = [kind]
    if n.tags:
        bits.append("tags: " + ", ".join(n.tags))
    if detail:
        bits.append(detail)
    if n.branch is not None and n.method == "also_with":
        bits.append(f"the {('skip', 'main')[n.branch]} path of also_with")
    elif n.branch is not None:
        bits.append(f"branch {n.branch} of the {n.method}")
    if g.label and len(trail) > 1 and _hop(trail[1][0], trail[1][1], g) != g.label:
        bits.append(f"in graph '{g.label}'")  # a labelled graph inside a loop, gate, ...
    bits += [f"{outer.id} {what}" for _, outer, what in trail[1:] if what]  # iteration, expert
    lines = [f"flodl: raised in graph node {path} ({'; '.join(bits)})"]
    for graph, node, _ in trail:
        owner = f" of graph '{graph.label}'" if graph.label else ""
        lines.append(f"  node '{node.id}'{owner} was added by {node.where}")
    forward = [leaf for r in trail[0][1].refs for leaf in r.leaves() if leaf.forward]
    if forward:
        names = ", ".join(repr(r.tag) for r in forward)
        lines.append(
            f"  ref(s) {names} read the previous call's value; on the first call (and after "
            "reset_state) they are zeros shaped like this node's input"
        )
    return "\n".join(lines)


_INSTANCE_NAMES = frozenset(nn.Module().__dict__) | {"training", "forward"}


def _is_free(name: str) -> bool:
    """Can ``name`` be a submodule attribute without shadowing anything of the Graph?"""
    return (
        name.isidentifier()
        and not name.startswith("_")
        and name not in _INSTANCE_NAMES
        and not hasattr(Graph, name)
    )


class Graph(
    TreeMethods,
    ObservationMethods,
    TraceMethods,
    ProfilingMethods,
    TimingMethods,
    VisualMethods,
    CheckpointMethods,
    TrainingMethods,
    nn.Module,
):
    """A network described with :class:`flodl.FlowBuilder` — a regular ``torch.nn.Module``.

    Build one with ``FlowBuilder(...)...build()``; call it like any module: ``graph(x)``, or
    ``graph(x, ctx=...)`` when it declares auxiliary inputs with ``.input("ctx")``.

    >>> import torch
    >>> import flodl as fl
    >>> from torch import nn
    >>> g = fl.FlowBuilder(nn.Linear(3, 4)).tag("hidden").through(nn.ReLU()).build()
    >>> sorted(g.state_dict())
    ['hidden.bias', 'hidden.weight']
    >>> print(next(line.strip() for line in g.code.splitlines() if "_m['hidden']" in line))
    v_linear_1 = _m['hidden'](input)
    """

    # Instance attributes, declared so a type checker does not read them through
    # nn.Module.__getattr__ (which types every unknown attribute as Tensor | Module).
    _label: str | None
    _nodes: tuple[Node, ...]
    _node_index: dict[str, Node]  # node id -> node: lookups in constant time
    _output: str
    _tags: dict[str, str]
    _inputs: tuple[str, ...]
    _tag_groups: dict[str, list[str]]
    _internal: frozenset[str]
    _input_defaults: dict[str, Any]
    _outputs: tuple[str, ...]
    _composed: bool
    _step_count: int
    _epoch_count: int
    _tagged: dict[str, Any]
    _state: dict[str, torch.Tensor | None]
    _hash: str | None
    _code: str
    _line_nodes: dict[int, tuple[str, str]]
    _forward_fn: Callable[..., Any]
    _direct_fn: Any  # the direct-dispatch forward; None until first used (_direct_forward)
    _fallback_fn: Any  # the direct forward calling nested graphs through forward; None until used
    _direct_plan: Any  # a flodl.graph.dispatch.Plan (this graph's own steps), or None
    _direct_tree: Any  # _direct_plan.merged() (the whole tree's); None until first run

    def __init__(self) -> None:
        raise TypeError("build a Graph with flodl.FlowBuilder(...)...build()")

    # ------------------------------------------------------------------ construction
    @classmethod
    def _from_description(
        cls,
        *,
        nodes: list[Node],
        modules: dict[str, nn.Module],
        output: str,
        tags: dict[str, str],
        inputs: list[str],
        tag_groups: dict[str, list[str]],
        label: str | None,
        internal: set[str],
        input_defaults: dict[str, Any] | None = None,
        outputs: list[str] | None = None,
    ) -> Graph:
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self._label = label
        self._nodes = tuple(nodes)
        self._node_index = {node.id: node for node in nodes}
        self._output = output
        self._tags = tags
        self._inputs = tuple(inputs)
        self._tag_groups = tag_groups
        self._internal = frozenset(internal)
        self._input_defaults = dict(input_defaults or {})
        self._outputs = tuple(outputs or ())
        self._composed = False
        self._step_count = 0
        self._epoch_count = 0
        self._tagged = {}
        self._metrics = Metrics()
        self._profiling = False
        self._last_profile = None
        self._state = {
            leaf.tag: None
            for node in nodes
            for ref in node.refs
            for leaf in ref.leaves()
            if leaf.forward
        }
        self._register(modules)
        for child in self.children_graphs().values():
            child._composed = True
        self._install()
        # Computed when first asked (a checkpoint, a summary, a log line): most graphs never are,
        # and it is a fifth of a large graph's build.
        self._hash = None
        if log.isEnabledFor(logging.INFO):
            log.info(
                "built graph %s[%s]: %d nodes, %s parameters",
                f"'{label}' " if label else "",
                self.short_hash(),
                len(nodes),
                f"{sum(p.numel() for p in self.parameters()):,}",
            )
        return self

    def _register(self, modules: dict[str, nn.Module]) -> None:
        """Register each node's module under its readable name (label, first tag, else node id)."""
        ids = {node.id for node in self._nodes}
        taken: dict[int, str] = {}
        used: set[str] = set()
        for node in self._nodes:
            module = modules.get(node.id)
            if module is None:
                continue
            if id(module) in taken:  # a module shared by several nodes is registered once
                node.attr = taken[id(module)]
                continue
            wanted = []
            if isinstance(module, Graph) and module.label:
                wanted.append(module.label)
            # internal tags name nothing from a parent: names stay valid paths from the root
            wanted += [t for t in node.tags if t not in self._internal]
            name = next((n for n in wanted if n not in used and n not in ids and _is_free(n)), None)
            if name is None:
                name = node.id
                if name in used or not _is_free(name):
                    name = next(
                        f"{name}_{k}" for k in itertools.count(1) if f"{name}_{k}" not in used
                    )
            node.attr = name
            used.add(name)
            taken[id(module)] = name
            self._add_child(name, module)

    def _add_child(self, name: str, module: nn.Module) -> None:
        """``add_module`` for a name ``_register`` already found free: its ``hasattr`` check
        raises (and discards) an AttributeError per new name, a tenth of a large graph's
        build. Torch's checks and hooks run whenever they could matter: a global module
        registration hook installed, or the name taken by anything of this instance."""
        hooks = getattr(nn.modules.module, "_global_module_registration_hooks", None)
        taken = name in self.__dict__ or name in self._parameters or name in self._buffers
        if hooks is None or hooks or taken:
            self.add_module(name, module)
        else:
            self._modules[name] = module

    def _install(self) -> None:
        """Generate, compile and bind ``forward`` (also after unpickling or deepcopy)."""
        if "_carried" not in self.__dict__:  # found at build (a copy or pickle keeps it)
            self.__dict__["_carried"] = _stateful_below(self)
        if "_tags_below" not in self.__dict__:
            self.__dict__["_tags_below"] = _tagging_below(self)
        # The ordinary variant is compiled now, not on first use: torch.compile(graph) may make
        # the first call, and dynamo cannot trace a compile() (fullgraph would fail).
        self._forward_fn = self._compile_forward(frozenset())
        self._direct_fn = self._fallback_fn = self._direct_plan = self._direct_tree = None
        compiled = self.__dict__.get("_compile_args")
        if compiled is not None and not self._profiling:
            # compile(): torch.compile of this graph's own generated function, whose code object
            # no other graph shares, so each compiled graph has its own dynamo cache (compiling
            # nn.Module._call_impl would put every graph in one cache and hit its limit). No
            # direct variant: under dynamo the ordinary calls are what is traced.
            args, kwargs = compiled
            self._forward_fn = torch.compile(self._forward_fn, *args, **kwargs)
            return
        # The direct-dispatch variant (see flodl.graph.dispatch); none while profiling. Its
        # code is generated on the first pass that can use it (_direct_forward), so build()
        # compiles one forward, not two, and a graph that never runs directly none.
        if not self._profiling and dispatch.enabled():
            found = dispatch.plan(self)
            if found.callees:
                self._direct_plan = found

    def _direct_forward(self, fallback: bool = False) -> Callable[..., Any]:
        """The direct-dispatch forward, generated and compiled on first use: the variant that
        calls nested graphs' direct forwards itself (under the merged plan's check), or with
        ``fallback``, the one that calls them through their ``forward`` (under the graph's own
        plan's check)."""
        key = "_fallback_fn" if fallback else "_direct_fn"
        fn = self.__dict__[key]
        if fn is None:
            plan = self._direct_plan
            nested = () if fallback else [graph for graph, _ in plan.found]
            for graph in nested:  # this forward calls theirs: they exist before it runs
                graph._direct_forward()
            direct = frozenset(map(id, plan.callees))
            fn = self._compile_forward(direct, frozenset(map(id, nested)))
            self.__dict__[key] = fn
        return fn

    def _merge_plans(self) -> Any:
        """The whole tree's plan, joined on the first pass (see :meth:`dispatch.Plan.merged`)."""
        tree = self.__dict__["_direct_tree"] = self._direct_plan.merged()
        return tree

    def _compile_forward(
        self, direct: frozenset[int], nested: frozenset[int] = frozenset()
    ) -> Callable[..., Any]:
        """The generated forward; ``direct``: ids of the modules it calls through ``forward``
        (or writes out), ``nested``: ids of the nested graphs whose direct forward it calls."""
        found = self._modules
        modules = {n.id: m for n in self._nodes if n.attr and (m := found[n.attr]) is not None}
        carried = self.__dict__["_carried"]
        tagging = self.__dict__["_tags_below"]
        generated = generate(
            list(self._nodes),
            modules,
            self._output,
            self._tags,
            list(self._inputs),
            profile=self._profiling,
            defaults=frozenset(self.input_defaults),
            outputs=[self._tags[tag] for tag in self.outputs],
            direct=direct,
            nested=nested,
            carried=len(carried),
            tagging=len(tagging),
        )
        kind = "direct " if direct else ""
        filename = f"<flodl graph {kind}{self._label or 'forward'} #{next(_SOURCE_IDS)}>"
        source = generated.source
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        weakref.finalize(self, linecache.cache.pop, filename, None)  # no leak across rebuilds
        namespace: dict[str, Any] = {
            **SOURCE_GLOBALS,
            "_MISSING": _MISSING,
            "_annotate": _annotate,
            "_missing_input": _missing_input,
            "_unexpected_inputs": _unexpected_inputs,
            "_now": now,
            "_named": call_named,
            "_prof_done": record,
            **inline.NAMES,
            **{f"_c{k}": graph for k, graph in enumerate(carried)},  # no cycle: they are below
            **{f"_g{k}": graph for k, graph in enumerate(tagging)},
        }
        exec(compile(source, filename, "exec"), namespace)
        fn = namespace["forward"]
        fn.__qualname__ = f"{type(self).__name__}.forward"
        if not direct:  # both variants have the same lines: one map serves error notes
            self._code = source
            self._line_nodes = generated.lines
        # A plain function, not a method bound to self: a bound method stored on the instance
        # would make a reference cycle, and the weights would outlive `del model` until gc runs.
        return fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the generated forward (see :attr:`code`): ``graph(x)`` or ``graph(x, ctx=...)``."""
        if not dispatch.is_compiling():  # dynamo traces the ordinary path (export's too)
            # fake or meta tensors: the graph must not keep them (inline: a plain tensor first)
            first = args[0] if type(args) is tuple and args else None
            if (type(first) is not _Tensor or first.is_meta) and holds_no_data(args, kwargs):
                return self._pass_without_data(args, kwargs)
            # a recomputation in a backward (checkpointing) or a torch.func transform (vmap):
            # two C calls, once per pass
            if backward_task() != -1 or transforming():
                return self._pass_aside(args, kwargs)
            plan = self._direct_plan
            if plan is not None:
                tree = self._direct_tree or self._merge_plans()
                if dispatch.direct_ok(tree):
                    return (self._direct_fn or self._direct_forward())(self, *args, **kwargs)
                if tree is not plan and dispatch.direct_ok(plan):
                    return self._direct_forward(fallback=True)(self, *args, **kwargs)
        elif FAKE_EXPORT and exporting_on_fakes(args, kwargs):  # torch 2.4/2.5's export
            return self._symbolic_pass(args, kwargs)
        if fx_tracing():  # torch.fx.symbolic_trace or torch.export: proxies, not tensors
            return self._symbolic_pass(args, kwargs)
        return self._forward_fn(self, *args, **kwargs)

    def _symbolic_pass(self, args: Any, kwargs: Any) -> Any:
        """A pass under ``torch.fx.symbolic_trace``, with this graph as the traced root or inside
        the traced module.

        As the root, fx hands ``forward(*args, **kwargs)`` one proxy for each, which cannot be
        unpacked; the graph records one call of :func:`_traced_inputs`, which takes its inputs
        from the traced module's arguments when it runs. The traced module keeps
        ``forward(*args, **kwargs)`` and is called as the graph is, auxiliary inputs by
        position or keyword, a missing or unexpected one raising :class:`GraphInputError`.

        The values a pass keeps (tagged values, state across calls, loop traces) would be proxies
        after it, and the next ordinary call would compute with them: every graph and loop in the
        tree gets its own values back when the pass ends, as ``torch.export`` does for module
        attributes."""
        kept = _per_pass_values(self)
        try:
            if type(args) is tuple:
                return self._forward_fn(self, *args, **kwargs)
            names = self._inputs
            missing = {name: _missing_message(self, name) for name in names}
            found = (args, kwargs, names, self.input_defaults, self._signature(), missing)
            values = args.tracer.create_proxy("call_function", _traced_inputs, found, {})
            values.node.meta["is_wrapped"] = True  # as torch.fx.wrap: a pickle traces it again
            named = {name: values[k + 1] for k, name in enumerate(names)}
            return self._forward_fn(self, values[0], **named)
        finally:
            _put_back(kept)

    def _pass_aside(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A pass whose values must not stay on the graph: a rerun while autograd runs a
        backward (``torch.utils.checkpoint`` recomputing what it did not keep, maybe stopping
        early), or a pass under a ``torch.func`` transform (``vmap``, ``grad``, ``jacrev``),
        whose values are the transform's wrappers. It computes what an ordinary pass computes,
        and every graph and loop in the tree gets its own values back when it ends, as after an
        fx trace: the tagged values, traces, profile and state of the last ordinary pass stay.
        Graphs it runs in turn run as in an ordinary pass (a loop body's state moves from
        iteration to iteration); this outermost one puts them back.

        A rerun in a backward cannot read the state the forward it repeats read (that forward
        replaced it), so a graph carrying state across calls raises :class:`GraphStateError`
        there instead of giving wrong gradients."""
        if _aside.depth:
            return self._forward_fn(self, *args, **kwargs)
        if backward_task() != -1 and self.has_state():
            _refuse_recomputation(self)
        kept = _per_pass_values(self)
        _aside.depth = 1
        try:
            return self._forward_fn(self, *args, **kwargs)
        finally:
            _aside.depth = 0
            _put_back(kept)

    def _pass_without_data(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A pass on fake or meta tensors (shape and memory estimates): it reads no state that
        holds data (such state starts from zeros, as on a first call: a fake or meta pass
        cannot compute with it), and every graph and loop in the tree gets its own values back
        when the pass ends. State that holds no data is read: the state a sequence of such
        passes carries through :meth:`explicit_state`."""
        kept = _per_pass_values(self)
        try:
            for module, values in kept:
                state = values.get("_state")
                if state:
                    live = module.__dict__["_state"]  # written into in place: see explicit_state
                    for tag, value in state.items():
                        if value is not None and not holds_no_data((value,), {}):
                            live[tag] = None
            return self._forward_fn(self, *args, **kwargs)
        finally:
            _put_back(kept)

    def compile(self, *args: Any, **kwargs: Any) -> Graph:  # type: ignore[override]
        """Compile this graph with :func:`torch.compile`, in place; returns the graph itself.

        Arguments go to ``torch.compile`` as given (``backend=``, ``mode=``, ``fullgraph=``,
        ``dynamic=``...). The graph's generated forward is compiled; the module is not
        wrapped: ``state_dict()`` keys, parameters and ``train()``/``eval()`` behave as before,
        and compiling happens on the first call (again after ``train()``/``eval()`` switches,
        once per mode). A graph without halting loops or switches traces into one graph with no
        breaks, so ``fullgraph=True`` holds for it; a halting loop or a switch breaks where it
        reads a value on the host. Hooks on the graph itself run outside the compiled code;
        hooks on its steps are compiled in when registered before the first call (torch does
        not watch for hooks added later). While profiling, the graph runs its profiled forward
        uncompiled. A deep copy or an unpickled copy is compiled with the same arguments (they
        must pickle too). See "Compiling a graph" in ``docs/graph-builder.md``.

        >>> import torch
        >>> import flodl as fl
        >>> from torch import nn
        >>> g = fl.FlowBuilder(nn.Linear(3, 3)).through(nn.ReLU()).build().compile(backend="eager")
        >>> g(torch.ones(2, 3)).shape, sorted(g.state_dict())
        (torch.Size([2, 3]), ['linear_1.bias', 'linear_1.weight'])
        """
        self.__dict__["_compile_args"] = (args, kwargs)
        self._install()
        return self

    @property
    def is_compiled(self) -> bool:
        """True once :meth:`compile` was called (on this graph, or on the one it was copied from)."""
        return "_compile_args" in self.__dict__

    def __getattr__(self, name: str) -> Any:
        # nn.Module's lookup of parameters, buffers and submodules; only a miss pays for the hint.
        try:
            return super().__getattr__(name)
        except AttributeError as err:
            hint = _OTHER_NAMES.get(name)
            if hint is None:
                raise
            raise AttributeError(f"{err}: {hint}", name=name, obj=self) from None

    def __getstate__(self) -> dict[str, Any]:
        from flodl.graph.pickling import GUARD_KEY, guard

        # First in the state: a step pickle cannot store fails here, named, not deep in pickle.
        stop = guard(self)
        state: dict[str, Any] = {GUARD_KEY: stop} if stop is not None else {}
        state.update(self.__dict__)
        drop = (
            "_forward_fn",
            "_direct_fn",
            "_fallback_fn",
            "_direct_plan",
            "_direct_tree",
            "_node_index",
            "_children_cache",
        )
        for name in drop:  # made anew by _install (a compiled forward from _compile_args)
            state.pop(name, None)
        state["_tagged"] = {}
        state["_state"] = {
            k: _map_tensors(lambda t: t.detach().clone(), v) for k, v in self._state.items()
        }
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        from flodl.graph.pickling import GUARD_KEY

        state.pop(GUARD_KEY, None)
        super().__setstate__(state)
        self._node_index = {node.id: node for node in self._nodes}
        self._install()

    def _apply(self, fn: Callable[..., Any], recurse: bool = True) -> Graph:
        super()._apply(fn, recurse)
        # State follows the module (``.to(device)``, ``.double()``...) as detached values. A
        # ``to_empty`` (also reached through a parent module's) would make it uninitialised
        # memory that the next call computes with: the state starts again from zeros instead.
        blank = _is_to_empty(fn)
        for tag, value in self._state.items():
            if blank:
                if _holds_tensor(value):
                    self._state[tag] = None
            else:
                self._state[tag] = _map_tensors(lambda t: fn(t.detach()), value)
        self._tagged = {}
        return self

    # ------------------------------------------------------------------ description
    @property
    def code(self) -> str:
        """The generated source of ``forward``."""
        return self._code

    @property
    def label(self) -> str | None:
        """The label given with ``FlowBuilder.label`` (None if unlabelled)."""
        return self._label

    @property
    def inputs(self) -> tuple[str, ...]:
        """Input names in call order: ``("input", *auxiliary)``."""
        return ("input", *self._inputs)

    @property
    def input_defaults(self) -> dict[str, Any]:
        """Auxiliary inputs declared with ``input(name, default=...)``: name -> default."""
        return dict(self.__dict__.get("_input_defaults", {}))

    @property
    def outputs(self) -> tuple[str, ...]:
        """The tags ``forward`` returns as a tuple (``FlowBuilder.output``); empty: the stream."""
        return tuple(self.__dict__.get("_outputs", ()))

    @property
    def nodes(self) -> tuple[Node, ...]:
        """Every node, in execution order."""
        return self._nodes

    @property
    def output_node(self) -> str:
        return self._output

    @property
    def tag_map(self) -> dict[str, str]:
        """Tag name -> id of the node carrying it."""
        return dict(self._tags)

    @property
    def tag_groups(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self._tag_groups.items()}

    @property
    def internal_tags(self) -> frozenset[str]:
        return self._internal

    @property
    def is_composed(self) -> bool:
        """True once this graph is a labelled child of another graph."""
        return self._composed

    def node(self, node_id: str) -> Node:
        """The node with id ``node_id`` (e.g. ``"linear_1"``)."""
        node = self._node_index.get(node_id)
        if node is not None:
            return node
        close = difflib.get_close_matches(node_id, [n.id for n in self._nodes], n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise UnknownTagError(f"no node '{node_id}' in this graph{hint}")

    def module_of(self, node_id: str) -> nn.Module | None:
        """The module a node runs (a composite for loops/gates/switches/maps), or None."""
        attr = self.node(node_id).attr
        return self._modules[attr] if attr else None

    def children_graphs(self) -> dict[str, Graph]:
        """Labelled graphs nested directly as steps: label -> Graph."""
        return {label: child for label, (_, child) in self._child_index().items()}

    def _child_index(self) -> dict[str, tuple[Node, Graph]]:
        """label -> (the node running it, the child Graph), first node first.

        Path lookups ask for it once per segment, so it is kept, and made anew only when a step
        was replaced since (one C-level comparison of the registered modules, not a scan of
        the nodes in Python).
        """
        modules = list(self._modules.values())
        cached = self.__dict__.get("_children_cache")
        if cached is not None and cached[0] == modules:
            return cached[1]
        out: dict[str, tuple[Node, Graph]] = {}
        for node in self._nodes:
            module = self._modules[node.attr] if node.attr else None
            if isinstance(module, Graph) and module.label and module.label not in out:
                out[module.label] = (node, module)
        self.__dict__["_children_cache"] = (modules, out)
        return out

    def tag_names(self) -> list[str]:
        """Every tag, in definition order."""
        return list(self._tags)

    def _tag_hint(self, tag: str) -> str:
        """A close tag, else the graph's tags (the first few), else that it has none."""
        known = list(self._tags)
        close = difflib.get_close_matches(tag, known, n=1)
        if close:
            return f"; did you mean '{close[0]}'?"
        if not known:
            return "; it has no tags (name a value with .tag('name') in the builder)"
        listed = ", ".join(repr(t) for t in known[:8])
        return f"; its tags: {listed}" + (f" and {len(known) - 8} more" if len(known) > 8 else "")

    def tagged(self, tag: str) -> Any:
        """The value tag ``tag`` had in the last forward pass (None before the first, and after
        a pass that failed). Released when the next pass starts."""
        if tag not in self._tags:
            if tag in self._tag_groups:
                members = ", ".join(repr(m) for m in self._tag_groups[tag])
                raise UnknownTagError(f"'{tag}' is a tag group: tagged() its members {members}")
            raise UnknownTagError(f"no tag '{tag}' in this graph{self._tag_hint(tag)}")
        return self._tagged.get(tag)

    def _signature(self) -> str:
        defaults = self.input_defaults
        aux = ", ".join(
            f"{name}={defaults[name]!r:.20}" if name in defaults else f"{name}=..."
            for name in self._inputs
        )
        return f"graph(x{', ' + aux if aux else ''})"

    # ------------------------------------------------------------------ state across calls
    def has_state(self) -> bool:
        """True when the graph carries state across calls: forward references in it or in a
        graph nested in it (the keys of :meth:`explicit_state`). A loop body's forward
        references do not count: the loop resets the body every run."""
        return any(isinstance(m, Graph) and m.__dict__["_state"] for _, m in _walk(self))

    def explicit_state(self) -> ExplicitState:
        """This graph as a function of its state: ``output, state = step(x, state=state)``.

        The returned :class:`~flodl.ExplicitState` runs this graph with the state it is given
        (keyed by graph path and tag: ``"memory"``, ``"encoder.h"``) and returns the state the
        pass wrote, leaving the graph's own state as it was: one graph serves several
        independent sequences, and ``torch.export`` takes the state as inputs and outputs
        instead of reading it once as a constant. Raises :class:`~flodl.GraphInputError` when
        the graph has no forward references, or has a module keeping state of its own.

        >>> import torch
        >>> import flodl as fl
        >>> g = fl.FlowBuilder().through(fl.nn.StateAdd()).using("m").tag("m").build()
        >>> step = g.explicit_state()
        >>> a, b = torch.ones(1, 2), torch.full((1, 2), 10.0)
        >>> _, sa = step(a)
        >>> _, sb = step(b)
        >>> step(a, state=sa)[0].tolist(), step(b, state=sb)[0].tolist()
        ([[2.0, 2.0]], [[20.0, 20.0]])
        """
        return ExplicitState(self)

    def _graphs(self) -> list[Graph]:
        return [m for m in self.modules() if isinstance(m, Graph)]

    def reset_state(self) -> None:
        """Forget forward-reference state (the next call sees zeros), in nested graphs too."""
        for graph in self._graphs():
            graph._state = dict.fromkeys(graph._state)
        for module in self.modules():
            reset = getattr(module, "reset_state", None)
            if not isinstance(module, Graph) and callable(reset):
                reset()

    def _needs_reset(self) -> bool:
        """Whether :meth:`reset_state` would change anything (a loop skips it otherwise)."""
        return any(g._state for g in self._graphs()) or any(
            callable(getattr(m, "reset_state", None))
            for m in self.modules()
            if not isinstance(m, Graph)
        )

    def detach_state(self) -> None:
        """Cut the autograd history of state and tagged values, keeping their values (all levels)."""
        cut = torch.Tensor.detach
        for graph in self._graphs():
            graph._state = {k: _map_tensors(cut, v) for k, v in graph._state.items()}
            graph._tagged = {k: _map_tensors(cut, v) for k, v in graph._tagged.items()}
        for module in self.modules():
            detach = getattr(module, "detach_state", None)
            if not isinstance(module, Graph) and callable(detach):
                detach()

    def end_step(self) -> None:
        """Close a training step: ``detach_state()`` (the truncated-BPTT boundary) and count it;
        while profiling, also buffer the step's node timings (``collect_timings``)."""
        self.detach_state()
        if self._profiling:
            self.collect_timings()
        self._step_count += 1

    def end_sequence(self) -> None:
        """Close an independent sequence: forget all state (``reset_state()``), so the next
        forward starts fresh. ``end_step`` keeps state across steps (truncated BPTT); call this
        between sequences. A graph without forward references has nothing to forget."""
        self.reset_state()

    def end_epoch(self) -> None:
        """Close an epoch: ``flush()`` every metric of the whole tree (and, while profiling, the
        timing buffers: ``flush_timings``), and count the epoch."""
        self.flush()
        if self._profiling:
            self.flush_timings()
        self._epoch_count += 1

    @property
    def step_count(self) -> int:
        return self._step_count

    @property
    def epoch_count(self) -> int:
        return self._epoch_count

    # ------------------------------------------------------------------ identity
    def structural_hash(self, scheme: str = "flodl") -> str:
        """SHA-256 hex of the architecture: modules, hyper-parameters, shapes, wiring, and plain
        callables by their code (see :mod:`flodl.graph.hashing` for exactly what it covers).

        ``scheme="rust"`` gives the hash the Rust original computes for the equivalent graph
        (what its checkpoints carry; see :mod:`flodl.checkpoint.rust_graph` for the mapping),
        and raises naming the first node with no counterpart there.

        Computed the first time it is asked for (``build()`` does not), then kept: a change to
        the modules after that (a parametrization, a swapped layer) does not alter it.
        """
        if scheme == "flodl":
            if self._hash is None:
                self._hash = structural_hash(self)
            return self._hash
        if scheme == "rust":
            from flodl.checkpoint.rust_graph import rust_structural_hash

            return rust_structural_hash(self)
        raise ValueError(f"unknown structural hash scheme {scheme!r}: use 'flodl' or 'rust'")

    def _earlier_structural_hash(self) -> str:
        """The hash files saved before flodl hashed the plain attributes of modules with an
        empty ``extra_repr`` carry (see :mod:`flodl.graph.hashing`); loads accept it too."""
        return structural_hash(self, legacy=True)

    def short_hash(self) -> str:
        """The first 8 characters of :meth:`structural_hash`."""
        return self.structural_hash()[:8]

    def summary(self) -> str:
        """A readable tree of the nodes, their tags, call sites and parameter shapes."""
        from flodl.graph.summary import summarize

        return summarize(self)
