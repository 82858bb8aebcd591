"""FlowBuilder: describe a network as a fluent chain; ``build()`` turns it into a :class:`Graph`.

Builder methods never raise: a broken rule is recorded with the call site that broke it, and
``build()`` raises one :class:`GraphBuildError` listing every problem.
"""

from __future__ import annotations

import difflib
import inspect
import keyword
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import nn

from flodl.graph import callsite
from flodl.graph.callsite import CallSite
from flodl.graph.codegen import RESERVED_NAMES
from flodl.graph.composites import Gate, Loop, Map, Switch
from flodl.graph.errors import BuildIssue, GraphBuildError, NotBuiltError
from flodl.graph.merge import MergeOp
from flodl.graph.nodes import (
    AddOptions,
    GateOptions,
    IdentityOptions,
    InputOptions,
    LoopKind,
    LoopOptions,
    MapMode,
    MapOptions,
    MergeOptions,
    ModuleOptions,
    Node,
    NodeKind,
    Options,
    Ref,
    ScanOptions,
    ScanStateOptions,
    SwitchOptions,
)
from flodl.nn.fn import Fn

if TYPE_CHECKING:
    from flodl.graph.graph import Graph

Step = nn.Module | type[nn.Module] | Callable[..., Any]

_STEP_HINT = (
    "a step is an nn.Module instance, an nn.Module class with a no-argument constructor, "
    "or a callable such as torch.relu"
)


def node_prefix(module: nn.Module) -> str:
    """The node-id prefix of a module: ``node_name`` if it defines one, else its lower-cased type.

    Reduced to ``[a-z0-9_]``: node ids are path segments and names in the generated forward, so
    a class named ``"My Layer"`` (``type()`` accepts any string) gives ``my_layer``.
    """
    name = getattr(module, "node_name", None)
    if not isinstance(name, str) or not name:
        name = type(module).__name__
    return re.sub(r"[^a-z0-9_]+", "_", str.lower(name)).strip("_") or "module"


def _text(value: Any) -> Any:
    """A name as an exact ``str`` (a str subclass's overridden methods are dropped); else as is."""
    return str.__str__(value) if isinstance(value, str) else value


_NO_DEFAULT: Any = object()  # input() without default=: the input is required


def _flatten(items: tuple[Any, ...]) -> list[Any]:
    """``split(a, b)`` and ``split([a, b])`` both mean two branches."""
    if len(items) == 1 and isinstance(items[0], list | tuple):
        return list(items[0])
    return list(items)


