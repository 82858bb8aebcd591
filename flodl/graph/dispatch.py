"""Direct dispatch: call a step's ``forward`` without ``nn.Module.__call__`` when no one can tell.

``module(x)`` goes through ``nn.Module.__call__``, which checks for hooks, a per-module
``compile()``, JIT tracing, and then calls ``module.forward(x)``. When none of those is present,
the call is exactly ``module.forward(x)``: same operations, same autograd graph, bit-identical
results. A graph knows all of its steps at build time, so its generated forward has a second
variant that calls ``forward`` directly, and :func:`direct_ok` decides, once per forward pass,
whether that variant is unobservable. It is when, at the time of the call:

* no global module hook is registered (``torch.nn.modules.module.register_module_forward_hook``
  and friends), ``nn.Module.__call__`` is torch's own (``torch.fx`` tracing patches it), and
  neither ``torch.jit.trace`` nor ``torch.compile`` is tracing (they get the ordinary call, as
  before);
* every directly called step is an instance of exactly a known type (a ``torch.nn`` layer, a
  ``flodl.nn`` step or a ``Graph``; a subclass, or a class swapped in by
  ``torch.nn.utils.parametrize``, falls back), has no forward/pre/backward hook, no
  ``compile()``d call and no instance-level ``forward`` (as accelerate installs);
* each step is still the module registered where the plan found it (replacing a step after
  ``build()`` is seen);
* the classes written out as their functional call (:mod:`flodl.graph.inline`) still have the
  ``forward`` that call mirrors, and each written-out layer still holds the parameters and
  buffers that call reads by key (:data:`flodl.graph.inline.READS`: one deleted and set again as
  a plain tensor, as MAML-style code does, falls back).

A step called with refs through its ``forward_named`` is planned as any other: the direct
forward calls ``forward_named`` itself, the ordinary one through
:func:`flodl.graph.composites.call_named` (``__call__`` when it has a hook).

Nested graphs: a graph's plan records the plans of the graphs nested in it (as steps, loop
bodies, gate routers and experts). On the graph's first pass, :meth:`Plan.merged` joins them
into one plan for the whole tree, so one check covers every step, and the direct forward calls
each nested graph's direct forward itself (no ``Graph.forward``, no second check). Each nested
graph must still hold the plan taken in: profiling or ``compile()`` rebuilds it, and that nested
graph's own ``forward`` then decides. When the merged check fails, the graph's own plan is
tried (its own steps direct, nested graphs called through ``forward``), so a hook deep inside
one nested graph leaves the rest of the tree direct. Otherwise the whole pass takes the ordinary
path, so a hook registered after ``build()`` fires. Merging happens when a graph is first run,
not when it is built: only the graph that is run needs the tree's plan, and building a graph
nested n levels deep stays linear in n.

The check costs a few C-level passes over the steps, far less than the ``__call__`` overhead it
saves: the plan holds each step's hook dicts and instance ``__dict__``, which torch mutates in
place when hooks are added or removed (a module built anew, as by ``deepcopy`` or unpickling,
gets a new plan; a step replaced in its parent is caught by the identity check).
``FLODL_DIRECT_DISPATCH=0`` in the environment turns direct dispatch off.
"""

from __future__ import annotations

import copy
import itertools
import operator
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.modules import module as _module_mod

from flodl.graph import inline
from flodl.graph.composites import Loop
from flodl.graph.nodes import LoopKind, LoopOptions, NodeKind

if TYPE_CHECKING:
    from flodl.graph.graph import Graph
    from flodl.graph.nodes import Node

_CALL = (nn.Module.__call__, nn.Module._call_impl, nn.Module._wrapped_call_impl)
# A call path already patched when flodl was imported cannot be trusted: no direct dispatch.
_CALL_PATH_IS_TORCHS = all(
    getattr(f, "__module__", None) == "torch.nn.modules.module" for f in _CALL
)
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_HOOK_SET = frozenset(_HOOK_DICTS)
is_compiling = torch.compiler.is_compiling
_tracing = torch._C._get_tracing_state


def _known_types() -> frozenset[type]:
    """Module classes whose call path is ``nn.Module``'s own: ``torch.nn`` and ``flodl.nn``."""
    import flodl.nn as fl_nn
    from flodl.graph.graph import Graph

    found: set[type] = {Graph}
    for namespace, prefix in ((nn, "torch.nn.modules."), (fl_nn, "flodl.nn.")):
        for value in vars(namespace).values():
            if (
                isinstance(value, type)
                and issubclass(value, nn.Module)
                and value.__module__.startswith(prefix)
                and value.__call__ is nn.Module.__call__
            ):
                found.add(value)
    return frozenset(found)


