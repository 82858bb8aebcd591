"""Label paths: ``"encoder.scan.hidden"`` names a subgraph, a tag or a node in a graph tree.

Resolution is strict and one-directional (no walking up, no fuzzy matching): every segment but
the last must be the label of a child graph (a labelled Graph nested directly as a step); the
last one is, in priority order, a child label, a tag, or a node id of the graph reached so far.
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

from flodl.errors import FlodlError

if TYPE_CHECKING:
    from flodl.graph.graph import Graph
    from flodl.graph.nodes import Node


class PathError(FlodlError, KeyError):
    """A label path that names nothing in the graph tree (or names the wrong kind of thing).

    ``.path`` is the path as given; ``.suggestions`` the closest valid paths.

    >>> import flodl as fl
    >>> from torch import nn
    >>> enc = fl.FlowBuilder(nn.Linear(2, 4)).tag("hidden").label("encoder").build()
    >>> model = fl.FlowBuilder(enc).through(nn.Linear(4, 1)).build()
    >>> try:
    ...     model.validate_path("encoder.hiden")
    ... except fl.PathError as err:
    ...     print(err.suggestions[0])
    encoder.hidden
    """

    def __init__(self, message: str, path: str = "", suggestions: list[str] | None = None) -> None:
        self.path = path
        self.suggestions = list(suggestions or [])
        if self.suggestions:
            message += "; closest valid paths: " + ", ".join(repr(s) for s in self.suggestions)
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return _rebuild, (type(self), self.args[0], self.path)


def _rebuild(cls: type[PathError], message: str, path: str) -> PathError:
    err = cls.__new__(cls)
    FlodlError.__init__(err, message)
    err.path, err.suggestions = path, []
    return err


class PathKind(enum.Enum):
    SUBGRAPH = "subgraph"
    TAG = "tag"
    NODE = "node"


@dataclass(frozen=True)
class PathTarget:
    """What a path names: ``kind``, the ``graph`` owning its last segment, and the node/module.

    For a subgraph, ``module`` is the child Graph itself and ``node`` the parent's node running it.
    For a tag or a node id, ``module`` is that node's module (None for add/merge/input nodes).
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
    from flodl.graph.graph import Graph as _Graph

    out: dict[str, tuple[Node, Graph]] = {}
    for node in graph.nodes:
        module = graph.module_of(node.id) if node.attr else None
        if isinstance(module, _Graph) and module.label and module.label not in out:
            out[module.label] = (node, module)
    return out


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


def _fail(root: Graph, path: str, message: str) -> PathError:
    close = difflib.get_close_matches(path, all_paths(root), n=3, cutoff=0.5)
    return PathError(f'{message} (path: "{path}")', path, close)


def resolve(root: Graph, path: str) -> PathTarget:
    """Resolve ``path`` from ``root``; raises :class:`PathError` when it names nothing."""
    if not isinstance(path, str):
        raise PathError(f"a label path is a string like 'encoder.hidden', got {path!r}", str(path))
    if not path:
        raise _fail(root, path, "empty label path")
    segments = path.split(".")
    graph = root
    for depth, seg in enumerate(segments[:-1]):
        children = _children(graph)
        if seg not in children:
            where = "this graph" if depth == 0 else f"'{'.'.join(segments[:depth])}'"
            raise _fail(root, path, f'"{seg}" is not a child graph label of {where}')
        graph = children[seg][1]
    last = segments[-1]
    crossed = len(segments) > 1
    children = _children(graph)
    if last in children:
        node, child = children[last]
        return PathTarget(path, PathKind.SUBGRAPH, child, last, node, child)
    if last in graph.tag_map:
        if crossed and last in graph.internal_tags:
            raise _fail(
                root,
                path,
                f"tag \"{last}\" is internal to graph '{graph.label}' and cannot be reached "
                "from a parent graph (tags starting with '_' and those passed to .internal() are "
                "private)",
            )
        node = graph.node(graph.tag_map[last])
        return PathTarget(path, PathKind.TAG, graph, last, node, _module(graph, node))
    for node in graph.nodes:
        if node.id == last:
            return PathTarget(path, PathKind.NODE, graph, last, node, _module(graph, node))
    where = f"'{'.'.join(segments[:-1])}'" if crossed else "this graph"
    raise _fail(root, path, f'"{last}" is not a child graph, tag or node of {where}')


def _module(graph: Graph, node: Node) -> nn.Module | None:
    return graph.module_of(node.id) if node.attr else None