class FlowBuilder:
    """Describe a graph as a data flow; ``build()`` returns a :class:`flodl.Graph` (an nn.Module).

    >>> import torch
    >>> import flodl as fl
    >>> from torch import nn
    >>> model = (fl.FlowBuilder(nn.Linear(2, 16))
    ...          .through(nn.GELU())
    ...          .also(nn.Linear(16, 16))       # residual: x + m(x)
    ...          .through(nn.Linear(16, 2))
    ...          .build())
    >>> model(torch.randn(4, 2)).shape
    torch.Size([4, 2])

    ``FlowBuilder()`` with no entry starts from the identity (useful before ``tag``/``fork``).
    """

    def __init__(self, entry: Step | None = None) -> None:
        site = callsite.capture()
        self._nodes: list[Node] = []
        self._by_id: dict[str, Node] = {}  # node id -> node: lookups in constant time
        self._modules: dict[str, nn.Module] = {}
        self._counter = 0
        self._issues: list[BuildIssue] = []
        self._streams: list[str] = []
        self._split_site: CallSite | None = None
        self._on_target: str | None = None
        self._fork_target: str | None = None
        self._tags: dict[str, str] = {}
        self._tag_sites: dict[str, CallSite | None] = {}
        self._pending: dict[str, list[Ref]] = {}
        self._inputs: list[str] = []
        self._defaults: dict[str, Any] = {}
        self._outputs: list[str] = []
        self._output_site: CallSite | None = None
        self._tag_groups: dict[str, list[str]] = {}
        self._label: str | None = None
        self._internal: dict[str, CallSite | None] = {}
        self._built = False
        self._failed_split = False  # so that the merge closing a broken split adds no noise
        self._unfinished: dict[int, tuple[str, CallSite | None]] = {}  # loop_body/map not ended
        if entry is None:
            node = self._add_node("identity", IdentityOptions(), "FlowBuilder", site, [])
        else:
            module = self._coerce(entry, "FlowBuilder", site)
            if module is None:
                module = nn.Identity()
            node = self._add_module_node(module, "FlowBuilder", site, [])
        self._streams = [node.id]
        self._on_target = node.id

    # ------------------------------------------------------------------ misuse
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotBuiltError(
            "a FlowBuilder is a description, not a module, so it cannot be called: "
            ".build() returns the module (model = fl.FlowBuilder(...)...build(); model(x))"
        )

    def __iter__(self) -> Any:
        raise NotBuiltError(
            "a FlowBuilder is not iterable (an optimizer wants the parameters of a module): "
            ".build() returns the module: torch.optim.Adam(builder.build().parameters())"
        )

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes a FlowBuilder lacks: name .build() for a graph's.
        from flodl.graph.graph import Graph

        if not name.startswith("__") and (hasattr(Graph, name) or name == "training"):
            call = "()" if callable(getattr(Graph, name, None)) else ""
            raise NotBuiltError(
                f"FlowBuilder has no .{name}{call}: it describes a graph, and .build() returns "
                f"the module (an fl.Graph, a torch.nn.Module) that has it: "
                f"model = builder.build(); model.{name}{call}"
            )
        raise AttributeError(f"'FlowBuilder' object has no attribute '{name}'")

    # ------------------------------------------------------------------ internals
    def _fail(self, rule: str, site: CallSite | None, method: str, hint: str = "") -> FlowBuilder:
        self._issues.append(BuildIssue(rule, site, method, hint))
        return self

    def _new_id(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}_{self._counter}"

    def _add_node(
        self,
        prefix: str,
        options: Options,
        method: str,
        site: CallSite | None,
        inputs: list[str],
        branch: int | None = None,
    ) -> Node:
        node = Node(self._new_id(prefix), method, site, options, list(inputs), branch=branch)
        self._nodes.append(node)
        self._by_id[node.id] = node
        return node

    def _add_module_node(
        self,
        module: nn.Module,
        method: str,
        site: CallSite | None,
        inputs: list[str],
        branch: int | None = None,
        options: Options | None = None,
    ) -> Node:
        options = options if options is not None else ModuleOptions()
        node = self._add_node(node_prefix(module), options, method, site, inputs, branch)
        self._modules[node.id] = module
        return node

    def _coerce(self, step: Any, method: str, site: CallSite | None) -> nn.Module | None:
        """A module for ``step``, or None after recording why it is not a valid step."""
        if isinstance(step, nn.Module):
            return step
        if isinstance(step, FlowBuilder):
            self._fail(
                f"{method} got a FlowBuilder, not a module",
                site,
                method,
                f"call .build() on the inner builder first: .{method}(inner.build())",
            )
            return None
        if isinstance(step, type):
            if not issubclass(step, nn.Module):
                self._fail(f"{method} got the class {step.__name__}", site, method, _STEP_HINT)
                return None
            try:
                return step()
            except Exception as exc:
                self._fail(
                    f"{method}({step.__name__}) could not construct {step.__name__} with no "
                    f"arguments: {type(exc).__name__}: {exc}",
                    site,
                    method,
                    f"pass an instance instead, e.g. .{method}({step.__name__}(...))",
                )
                return None
        if callable(step):
            return Fn(step)
        self._fail(f"{method} got {type(step).__name__} {step!r:.40}", site, method, _STEP_HINT)
        return None

    def _single(self, method: str, site: CallSite | None) -> str | None:
        """The current stream, or None after recording that several streams are open."""
        if len(self._streams) == 1:
            return self._streams[0]
        where = f" (opened by the split at {self._split_site})" if self._split_site else ""
        self._fail(
            f"{method} needs a single stream, but {len(self._streams)} are open{where}",
            site,
            method,
            "call .merge(fl.MergeOp.ADD) (or MEAN/CAT/MUL) first; .tag_group(name) and .using(...) "
            "are the only other calls allowed on open streams",
        )
        return None

    def _advance(self, node: Node, target: Node | None = None) -> None:
        self._streams = [node.id]
        self._on_target = (target or node).id
        self._fork_target = None

    def _check_count(self, method: str, count: int, what: str, site: CallSite | None) -> bool:
        if count >= 2:
            return True
        self._fail(f"{method} requires at least 2 {what} (got {count})", site, method)
        return False

    def _on_stream(
        self, method: str, *steps: Step
    ) -> tuple[CallSite | None, str, list[nn.Module]] | None:
        """(call site, current stream, step modules), or None after recording what is wrong."""
        site = callsite.capture()
        prev = self._single(method, site)
        modules = [self._coerce(step, method, site) for step in steps]
        if prev is None or any(m is None for m in modules):
            return None
        return site, prev, modules  # type: ignore[return-value]

    # ------------------------------------------------------------------ sequential and residual
    def through(self, step: Step) -> FlowBuilder:
        """Send the stream through ``step``: ``x -> step(x)``."""
        if (ready := self._on_stream("through", step)) is not None:
            site, prev, (module,) = ready
            self._advance(self._add_module_node(module, "through", site, [prev]))
        return self

    def also(self, step: Step) -> FlowBuilder:
        """Residual connection: ``x -> x + step(x)``. A following ``using`` wires into ``step``."""
        if (ready := self._on_stream("also", step)) is not None:
            site, prev, (module,) = ready
            inner = self._add_module_node(module, "also", site, [prev])
            add = self._add_node("add", AddOptions(), "also", site, [prev, inner.id])
            self._advance(add, inner)
        return self

    def also_with(self, skip: Step, main: Step) -> FlowBuilder:
        """Residual with a transformed skip path: ``x -> skip(x) + main(x)``."""
        if (ready := self._on_stream("also_with", skip, main)) is not None:
            site, prev, (skip_m, main_m) = ready
            s = self._add_module_node(skip_m, "also_with", site, [prev], branch=0)
            m = self._add_module_node(main_m, "also_with", site, [prev], branch=1)
            add = self._add_node("add", AddOptions(), "also_with", site, [s.id, m.id])
            self._advance(add, m)
        return self

    def fork(self, step: Step) -> FlowBuilder:
        """Side branch: run ``step(x)`` but keep the main stream; a following ``tag`` names the branch."""
        ready = self._on_stream("fork", step)
        if ready is None:
            return self
        site, prev, (module,) = ready
        node = self._add_module_node(module, "fork", site, [prev])
        self._on_target = node.id
        self._fork_target = node.id
        return self

    # ------------------------------------------------------------------ parallel branches
    def split(self, *steps: Step) -> FlowBuilder:
        """Open one stream per branch, each fed the current stream; close them with ``merge``."""
        site = callsite.capture()
        branches = _flatten(steps)
        prev = self._single("split", site)
        self._failed_split = True
        if prev is None or not self._check_count("split", len(branches), "branches", site):
            return self
        coerced = [self._coerce(b, "split", site) for b in branches]
        modules = [m for m in coerced if m is not None]
        if len(modules) != len(coerced):
            return self
        self._failed_split = False
        ids = [
            self._add_module_node(m, "split", site, [prev], branch=i).id
            for i, m in enumerate(modules)
        ]
        self._streams = ids
        self._split_site = site
        self._on_target = None
        self._fork_target = None
        return self

    def merge(self, op: MergeOp = MergeOp.ADD) -> FlowBuilder:
        """Combine the open streams: ``MergeOp.ADD`` (default), ``MEAN``, ``MUL`` or ``CAT(dim)``."""
        site = callsite.capture()
        if not isinstance(op, MergeOp):
            return self._fail(
                f"merge expects a MergeOp, got {op!r:.40}",
                site,
                "merge",
                "use fl.MergeOp.ADD, MEAN, MUL or CAT(dim)",
            )
        if len(self._streams) < 2:
            if self._failed_split:  # the broken split was reported already
                self._failed_split = False
                return self
            return self._fail(
                "merge requires several open streams (after split), but there is 1",
                site,
                "merge",
                "open streams with .split(a, b, ...) before merging",
            )
        node = self._add_node("merge", MergeOptions(op), "merge", site, self._streams)
        self._advance(node)
        return self

    # ------------------------------------------------------------------ naming
    def _check_tag_name(self, name: Any, method: str, site: CallSite | None) -> bool:
        if not isinstance(name, str) or not name or "." in name:
            self._fail(
                f"{method}({name!r}): a tag is a non-empty string without dots",
                site,
                method,
                "dots separate the segments of label paths",
            )
            return False
        return True

    def _duplicate(self, name: str, method: str, site: CallSite | None) -> bool:
        if name not in self._tags and name not in self._tag_groups:
            return False
        first = self._tag_sites.get(name)
        where = f" (first tagged at {first})" if first else ""
        self._fail(f"duplicate tag '{name}'{where}", site, method, "every tag names one value")
        return True

    def _set_tag(self, name: str, node_id: str, site: CallSite | None) -> None:
        self._tags[name] = node_id
        self._tag_sites[name] = site
        self._node(node_id).tags.append(name)
        for ref in self._pending.pop(name, []):
            self._resolve_later(ref)

    def _resolve_later(self, ref: Ref) -> None:
        """Wire a ref whose tag was defined after the ``using`` that names it."""
        node = self._node(self._tags[ref.tag])
        if node.kind is NodeKind.INPUT:  # inputs exist from the start of the pass: same-pass
            ref.source = node.id
        else:  # a forward ref: the node stores its value for the next call
            node.writes_state = sorted({*node.writes_state, ref.tag})

    def _node(self, node_id: str) -> Node:
        return self._by_id[node_id]

    def tag(self, name: str) -> FlowBuilder:
        """Name the current value (or the preceding ``fork``'s branch) for ``using``/``tagged``."""
        site = callsite.capture()
        name = _text(name)
        if not self._check_tag_name(name, "tag", site):
            return self
        current = self._single("tag", site)
        if current is None or self._duplicate(name, "tag", site):
            return self
        target = self._fork_target or current
        self._fork_target = None
        self._set_tag(name, target, site)
        return self

    def tag_group(self, name: str) -> FlowBuilder:
        """Tag each open stream ``name_0 .. name_{n-1}`` (after ``split``)."""
        site = callsite.capture()
        name = _text(name)
        if not self._check_tag_name(name, "tag_group", site):
            return self
        if len(self._streams) < 2:
            return self._fail(
                f"tag_group('{name}') requires several open streams (got 1)",
                site,
                "tag_group",
                "use .tag(name) for a single stream",
            )
        if self._duplicate(name, "tag_group", site):
            return self
        members = [f"{name}_{i}" for i in range(len(self._streams))]
        for member in members:
            if self._duplicate(member, "tag_group", site):
                return self
        for member, stream in zip(members, self._streams, strict=True):
            self._set_tag(member, stream, site)
        self._tag_groups[name] = members
        self._tag_sites[name] = site
        for ref in self._pending.pop(name, []):  # using(name) came first: forward refs
            ref.members = [Ref(member, None, ref.site) for member in members]
            for leaf in ref.members:
                self._resolve_later(leaf)
        return self

    def label(self, name: str) -> FlowBuilder:
        """A human-readable name for the graph; a labelled graph nested in another is its child."""
        site = callsite.capture()
        name = _text(name)
        if not isinstance(name, str) or not name or "." in name:
            return self._fail(
                f"label({name!r}): a label is a non-empty string without dots",
                site,
                "label",
                "labels are segments of dotted paths like 'encoder.hidden'",
            )
        self._label = name
        return self

    def internal(self, *tags: str) -> FlowBuilder:
        """Hide tags from parent graphs (tags starting with ``_`` are internal already)."""
        site = callsite.capture()
        for tag in tags:
            self._internal[_text(tag)] = site
        return self

    # ------------------------------------------------------------------ cross-connections
    def input(self, *names: str, default: Any = _NO_DEFAULT) -> FlowBuilder:
        """Declare auxiliary inputs: ``graph(x, ctx=...)``; read them with ``using("ctx")``.

        With ``default=value`` the inputs are optional: ``graph(x)`` passes ``value``, as a
        hand-written ``forward(self, x, future=0)`` would. The value is kept as is (the same
        object every call, pickled with the graph) and does not follow ``.to(device)``: use
        numbers, ``None`` or strings, and build tensors inside the step that reads the input.
        """
        site = callsite.capture()
        for name in _flatten(names):
            if (
                type(name) is not str
                or not name.isascii()
                or not name.isidentifier()
                or keyword.iskeyword(name)
                or name.startswith("_")
                or name in RESERVED_NAMES
            ):
                reserved = ", ".join(repr(n) for n in sorted(RESERVED_NAMES))
                self._fail(
                    f"input({name!r}): an input name is an ASCII Python identifier, not a "
                    f"keyword, not one of {reserved}, and does not start with '_'",
                    site,
                    "input",
                    "graph inputs become keyword arguments: graph(x, ctx=...)",
                )
                continue
            if name in self._tags:
                first = self._tag_sites.get(name)
                where = f" (tagged at {first})" if first else ""
                self._fail(f"input '{name}' conflicts with the existing tag '{name}'{where}",
                           site, "input")  # fmt: skip
                continue
            node = self._add_node(f"input_{name}", InputOptions(name), "input", site, [])
            if default is not _NO_DEFAULT:
                self._defaults[name] = default
            self._inputs.append(name)
            self._set_tag(name, node.id, site)
        return self

    def using(self, *tags: str, **kw_tags: str) -> FlowBuilder:
        """Wire tagged values into the last step: ``m(stream, a, b)`` / ``m(stream, memory=a)``.

        A tag defined earlier gives this pass's value (backward ref); a tag defined later gives
        the previous call's value, zeros on the first call (forward ref: state across calls).
        A tag group gives one argument, the list of its members' values in order
        (``using("heads")`` calls ``m(stream, [heads_0, heads_1, ...])``). A module with
        ``forward_named(x, refs)`` receives a dict instead.
        """
        site = callsite.capture()
        wanted: list[tuple[str, str | None]] = [(_text(tag), None) for tag in tags]
        wanted += [(_text(tag), kw) for kw, tag in kw_tags.items()]
        if not wanted:
            return self
        for tag, _ in wanted:
            if not isinstance(tag, str) or not tag:
                return self._fail(f"using({tag!r}): refs name tags (strings)", site, "using")
        if self._on_target is not None:
            targets = [self._on_target]
        elif len(self._streams) > 1:
            targets = list(self._streams)
        else:
            return self._fail("using has no step to wire into", site, "using")
        for target_id in targets:
            node = self._node(target_id)
            if node.kind not in _RECEIVES_REFS:
                what = {NodeKind.IDENTITY: "the identity entry", NodeKind.INPUT: "an input"}.get(
                    node.kind, f"the {node.kind} node '{node.id}'"
                )
                self._fail(
                    f"using cannot wire into {what}: it has no module to receive refs",
                    site,
                    "using",
                    "add a step that takes them, e.g. .through(fl.nn.StateAdd()).using(...)",
                )
                continue
            for tag, kw in wanted:
                key = kw or tag
                if any(r.key == key for r in node.refs):
                    self._fail(
                        f"duplicate ref '{key}' on node '{node.id}'",
                        site,
                        "using",
                        "each ref reaches a node once; use keywords to pass one tag twice",
                    )
                    continue
                ref = Ref(tag, kw, site)
                if tag in self._tags:
                    ref.source = self._tags[tag]
                elif tag in self._tag_groups:  # one list of the members' values, in order
                    members = self._tag_groups[tag]
                    ref.members = [Ref(m, None, site, source=self._tags[m]) for m in members]
                else:
                    self._pending.setdefault(tag, []).append(ref)
                node.refs.append(ref)
        return self

    # ------------------------------------------------------------------ composites
    def loop_body(self, body: Step) -> LoopBuilder:
        """Repeat ``body``: finish with ``.for_n(n)``, ``.while_cond(cond, max_iter)`` or ``.until_cond(...)``."""
        return LoopBuilder(self, body, callsite.capture())

    def _open(self, pending: object, method: str, site: CallSite | None) -> None:
        self._unfinished[id(pending)] = (method, site)

    def _close(self, pending: object) -> None:
        self._unfinished.pop(id(pending), None)

    def _add_loop(
        self, body: Step | None, kind: LoopKind, n: int, cond: Step | None, site: CallSite | None
    ) -> FlowBuilder:
        method = _LOOP_METHODS[kind]
        prev = self._single(method, site)
        body_m = None if body is None else self._coerce(body, method, site)
        cond_m = self._coerce(cond, method, site) if cond is not None else None
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            what = "n" if kind is LoopKind.FOR_N else "max_iter"
            return self._fail(f"{method}: {what} must be an integer >= 1 (got {n!r})", site, method)
        if prev is None or body_m is None or (cond is not None and cond_m is None):
            return self
        node = self._add_node("loop", LoopOptions(kind, n), method, site, [prev])
        self._modules[node.id] = Loop(body_m, kind, n, cond_m)
        self._advance(node)
        return self

    def gate(self, router: Step, *experts: Step) -> FlowBuilder:
        """Soft routing: ``Σ_i router(x)[..., i] * expert_i(x)``; ``using`` refs go to the router."""
        return self._routing("gate", router, _flatten(experts), callsite.capture())

    def switch(self, selector: Step, *branches: Step) -> FlowBuilder:
        """Hard routing: only the branch the selector picks runs (per sample or per batch)."""
        return self._routing("switch", selector, _flatten(branches), callsite.capture())

    def _routing(
        self, method: str, router: Step, steps: list[Step], site: CallSite | None
    ) -> FlowBuilder:
        prev = self._single(method, site)
        what = "experts" if method == "gate" else "branches"
        if prev is None or not self._check_count(method, len(steps), what, site):
            return self
        router_m = self._coerce(router, method, site)
        coerced = [self._coerce(s, method, site) for s in steps]
        modules = [m for m in coerced if m is not None]
        if router_m is None or len(modules) != len(coerced):
            return self
        options = GateOptions(len(modules)) if method == "gate" else SwitchOptions(len(modules))
        node = self._add_node(method, options, method, site, [prev])
        composite = Gate(router_m, modules) if method == "gate" else Switch(router_m, modules)
        self._modules[node.id] = composite
        self._advance(node)
        return self

    def map(self, body: Step) -> MapBuilder:
        """Apply ``body`` element-wise: finish with ``.each()``, ``.over(tag)`` or ``.slices(n)``."""
        return MapBuilder(self, body, callsite.capture())

    def _add_map(
        self,
        body: Step | None,
        mode: MapMode,
        batched: bool,
        site: CallSite | None,
        tag: str = "",
        n: int = 0,
    ) -> FlowBuilder:
        method = mode.value
        prev = self._single(method, site)
        body_m = None if body is None else self._coerce(body, method, site)
        if mode is MapMode.SLICES and (not isinstance(n, int) or n < 1):
            return self._fail(f"slices: n must be an integer >= 1 (got {n!r})", site, method)
        source = prev
        if mode is MapMode.OVER:
            if tag in self._tag_groups:
                members = ", ".join(repr(m) for m in self._tag_groups[tag])
                return self._fail(
                    f"over('{tag}'): '{tag}' is a tag group ({members}), not one value",
                    site,
                    method,
                    "map over one member, or merge the branches first and map over the result",
                )
            if tag not in self._tags:
                close = difflib.get_close_matches(str(tag), list(self._tags), n=1)
                return self._fail(
                    f"over('{tag}'): no tag '{tag}' is defined before this map",
                    site,
                    method,
                    f"did you mean '{close[0]}'?"
                    if close
                    else "map.over reads a tag defined earlier in the chain (a backward ref)",
                )
            source = self._tags[tag]
        if prev is None or source is None or body_m is None:
            return self
        opts = MapOptions(mode, batched, n, tag or None)
        node = self._add_node("map", opts, method, site, [source])
        self._modules[node.id] = Map(body_m, mode, n, batched)
        self._advance(node)
        return self

    # ------------------------------------------------------------------ sequences and outputs
    def scan(
        self,
        cell: Step,
        dim: int = 1,
        state: str | None = None,
        final: str | None = None,
        keep: str = "all",
    ) -> FlowBuilder:
        """Run ``cell`` once per step along ``dim``, carrying its state: ``nn.LSTMCell`` loops.

        Equal, bit for bit, to the loop written by hand::

            h = <state>                        # None: the cell's own zeros
            outs = []
            for x_t in x.unbind(dim):
                h = cell(x_t, h)               # LSTMCell: (h, c); GRUCell/RNNCell: h
                outs.append(h[0] if isinstance(h, tuple) else h)
            x = torch.stack(outs, dim)

        ``state`` names a tag or input defined earlier that holds the initial state (``(h0,
        c0)`` for an LSTMCell; an input declared with ``default=None`` makes it optional).
        ``final`` tags the final state (``(h, c)`` for an LSTMCell), e.g. to return it with
        :meth:`output`. The cell is registered like any step (a ``.tag`` after ``scan`` names
        it and tags the stacked outputs).

        ``keep="last"`` continues with the last step's output only (``h``; for an LSTMCell the
        ``h`` of ``(h, c)``) and collects nothing, equal bit for bit to::

            for x_t in x.unbind(dim):
                h = cell(x_t, h)
            x = h[0] if isinstance(h, tuple) else h
        """
        site = callsite.capture()
        prev = self._single("scan", site)
        module = self._coerce(cell, "scan", site)
        if not isinstance(dim, int) or isinstance(dim, bool):
            return self._fail(f"scan: dim must be an integer (got {dim!r})", site, "scan")
        if keep not in ("all", "last"):
            return self._fail(
                f"scan: keep must be 'all' (every step's output, stacked) or 'last' (the last "
                f"step's output only), got {keep!r}",
                site,
                "scan",
            )
        source = None
        if state is not None:
            state = _text(state)
            if state not in self._tags:
                close = difflib.get_close_matches(str(state), list(self._tags), n=1)
                return self._fail(
                    f"scan(state={state!r}): no tag or input '{state}' is defined before this scan",
                    site,
                    "scan",
                    f"did you mean '{close[0]}'?"
                    if close
                    else "declare it first: .input('h0', default=None), or tag a value earlier",
                )
            source = self._tags[state]
        if final is not None:
            final = _text(final)
            if not self._check_tag_name(final, "scan", site) or self._duplicate(
                final, "scan", site
            ):
                return self
        if prev is None or module is None:
            return self
        node = self._add_module_node(
            module, "scan", site, [prev], options=ScanOptions(dim, source, keep)
        )
        if final is not None:
            holder = self._add_node("scan_state", ScanStateOptions(), "scan", site, [node.id])
            self._set_tag(final, holder.id, site)
        self._advance(node)
        return self

    def output(self, *tags: str) -> FlowBuilder:
        """Return several values: ``graph(x)`` gives the tuple of these tags' values, in order.

        ``.tag("recon").output("recon", "mu", "logvar")`` makes a VAE's forward return
        ``(recon, mu, logvar)`` like a hand-written torch VAE; the stream itself is returned only
        when tagged and listed. Tags defined later in the chain are fine (they are read at the end
        of the pass); an input's name returns that input. Call it once.
        """
        site = callsite.capture()
        names = [_text(t) for t in _flatten(tags)]
        if self._output_site is not None:
            return self._fail(
                f"output was already called at {self._output_site}",
                site,
                "output",
                "list every returned tag in one .output(...) call",
            )
        if not names:
            return self._fail("output() needs at least one tag", site, "output")
        self._outputs = names
        self._output_site = site
        return self

    def _check_outputs(self) -> list[BuildIssue]:
        issues = []
        for tag in self._outputs:
            if not isinstance(tag, str) or tag not in self._tags:
                what = "a tag group" if tag in self._tag_groups else "no such tag"
                close = difflib.get_close_matches(str(tag), list(self._tags), n=1)
                issues.append(
                    BuildIssue(
                        f"output({tag!r}): {what} in this builder",
                        self._output_site,
                        "output",
                        f"did you mean '{close[0]}'?"
                        if close
                        else "tag the value first: .tag(name), then .output(name, ...)",
                    )
                )
        if len(set(self._outputs)) != len(self._outputs):
            issues.append(BuildIssue("output lists a tag twice", self._output_site, "output"))
        return issues

    # ------------------------------------------------------------------ build
    def build(self) -> Graph:
        """Check the description and return the :class:`Graph`; raises :class:`GraphBuildError`."""
        from flodl.graph.graph import Graph

        site = callsite.capture()
        if self._built:
            raise GraphBuildError(
                [
                    BuildIssue(
                        "this FlowBuilder was already built",
                        site,
                        "build",
                        "a builder builds one graph (its modules belong to it); make a new builder",
                    )
                ]
            )
        issues = list(self._issues)
        for method, where in self._unfinished.values():
            ends = _ENDINGS[method]
            issues.append(
                BuildIssue(
                    f"{method}(...) was never finished, so it is not part of the graph",
                    where,
                    method,
                    f"end it with {ends}: builder.{method}(body).{ends.split(',')[0][1:]}",
                )
            )
        issues += self._unresolved()
        if len(self._streams) > 1:
            issues.append(
                BuildIssue(
                    f"open streams: call merge before build (the split at {self._split_site} "
                    f"left {len(self._streams)} streams open)",
                    site,
                    "build",
                    "add .merge(fl.MergeOp.ADD) (or MEAN/CAT/MUL) after the branches",
                )
            )
        for tag, tag_site in self._internal.items():
            if tag not in self._tags:
                issues.append(BuildIssue(f"internal('{tag}'): no tag '{tag}' in this graph",
                                         tag_site, "internal"))  # fmt: skip
        issues += self._check_tags_against_ids()
        node_vars = {f"v_{node.id}" for node in self._nodes}
        for name in self._inputs:
            if name in node_vars:
                issues.append(BuildIssue(f"input name '{name}' collides with a generated "
                                         "variable name; choose another name", None, "input"))  # fmt: skip
        issues += self._check_children()
        issues += self._check_ref_calls()
        issues += self._check_nested_inputs()
        issues += self._check_outputs()
        if issues:
            raise GraphBuildError(issues)
        self._built = True
        return Graph._from_description(
            nodes=self._nodes,
            modules=self._modules,
            output=self._streams[0],
            tags=dict(self._tags),
            inputs=list(self._inputs),
            tag_groups={k: list(v) for k, v in self._tag_groups.items()},
            label=self._label,
            internal={t for t in self._tags if t.startswith("_")} | set(self._internal),
            input_defaults=dict(self._defaults),
            outputs=list(self._outputs),
        )

    def _check_tags_against_ids(self) -> list[BuildIssue]:
        """A tag spelt as another node's id would make one path name two modules (a path tries
        tags first, state_dict names the node by its id): freeze('linear_3') froze the wrong one."""
        issues = []
        for tag, node_id in self._tags.items():
            other = self._by_id.get(tag)
            if other is not None and other.id != node_id:
                issues.append(
                    BuildIssue(
                        f"tag '{tag}' is also the id of another node ({other.where}), so paths "
                        "and state_dict names would mean two modules by it",
                        self._tag_sites.get(tag),
                        "tag",
                        "choose a tag that is not a node id (ids are <kind>_<number>)",
                    )
                )
        return issues

    def _unresolved(self) -> list[BuildIssue]:
        issues = []
        known = list(self._tags) + list(self._tag_groups)
        for tag, refs in self._pending.items():
            close = [c for c in difflib.get_close_matches(tag, known, n=2) if c != tag][:1]
            hint = (
                f"did you mean '{close[0]}'?"
                if close
                else f"tag a value with .tag('{tag}') (later in the chain for a forward ref "
                f"across calls) or declare .input('{tag}')"
            )
            for ref in refs:
                issues.append(
                    BuildIssue(
                        f"unresolved ref '{tag}': no .tag('{tag}') or .input('{tag}') in this builder",
                        ref.site,
                        "using",
                        hint,
                    )
                )
        return issues

    def _check_children(self) -> list[BuildIssue]:
        from flodl.graph.graph import Graph

        issues: list[BuildIssue] = []
        seen: dict[str, Node] = {}
        for node in self._nodes:
            module = self._modules.get(node.id)
            if not isinstance(module, Graph) or module.label is None:
                continue
            label = module.label
            if label in seen and self._modules[seen[label].id] is not module:
                issues.append(BuildIssue(
                    f"duplicate child graph label '{label}' at the same tree level "
                    f"(also on node '{seen[label].id}')", node.site, node.method))  # fmt: skip
            elif label in self._tags and self._tags[label] != node.id:
                issues.append(BuildIssue(
                    f"child graph label '{label}' collides with the tag '{label}' on node "
                    f"'{self._tags[label]}'", node.site, node.method))  # fmt: skip
            seen.setdefault(label, node)
        return issues

    def _check_ref_calls(self) -> list[BuildIssue]:
        """Refs must fit the receiving module's signature (checked once, at build)."""
        issues = []
        for node in self._nodes:
            if not node.refs:
                continue
            module = self._modules[node.id]
            receiver = {
                NodeKind.LOOP: lambda m: m.body,
                NodeKind.GATE: lambda m: m.router,
                NodeKind.SWITCH: lambda m: m.selector,
            }.get(node.kind, lambda m: m)(module)
            problem = _ref_call_problem(receiver, node.refs)
            if problem:
                tags = ", ".join(repr(r.tag) for r in node.refs)
                what = {
                    NodeKind.LOOP: "loop body",
                    NodeKind.GATE: "router",
                    NodeKind.SWITCH: "selector",
                }.get(node.kind, "module")
                issues.append(
                    BuildIssue(
                        f"node '{node.id}' cannot receive refs {tags}: its {what} "
                        f"{type(receiver).__name__} {problem}",
                        node.refs[0].site,
                        "using",
                        "give forward() a parameter per ref, e.g. forward(self, x, ctx), "
                        "or define forward_named(self, x, refs: dict)",
                    )
                )
        return issues

    def _check_nested_inputs(self) -> list[BuildIssue]:
        """A nested graph's auxiliary inputs must all be wired (else it fails at forward)."""
        from flodl.graph.graph import Graph

        issues = []
        for node in self._nodes:
            module = self._modules.get(node.id)
            if module is None:
                continue
            for role, inner, refs in _receivers(node, module):
                if not isinstance(inner, Graph) or len(inner.inputs) < 2:
                    continue
                if refs and _ref_call_problem(inner, refs):
                    continue  # already reported by _check_ref_calls
                missing = _missing_inputs(inner, refs)
                if not missing:
                    continue
                name = f"'{inner.label}'" if inner.label else "(unlabelled)"
                where = f"the {role} of node '{node.id}'" if role else f"node '{node.id}'"
                hint = (
                    f"wire them right after this step, e.g. .{node.method}(...).using("
                    f"{', '.join(f'{m}=<tag>' for m in missing)}) (positional refs fill "
                    f"{list(inner.inputs[1:])} in order)"
                    if not role or refs is node.refs
                    else f"only the stream reaches the {role}; build the nested graph "
                    "without .input(...), or make it the router/loop body, which receive refs"
                )
                issues.append(
                    BuildIssue(
                        f"nested graph {name} at {where} needs its auxiliary input(s) "
                        f"{', '.join(repr(m) for m in missing)}, but nothing passes them",
                        node.site,
                        node.method,
                        hint,
                    )
                )
        return issues


