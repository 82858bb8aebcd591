"""Label paths: ``"encoder.scan.hidden"`` names a subgraph, a tag, a node or a module in a tree.

Resolution is strict and one-directional (no walking up, no fuzzy matching). In a graph, a
segment is, in priority order, the label of a child graph (a labelled Graph nested directly as a
step; resolution continues inside it), a tag, or a node id (or the name the node's module is
registered under). Segments after a tag or node name that node's torch submodules, by the names
``named_parameters()`` uses (``gate_2.router.proj``, ``switch_5.branches.0``, ``loop_4.body``);
a nested Graph met there (an unlabelled one, a loop body) resolves the rest with these graph
rules. So every ``named_parameters()``/``state_dict()`` prefix is a valid path.

Tags declared ``internal()`` (and every tag starting with ``_``) belong to their own graph: they
resolve from that graph, never from a parent. A path that names nothing raises
:class:`PathError` listing the closest valid paths.
"""

from __future__ import annotations

import difflib
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import nn

from flodl.graph.errors import PathError

if TYPE_CHECKING:
    from flodl.graph.graph import Graph
    from flodl.graph.nodes import Node


class PathKind(enum.Enum):
    SUBGRAPH = "subgraph"
    TAG = "tag"
    NODE = "node"
    MODULE = "module"  # a torch submodule below a node: "gate_2.router.proj"


@dataclass(frozen=True)
class PathTarget:
    """What a path names: ``kind``, the ``graph`` owning its last segment, and the node/module.

    For a subgraph, ``module`` is the child Graph itself and ``node`` the parent's node running it.
    For a tag or a node id, ``module`` is that node's module (None for add/merge/input nodes).
    For a module path, ``module`` is that submodule and ``node`` the node whose module holds it.
    """

    path: str
    kind: PathKind
    graph: Graph
    name: str
    node: Node | None
    module: nn.Module | None

    def parameters(self) -> list[nn.Parameter]:
        return list(self.module.parameters()) if self.module is not None else []


def _children(graph: Graph) -> dict[str, tuple[Node, Graph]]:
    return graph._child_index()


def all_paths(graph: Graph, prefix: str = "") -> list[str]:
    """Every path reachable from ``graph``: children, public tags and node ids, recursively."""
    out: list[str] = []
    children = _children(graph)
    local = list(children)
    local += [t for t in graph.tag_map if not (prefix and t in graph.internal_tags)]
    local += [n.id for n in graph.nodes]
    seen: set[str] = set()
    for name in local:
        if name not in seen:
            seen.add(name)
            out.append(prefix + name)
    for label, (_, child) in children.items():
        out += all_paths(child, f"{prefix}{label}.")
    return out


def _fail(root: Graph, path: str, message: str, candidates: list[str] | None = None) -> PathError:
    pool = all_paths(root) if candidates is None else candidates
    close = difflib.get_close_matches(path, pool, n=3, cutoff=0.5)
    return PathError(f'{message} (path: "{path}")', path, close)


def resolve(root: Graph, path: str) -> PathTarget:
    """Resolve ``path`` from ``root``; raises :class:`PathError` when it names nothing.

    >>> import flodl as fl
    >>> from torch import nn
    >>> enc = fl.FlowBuilder(nn.Linear(2, 4)).tag("hidden").label("encoder").build()
    >>> model = fl.FlowBuilder(enc).through(nn.Linear(4, 1)).build()
    >>> target = resolve(model, "encoder.hidden")
    >>> target.kind.value, target.graph is enc
    ('tag', True)
    """
    if not isinstance(path, str):
        raise PathError(f"a label path is a string like 'encoder.hidden', got {path!r}", str(path))
    if not path:
        raise _fail(root, path, "empty label path")
    return _in_graph(root, path, root, path.split("."), 0, crossed=False)


def _in_graph(
    root: Graph, path: str, graph: Graph, segments: list[str], i: int, crossed: bool
) -> PathTarget:
    """Resolve ``segments[i:]`` inside ``graph``: child labels, then a tag, node id or the
    name the node's module is registered under; below a node, its torch submodules."""
    seg, last = segments[i], i == len(segments) - 1
    where = f"'{'.'.join(segments[:i])}'" if i else "this graph"
    children = _children(graph)
    if seg in children:
        node, child = children[seg]
        if last:
            return PathTarget(path, PathKind.SUBGRAPH, child, seg, node, child)
        return _in_graph(root, path, child, segments, i + 1, crossed=True)
    if seg in graph.tag_map:
        if crossed and seg in graph.internal_tags:
            raise _fail(
                root,
                path,
                f"tag \"{seg}\" is internal to graph '{graph.label or where}' and cannot be "
                "reached from a parent graph (tags starting with '_' and those passed to "
                ".internal() are private)",
            )
        node, kind = graph.node(graph.tag_map[seg]), PathKind.TAG
    else:
        found = _node_named(graph, seg)
        if found is None:
            what = "a child graph label" if not last else "a child graph, tag or node"
            raise _fail(root, path, f'"{seg}" is not {what} of {where}')
        node, kind = found, PathKind.NODE
    module = _module(graph, node)
    if last:
        return PathTarget(path, kind, graph, seg, node, module)
    if module is None:
        raise _fail(
            root,
            path,
            f"\"{seg}\" names node '{node.id}' ({node.kind}), which runs no module: nothing "
            "lies below it",
        )
    return _in_module(root, path, graph, node, module, segments, i + 1)


def _in_module(
    root: Graph, path: str, graph: Graph, node: Node, module: nn.Module, segments: list[str], i: int
) -> PathTarget:
    """Resolve ``segments[i:]`` below a node's module, by the attribute names torch registers
    submodules under (those of ``named_parameters()``: ``router.proj``, ``experts.0``). A
    nested Graph met on the way resolves the rest with graph rules (tags, node ids, labels)."""
    from flodl.graph.graph import Graph as _Graph

    if isinstance(module, _Graph):
        return _in_graph(root, path, module, segments, i, crossed=True)
    seg, last = segments[i], i == len(segments) - 1
    sub = module._modules.get(seg)
    if sub is None:
        above = ".".join(segments[:i])
        params = dict(module.named_parameters(recurse=False))
        names = [f"{above}.{name}" for name in module._modules]
        if seg in params:
            why = f"it is a parameter of '{above}': paths name modules, '{above}' holds it"
        else:
            inside = ", ".join(module._modules) or "none"
            why = f"submodules of '{above}' ({type(module).__name__}): {inside}"
        raise _fail(root, path, f'"{seg}" is not a submodule; {why}', names)
    if last:
        return PathTarget(path, PathKind.MODULE, graph, seg, node, sub)
    return _in_module(root, path, graph, node, sub, segments, i + 1)


def _node_named(graph: Graph, name: str) -> Node | None:
    """The node with id ``name``, else the first whose module is registered as ``name``."""
    node = graph._node_index.get(name)
    if node is not None:
        return node
    module = graph._modules.get(name)
    if module is None:
        return None
    return next((n for n in graph.nodes if n.attr == name), None)


def _module(graph: Graph, node: Node) -> nn.Module | None:
    return graph.module_of(node.id) if node.attr else None
