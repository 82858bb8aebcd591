"""A graph as the Rust flodl sees it: its structural hash and its checkpoint entry names.

The Rust flodl identifies a graph by a SHA-256 over its own description: node ids
(``<module name>_<counter>``), each module's name and sorted parameter (``P``) and buffer
(``B``) names with little-endian i64 dimensions, nested graph hashes (``G``), edges with their
ports, tags with (node index, port index), and the input/output ports. It names checkpoint
entries ``<tag or node id>/<param>``. To read its files without migration, and to write files it
loads, flodl rebuilds that description from a :class:`flodl.Graph` whose steps map to the
Rust flodl's modules (the table below) and reproduces both.

Mapping table (torch module → the Rust flodl's module name; parameters keep torch's names):

======================================  =========================================
torch / flodl                           Rust flodl
======================================  =========================================
``nn.Linear``, ``nn.Bilinear``          ``linear``, ``bilinear``
``nn.Conv1d`` / ``2d`` / ``3d``         ``conv1d`` / ``conv2d`` / ``conv3d``
``nn.ConvTranspose1d`` / ``2d`` / ``3d``  ``conv_t1d`` / ``conv_t2d`` / ``conv_transpose3d``
``nn.Embedding``                        ``embedding``
``nn.LayerNorm``, ``nn.GroupNorm``,     ``layernorm``, ``groupnorm``, ``rmsnorm``
``nn.RMSNorm`` (affine)
``nn.BatchNorm1d`` / ``2d``             ``batchnorm`` / ``batchnorm2d`` (running stats; torch's
                                        ``num_batches_tracked`` has no counterpart and is left
                                        out of the hash and of Rust-compatible files)
activations, dropout, pooling, padding  ``relu``, ``gelu``, ``dropout``, ``maxpool2d``, … (see
                                        :data:`RUST_MODULE_NAMES`)
``nn.Identity``, the implicit entry of  ``identity``
``FlowBuilder()``
a nested :class:`flodl.Graph`           ``graph`` (its parameters by their own names, then
                                        ``G`` and its Rust hash)
``also`` / ``also_with`` sum            node ``add_<n>`` (no module; ports ``input_0``,
                                        ``input_1``)
``merge`` (ADD, MEAN)                   node ``merge_<n>`` (no module; ports ``input_<i>``)
======================================  =========================================

Every module step has ports ``input`` → ``output``; the graph's input is ``input`` on the entry
node and its output ``output`` on the last. Loops, gates, switches, maps, auxiliary inputs,
``using`` references, plain functions and modules outside the table have no counterpart: asking
for the Rust hash of a graph holding one raises :class:`RustMappingError` naming the node.

Where a node carries several tags, the Rust flodl prefixes its entries with whichever its hash
map yields first (not deterministic there); flodl writes the first tag in definition order and,
when loading, accepts any of the node's tags as the prefix.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from flodl.checkpoint.errors import RustMappingError

RUST_MODULE_NAMES: dict[type[nn.Module], str] = {
    nn.Identity: "identity",
    nn.ReLU: "relu",
    nn.Sigmoid: "sigmoid",
    nn.Tanh: "tanh",
    nn.GELU: "gelu",
    nn.SiLU: "silu",
    nn.LeakyReLU: "leaky_relu",
    nn.ELU: "elu",
    nn.Softplus: "softplus",
    nn.Mish: "mish",
    nn.Softmax: "softmax",
    nn.LogSoftmax: "log_softmax",
    nn.Flatten: "flatten",
    nn.SELU: "selu",
    nn.Hardswish: "hardswish",
    nn.Hardsigmoid: "hardsigmoid",
    nn.PReLU: "prelu",
    nn.Linear: "linear",
    nn.Bilinear: "bilinear",
    nn.Conv1d: "conv1d",
    nn.Conv2d: "conv2d",
    nn.Conv3d: "conv3d",
    nn.ConvTranspose1d: "conv_t1d",
    nn.ConvTranspose2d: "conv_t2d",
    nn.ConvTranspose3d: "conv_transpose3d",
    nn.Dropout: "dropout",
    nn.Dropout2d: "dropout2d",
    nn.AlphaDropout: "alpha_dropout",
    nn.Embedding: "embedding",
    nn.LayerNorm: "layernorm",
    nn.GroupNorm: "groupnorm",
    nn.RMSNorm: "rmsnorm",
    nn.BatchNorm1d: "batchnorm",
    nn.BatchNorm2d: "batchnorm2d",
    nn.MaxPool1d: "maxpool1d",
    nn.MaxPool2d: "maxpool2d",
    nn.AvgPool1d: "avgpool1d",
    nn.AvgPool2d: "avgpool2d",
    nn.AdaptiveMaxPool2d: "adaptive_maxpool2d",
    nn.AdaptiveAvgPool2d: "adaptive_avgpool2d",
    nn.PixelShuffle: "pixel_shuffle",
    nn.PixelUnshuffle: "pixel_unshuffle",
    nn.Upsample: "upsample",
    nn.Unfold: "unfold",
    nn.Fold: "fold",
    nn.ZeroPad2d: "zero_pad2d",
    nn.ReflectionPad2d: "reflection_pad2d",
}
# The Rust flodl's versions of these always have an affine weight and bias (and running stats),
# so only affine (and stat-tracking) torch modules map to them.
_AFFINE = (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d)
_NO_COUNTERPART_BUFFERS = frozenset({"num_batches_tracked"})
_MODULE_STEP_KINDS = frozenset({"module", "identity"})
_MERGE_OPS = frozenset({"add", "mean"})


@dataclass(frozen=True)
class RustLayout:
    """This graph as the Rust flodl sees it: ``hash`` (64 hex) and, in the order it saves them, the
    ``(rust name, this graph's name)`` of every parameter and buffer it saves."""

    hash: str
    params: list[tuple[str, str]]
    buffers: list[tuple[str, str]]
    aliases: dict[str, str]  # other accepted Rust names (a node's other tags) -> this graph's


# One tensor of a module as the Rust flodl lists it: (its own short name, path under the module).
_Tensor = tuple[str, str, torch.Tensor]


def _fail(graph: Any, node: Any, why: str) -> RustMappingError:
    where = f" (added by {node.where})" if getattr(node, "site", None) else ""
    owner = f" of graph '{graph.label}'" if getattr(graph, "label", None) else ""
    return RustMappingError(
        f"node '{node.id}'{owner}{where} has no counterpart in the Rust original: {why} — the "
        "Rust hash and Rust-compatible files exist only for graphs made of the original's "
        "modules (see flodl.checkpoint.rust_graph)"
    )


def _leaf_name(graph: Any, node: Any, module: nn.Module) -> str:
    name = RUST_MODULE_NAMES.get(type(module))
    if name is None:
        kind = type(module)
        raise _fail(graph, node, f"{kind.__module__}.{kind.__qualname__} is not in the mapping")
    if isinstance(module, _AFFINE):
        affine = getattr(module, "elementwise_affine", getattr(module, "affine", True))
        stats = getattr(module, "track_running_stats", True)
        if not affine or not stats:
            raise _fail(
                graph, node, f"{type(module).__name__} without affine parameters/running stats"
            )
    return name


def _tensors(module: nn.Module, buffers: bool) -> list[_Tensor]:
    """A module's parameters (or buffers) as the Rust flodl lists them: a leaf's own, a graph's over
    its nodes in execution order, each tensor once (torch-only buffers left out)."""
    from flodl.graph.graph import Graph

    if isinstance(module, Graph):
        return _graph_tensors(module, buffers)
    items = (
        module.named_buffers(recurse=False) if buffers else module.named_parameters(recurse=False)
    )
    return [(n, n, t) for n, t in items if n not in _NO_COUNTERPART_BUFFERS and t is not None]


def _graph_tensors(graph: Any, buffers: bool) -> list[_Tensor]:
    out: list[_Tensor] = []
    seen: set[int] = set()
    for node in _ordered(graph, _check(graph)):
        module = graph.module_of(node.id)
        if module is None:
            continue
        for short, path, tensor in _tensors(module, buffers):
            if id(tensor) not in seen:
                seen.add(id(tensor))
                out.append((short, f"{node.attr}.{path}", tensor))
    return out


def _check(graph: Any) -> list[tuple[Any, str, str | None]]:
    """(node, Rust node id, Rust module name or None) per node, in creation order."""
    from flodl.graph.graph import Graph

    out: list[tuple[Any, str, str | None]] = []
    for expected, node in enumerate(graph.nodes, start=1):
        counter = node.id.rsplit("_", 1)[-1]
        if counter != str(expected):
            raise _fail(graph, node, "its id does not follow the original's node numbering")
        if node.refs or node.writes_state:
            raise _fail(graph, node, "using() references are not mapped")
        if node.kind in _MODULE_STEP_KINDS:
            module = graph.module_of(node.id) if node.attr else None
            if module is None:
                name = "identity"
            elif isinstance(module, Graph):
                name = "graph"
            else:
                name = _leaf_name(graph, node, module)
            out.append((node, f"{name}_{counter}", name))
        elif node.kind == "add":
            out.append((node, node.id, None))
        elif node.kind == "merge":
            op = node.options.op
            if getattr(op, "kind", None) not in _MERGE_OPS:
                raise _fail(graph, node, f"the original merges only with ADD and MEAN, not {op}")
            out.append((node, node.id, None))
        else:
            raise _fail(graph, node, f"a {node.kind} step")
    return out


def _ordered(graph: Any, described: list[tuple[Any, str, str | None]]) -> list[Any]:
    """Nodes in the Rust flodl's execution order: Kahn's levels, each in node-index order."""
    index = {node.id: i for i, (node, _, _) in enumerate(described)}
    deps: list[set[int]] = [set() for _ in described]
    dependents: list[set[int]] = [set() for _ in described]
    for i, (node, _, _) in enumerate(described):
        for source in node.inputs:
            deps[i].add(index[source])
            dependents[index[source]].add(i)
    degree = [len(d) for d in deps]
    queue = [i for i, d in enumerate(degree) if d == 0]
    order: list[int] = []
    while queue:
        order += queue
        following = []
        for i in queue:
            for j in sorted(dependents[i]):
                degree[j] -= 1
                if degree[j] == 0:
                    following.append(j)
        queue = following
    return [described[i][0] for i in order]


def _text(hasher: Any, *parts: str) -> None:
    for part in parts:
        hasher.update(part.encode("utf-8"))
        hasher.update(b"\0")


def rust_structural_hash(graph: Any) -> str:
    """The Rust flodl's structural hash of ``graph`` (64 lower-case hex characters)."""
    return rust_layout(graph).hash


def _hash(graph: Any, described: list[tuple[Any, str, str | None]]) -> str:
    from flodl.graph.graph import Graph

    rust_id = {node.id: rid for node, rid, _ in described}
    name_of = {node.id: name for node, _, name in described}
    index = {node.id: i for i, (node, _, _) in enumerate(described)}
    h = hashlib.sha256()
    for node in _ordered(graph, described):
        h.update(rust_id[node.id].encode() + b"\0")
        name = name_of[node.id]
        if name is None:
            continue
        h.update(name.encode() + b"\0")
        module = graph.module_of(node.id) if node.attr else None
        if module is None:
            continue
        for marker, buffers in ((b"P", False), (b"B", True)):
            for short, _, tensor in sorted(_tensors(module, buffers), key=lambda t: t[0]):
                h.update(marker + short.encode() + b"\0")
                h.update(struct.pack(f"<{tensor.dim()}q", *tensor.shape))
        if isinstance(module, Graph):
            h.update(b"G" + rust_layout(module).hash.encode())
    h.update(b"EDGES")
    for node, rid, name in described:
        for port, source in enumerate(node.inputs):
            to_port = "input" if name is not None else f"input_{port}"
            _text(h, rust_id[source], "output", rid, to_port)
    h.update(b"TAGS")
    for tag, node_id in sorted(graph.tag_map.items()):
        _text(h, tag)
        h.update(struct.pack("<QQ", index[node_id], 0))
    entry, last = described[0][1], rust_id[graph.output_node]
    h.update(b"INPUTS")
    _text(h, "input", entry, "input")
    h.update(b"OUTPUTS")
    _text(h, "output", last, "output")
    return h.hexdigest()


def _qualified(
    graph: Any, described: list[tuple[Any, str, str | None]], buffers: bool
) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The Rust flodl's ``named_parameters`` (or ``named_buffers``) names, with this graph's."""
    rust_id = {node.id: rid for node, rid, _ in described}
    tags: dict[str, list[str]] = {}
    for tag, node_id in graph.tag_map.items():  # definition order
        tags.setdefault(node_id, []).append(tag)
    names: list[tuple[str, str]] = []
    aliases: dict[str, str] = {}
    seen: set[int] = set()
    for node in _ordered(graph, described):
        module = graph.module_of(node.id) if node.attr else None
        if module is None:
            continue
        prefixes = tags.get(node.id) or [rust_id[node.id]]
        items = _tensors(module, buffers)
        counts: dict[str, int] = {}
        for short, _, _ in items:
            counts[short] = counts.get(short, 0) + 1
        taken: dict[str, int] = {}
        for short, path, tensor in items:
            if id(tensor) in seen:
                continue
            seen.add(id(tensor))
            if counts[short] > 1:
                suffix = f"{short}_{taken.get(short, 0)}"
                taken[short] = taken.get(short, 0) + 1
            else:
                suffix = short
            mine = f"{node.attr}.{path}"
            names.append((f"{prefixes[0]}/{suffix}", mine))
            for other in prefixes[1:]:
                aliases[f"{other}/{suffix}"] = mine
    return names, aliases


def rust_layout(graph: Any) -> RustLayout:
    """Hash and entry names of ``graph`` as the Rust flodl computes them.

    Raises :class:`RustMappingError` naming the first node with no counterpart.

    >>> import flodl as fl
    >>> from torch import nn
    >>> from flodl.checkpoint.rust_graph import rust_layout
    >>> g = fl.FlowBuilder(nn.Linear(2, 3)).tag("h").through(nn.ReLU()).build()
    >>> layout = rust_layout(g)
    >>> layout.params, layout.hash == g.structural_hash(scheme="rust")
    ([('h/weight', 'h.weight'), ('h/bias', 'h.bias')], True)
    """
    if not hasattr(graph, "nodes") or not hasattr(graph, "tag_map"):
        raise RustMappingError(
            f"a {type(graph).__name__} is not a flodl Graph: only graphs have a Rust hash"
        )
    described = _check(graph)
    params, param_aliases = _qualified(graph, described, buffers=False)
    buffers, buffer_aliases = _qualified(graph, described, buffers=True)
    return RustLayout(_hash(graph, described), params, buffers, {**param_aliases, **buffer_aliases})