def _missing_inputs(graph: Graph, refs: list[Ref]) -> list[str]:
    """The auxiliary inputs of a nested ``graph`` that ``refs`` leave without a value."""
    aux = list(graph.inputs[1:])
    n_pos = sum(r.keyword is None for r in refs)
    given = set(aux[:n_pos]) | {r.keyword for r in refs if r.keyword}
    optional = set(graph.input_defaults)
    return [name for name in aux if name not in given and name not in optional]


def _receivers(node: Node, module: Any) -> list[tuple[str, nn.Module, list[Ref]]]:
    """(role, module, refs it receives) for each module a node calls directly.

    ``module`` is the node's module, whose type follows ``node.kind`` (a Gate for "gate"...).
    """
    refs = node.refs
    if node.kind is NodeKind.LOOP:
        cond = getattr(module, "cond", None)
        return [("loop body", module.body, refs)] + (
            [("halting condition", cond, [])] if cond else []
        )
    if node.kind is NodeKind.GATE:
        experts: list[tuple[str, nn.Module, list[Ref]]] = [
            (f"expert {i}", e, []) for i, e in enumerate(module.experts)
        ]
        return [("router", module.router, refs), *experts]
    if node.kind is NodeKind.SWITCH:
        branches: list[tuple[str, nn.Module, list[Ref]]] = [
            (f"branch {i}", b, []) for i, b in enumerate(module.branches)
        ]
        return [("selector", module.selector, refs), *branches]
    if node.kind is NodeKind.MAP:
        return [("map body", module.body, [])]
    return [("", module, refs)]