_KNOWN: frozenset[type] | None = None
_GRAPH: tuple[type[nn.Module], Any] = (nn.Module, None)  # (Graph, Graph.forward), set with _KNOWN
_PLAN_KEYS = itertools.repeat("_direct_plan")


def known_types() -> frozenset[type]:
    global _KNOWN, _GRAPH
    if _KNOWN is None:
        from flodl.graph.graph import Graph

        _GRAPH = (Graph, Graph.forward)
        _KNOWN = _known_types()
    return _KNOWN


def enabled() -> bool:
    return _CALL_PATH_IS_TORCHS and os.environ.get("FLODL_DIRECT_DISPATCH", "1") != "0"


@dataclass
class Plan:
    """The modules a graph's direct forward reaches, and where it finds them.

    ``containers[i][keys[i]] is modules[i]`` must hold at call time (each module is reached by
    that lookup); ``callees`` are called directly, the other modules (a loop, a gate, its
    expert list) are only traversed on the way.
    """

    containers: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    modules: list[nn.Module] = field(default_factory=list)
    callees: list[nn.Module] = field(default_factory=list)
    types: list[type] = field(default_factory=list)
    # the callees' hook dicts and instance dicts (each twice, with the two keys an override
    # would add: ``forward``, ``_compiled_call_impl``), held so the check is a few C loops
    hooks: list[dict[Any, Any]] = field(default_factory=list)
    dicts: list[dict[str, Any]] = field(default_factory=list)
    override_keys: list[str] = field(default_factory=list)
    # nested graphs with a direct forward of their own, and their plans, found while planning
    found: list[tuple[nn.Module, Plan]] = field(default_factory=list)
    # in a merged plan: the nested graphs whose direct forward the graph's direct forward
    # calls itself; each must still hold the plan merged here (``nested_dicts[i]
    # ["_direct_plan"] is nested_plans[i]``), else it was rebuilt (profiling, compile)
    nested: list[nn.Module] = field(default_factory=list)
    nested_dicts: list[dict[str, Any]] = field(default_factory=list)
    nested_plans: list[Plan] = field(default_factory=list)
    # the classes whose ``forward`` the direct forward skips (the layers it writes out as
    # functional calls, and, in a merged plan, Graph: nested graphs' direct forwards are called
    # without Graph.forward) and that ``forward``, each
    bypassed: list[type[nn.Module]] = field(default_factory=list)
    bypassed_forwards: list[Any] = field(default_factory=list)
    # the dicts (``_parameters``, ``_buffers``) of the callees written out, and the key each
    # written-out call reads there (``inline.READS``), once per key: each must be there
    read_dicts: list[dict[str, Any]] = field(default_factory=list)
    read_keys: list[str] = field(default_factory=list)

    def bypass(self, types: list[type[nn.Module]]) -> None:
        """Record ``types`` as bypassed, with their ``forward`` as the direct forward mirrors it,
        and the entries their written-out calls read."""
        self.bypassed = types
        self.bypassed_forwards = [
            _GRAPH[1] if t is _GRAPH[0] else inline.FORWARDS[t] for t in types
        ]
        self.read_dicts, self.read_keys = [], []
        for module, cls in zip(self.callees, self.types, strict=True):
            if cls in types:
                for where, key in inline.READS.get(cls, ()):
                    self.read_dicts.append(vars(module)[where])
                    self.read_keys.append(key)

    def reach(self, container: nn.Module, key: str, called: bool) -> nn.Module:
        """Record ``container.<key>``; ``called``: call it directly if its type is known (a
        module of another type keeps its ordinary call, which handles everything itself)."""
        module = container._modules[key]
        assert module is not None
        state = vars(module)
        if called and (
            type(module) not in (_KNOWN or known_types()) or not state.keys() >= _HOOK_SET
        ):
            return module
        self.containers.append(container._modules)
        self.keys.append(key)
        self.modules.append(module)
        if called:
            self.callees.append(module)
            self.types.append(type(module))
            self.hooks += [state[name] for name in _HOOK_DICTS]
            self.dicts += (state, state)
            self.override_keys += _OVERRIDES
            nested = state.get("_direct_plan")
            if type(module) is _GRAPH[0] and nested is not None:
                self.found.append((module, nested))
        return module

    def merged(self) -> Plan:
        """The plan of the whole tree: this one with the plans of the graphs nested in it (and
        in them...) appended, depth first; this plan itself when no graph is nested. Linear in
        the tree's size (nested graphs' own plans are read, not their merged ones)."""
        if not self.found:
            return self
        tree = copy.copy(self)
        for name in _STEPS:  # its own lists, this plan's entries first
            setattr(tree, name, list(getattr(self, name)))
        tree.found, tree.nested, tree.nested_dicts, tree.nested_plans = [], [], [], []
        pending = self.found[::-1]
        while pending:  # a stack, not recursion: nesting may be deeper than Python's stack
            graph, nested = pending.pop()
            tree.nested.append(graph)
            tree.nested_dicts.append(vars(graph))
            tree.nested_plans.append(nested)
            for name in _STEPS:
                getattr(tree, name).extend(getattr(nested, name))
            pending += nested.found[::-1]
        tree.bypass([*_written_out(tree.types), _GRAPH[0]])
        return tree


