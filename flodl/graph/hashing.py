"""``structural_hash``: a SHA-256 of a graph's architecture, stable across processes and builds.

It covers node ids and kinds, every module's type, hyper-parameters (``extra_repr``) and
parameter/buffer shapes (recursively), merge ops, loop kinds and counts, map modes, edges, refs,
tags, inputs and the output. It leaves out parameter values, dtype, device, labels and state.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from flodl.graph.graph import Graph


def _module_fingerprint(module: nn.Module, out: list[str], prefix: str = "") -> None:
    from flodl.graph.graph import Graph

    kind = type(module)
    out.append(f"M{prefix}|{kind.__module__}.{kind.__qualname__}")
    if isinstance(module, Graph):
        out.append(f"G{module.structural_hash()}")
        return
    out.append(f"R{module.extra_repr()}")
    for name, p in sorted(module.named_parameters(recurse=False)):
        out.append(f"P{name}|{tuple(p.shape)}")
    for name, b in sorted(module.named_buffers(recurse=False)):
        out.append(f"B{name}|{tuple(b.shape)}")
    for name, child in module.named_children():
        _module_fingerprint(child, out, f"{prefix}.{name}")


def structural_hash(graph: Graph) -> str:
    parts: list[str] = []
    for node in graph.nodes:
        options = sorted((k, repr(v)) for k, v in node.options.items())
        parts.append(f"N{node.id}|{node.kind}|{options}|{node.inputs}")
        for ref in node.refs:
            parts.append(f"r{ref.tag}|{ref.keyword}|{ref.source}")
            for member in ref.members or ():
                parts.append(f"m{member.tag}|{member.source}")
        module = graph.module_of(node.id)
        if module is not None:
            _module_fingerprint(module, parts)
    parts.append("TAGS")
    parts += [f"{tag}|{node_id}" for tag, node_id in sorted(graph.tag_map.items())]
    parts.append(f"INPUTS|{graph.inputs}|OUTPUT|{graph.output_node}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()