def _ref_call_problem(module: nn.Module, refs: list[Ref]) -> str | None:
    """Why ``module`` cannot be called with ``refs`` (None when it can, or when unknowable)."""
    from flodl.graph.graph import Graph

    if callable(getattr(module, "forward_named", None)):
        return None
    if isinstance(module, Graph):  # refs feed a nested graph's auxiliary inputs
        aux = list(module.inputs[1:])
        n_pos = sum(r.keyword is None for r in refs)
        keywords = [r.keyword for r in refs if r.keyword]
        unknown = [k for k in keywords if k not in aux]
        twice = [k for k in keywords if k in aux[:n_pos]]
        if n_pos > len(aux) or unknown or twice:
            return f"takes the auxiliary inputs {aux}"
        return None
    fn = module.fn if isinstance(module, Fn) else module.forward
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    positional = [object() for r in refs if r.keyword is None]
    named = {r.keyword: object() for r in refs if r.keyword is not None}
    if isinstance(module, Fn) and module.pass_training:
        named["training"] = object()  # the Fn passes its mode
    try:
        signature.bind(object(), *positional, **named)
    except TypeError as exc:
        return f"does not accept them ({exc}; forward{signature})"
    return None


_LOOP_METHODS = {
    LoopKind.FOR_N: "for_n",
    LoopKind.WHILE: "while_cond",
    LoopKind.UNTIL: "until_cond",
}
# The kinds whose module receives ``using`` refs (a loop's body, a gate's router, ...).
_RECEIVES_REFS = frozenset({NodeKind.MODULE, NodeKind.LOOP, NodeKind.GATE, NodeKind.SWITCH})