# the per-step lists a merged plan concatenates
_STEPS = ("containers", "keys", "modules", "callees", "types", "hooks", "dicts", "override_keys")
# what an instance-level forward (as accelerate installs) or a per-module compile() adds
_OVERRIDES = ("forward", "_compiled_call_impl")
_FORWARD = operator.attrgetter("forward")


def _written_out(types: list[type]) -> list[type[nn.Module]]:
    """The classes among ``types`` that the direct forward writes out, once each."""
    return [t for t in dict.fromkeys(types) if t in inline.FORWARDS and inline.checked(t)]


def _reach_step(result: Plan, graph: Graph, node: Node) -> None:
    """A module or scan step: the step itself (a ``forward_named`` called with refs too: the
    direct forward calls it without ``__call__``, the ordinary one through it)."""
    assert node.attr is not None
    result.reach(graph, node.attr, True)


def _reach_loop(result: Plan, graph: Graph, node: Node) -> None:
    """A loop the generated forward writes out: its body, and a halting loop's condition
    (a loop with a reset or a trace runs through :meth:`Loop.run`: nothing to plan)."""
    assert node.attr is not None
    loop = graph._modules[node.attr]
    assert isinstance(loop, Loop)
    if not loop.inlinable():
        return
    result.reach(graph, node.attr, False)
    result.reach(loop, "body", True)
    if node.opts(LoopOptions).kind is not LoopKind.FOR_N and "cond" in loop._modules:
        result.reach(loop, "cond", True)


def _reach_gate(result: Plan, graph: Graph, node: Node) -> None:
    """A gate: its router and each expert."""
    assert node.attr is not None
    gate = result.reach(graph, node.attr, False)
    result.reach(gate, "router", True)
    experts = result.reach(gate, "experts", False)
    assert isinstance(experts, nn.ModuleList)
    for i in range(len(experts)):
        result.reach(experts, str(i), True)


# The kinds whose generated code calls modules directly; the others call none (identity,
# inputs, merges) or run through their composite's ``run`` (switches, maps): nothing to plan.
_REACH: dict[NodeKind, Callable[[Plan, Graph, Node], None]] = {
    NodeKind.MODULE: _reach_step,
    NodeKind.SCAN: _reach_step,
    NodeKind.LOOP: _reach_loop,
    NodeKind.GATE: _reach_gate,
}


def plan(graph: Graph) -> Plan:
    """Where the direct forward of ``graph`` finds each module it calls directly.

    Mirrors :func:`flodl.graph.codegen.generate` with ``direct=True``: module and scan steps,
    the body of a loop the forward writes out (and a halting loop's condition), a gate's router
    and experts. A loop with a reset or a trace, switches and maps run through their
    composite's ``run`` (ordinary calls), so they are not planned. The plans of nested graphs
    are recorded (``found``) and joined by :meth:`Plan.merged` when the graph is first run.
    """
    result = Plan()
    for node in graph.nodes:
        reach = _REACH.get(node.kind)
        if reach is not None and node.attr is not None:
            reach(result, graph, node)
    result.bypass(_written_out(result.types))
    return result


def direct_ok(p: Plan) -> bool:
    """True when calling the plan's modules' ``forward`` directly is unobservable, right now.

    For a pass outside ``torch.compile``'s tracing: :meth:`Graph.forward` checks
    :func:`is_compiling` first, before it looks at (or merges) any plan, so dynamo traces the
    ordinary path and never this check."""
    m = _module_mod
    if (
        m._global_forward_hooks
        or m._global_forward_pre_hooks
        or m._global_backward_hooks
        or m._global_backward_pre_hooks
        or nn.Module.__call__ is not _CALL[0]
        or nn.Module._call_impl is not _CALL[1]
        or nn.Module._wrapped_call_impl is not _CALL[2]
        or _tracing() is not None
    ):
        return False
    return (
        not any(p.hooks)
        and list(map(operator.getitem, p.containers, p.keys)) == p.modules
        and list(map(type, p.callees)) == p.types
        and not any(map(dict.get, p.dicts, p.override_keys))
        and (
            not p.nested
            or all(map(operator.is_, map(dict.get, p.nested_dicts, _PLAN_KEYS), p.nested_plans))
        )
        and list(map(_FORWARD, p.bypassed)) == p.bypassed_forwards
        and all(map(operator.contains, p.read_dicts, p.read_keys))
    )