_ENDINGS = {
    "loop_body": ".for_n(n), .while_cond(cond, max_iter) or .until_cond(cond, max_iter)",
    "map": ".each(), .over(tag) or .slices(n)",
}


class _Pending:
    """A step that needs one more call (loop_body, map) before the chain goes on."""

    _method = ""

    def __init__(self, builder: FlowBuilder, body: Step, site: CallSite | None) -> None:
        self._builder = builder
        # Checked here, so a wrong body is reported at loop_body/map, not at the call ending it;
        # None once its issue is recorded.
        self._body: nn.Module | None = builder._coerce(body, self._method, site)
        self._site = site
        builder._open(self, self._method, site)

    def _finish(self) -> FlowBuilder:
        self._builder._close(self)
        return self._builder

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes this object lacks, e.g. .through() right after loop_body.
        if not name.startswith("__") and hasattr(FlowBuilder, name):
            where = f" at {self._site}" if self._site else ""
            ends = _ENDINGS[self._method]
            first = ends.split(",")[0]
            raise NotBuiltError(
                f".{self._method}(...){where} is not finished, so it has no .{name}(): end it "
                f"with {ends} first, e.g. .{self._method}(body){first}.{name}(...)"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute '{name}'")


class LoopBuilder(_Pending):
    """Returned by :meth:`FlowBuilder.loop_body`; finish it to get the FlowBuilder back."""

    _method = "loop_body"

    def for_n(self, n: int) -> FlowBuilder:
        """Run the body exactly ``n`` times (gradients flow through every iteration)."""
        return self._finish()._add_loop(self._body, LoopKind.FOR_N, n, None, callsite.capture())

    def while_cond(self, cond: Step, max_iter: int) -> FlowBuilder:
        """Check ``cond`` before each iteration (``> 0`` halts): the body runs 0..max_iter times."""
        return self._finish()._add_loop(
            self._body, LoopKind.WHILE, max_iter, cond, callsite.capture()
        )

    def until_cond(self, cond: Step, max_iter: int) -> FlowBuilder:
        """Check ``cond`` after each iteration (``> 0`` halts): the body runs 1..max_iter times."""
        return self._finish()._add_loop(
            self._body, LoopKind.UNTIL, max_iter, cond, callsite.capture()
        )


class MapBuilder(_Pending):
    """Returned by :meth:`FlowBuilder.map`; finish with ``each``, ``over`` or ``slices``."""

    _method = "map"

    def __init__(self, builder: FlowBuilder, body: Step, site: CallSite | None) -> None:
        super().__init__(builder, body, site)
        self._batched = False

    def batched(self) -> MapBuilder:
        """Call the body once on the whole tensor (the fast path for stateless bodies)."""
        self._batched = True
        return self

    def each(self) -> FlowBuilder:
        """Apply the body to each element along dim 0 of the stream; outputs are concatenated."""
        return self._finish()._add_map(self._body, MapMode.EACH, self._batched, callsite.capture())

    def over(self, tag: str) -> FlowBuilder:
        """Apply the body to each element of a tagged value (a tensor along dim 0, or a list)."""
        site = callsite.capture()
        return self._finish()._add_map(self._body, MapMode.OVER, self._batched, site, _text(tag))

    def slices(self, n: int) -> FlowBuilder:
        """Split the last dim into ``n`` slices, apply the body to each, concatenate the results."""
        site = callsite.capture()
        return self._finish()._add_map(self._body, MapMode.SLICES, self._batched, site, n=n)
