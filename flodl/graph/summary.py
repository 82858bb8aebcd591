"""``Graph.summary()``: a readable tree of nodes, tags, call sites and parameter shapes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from flodl.graph.nodes import MergeOptions

if TYPE_CHECKING:
    from flodl.graph.graph import Graph
    from flodl.graph.nodes import Ref


def _count(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    if n >= 1_000:
        return f"{n / 1e3:.1f}K"
    return str(n)


def _describe(module: nn.Module) -> str:
    extra = module.extra_repr()
    return f"{type(module).__name__}({extra})" if extra else type(module).__name__


def _params(module: nn.Module, indent: str, out: list[str]) -> None:
    from flodl.graph.graph import Graph

    for name, p in module.named_parameters(recurse=False):
        frozen = "" if p.requires_grad else "  [frozen]"
        out.append(f"{indent}{name} {list(p.shape)}{frozen}")
    for name, child in module.named_children():
        if isinstance(child, Graph):
            out.append(f"{indent}{name}: {summarize(child, indent)}")
            continue
        out.append(f"{indent}{name}: {_describe(child)}")
        _params(child, indent + "  ", out)


def _segment(graph: Graph, node: object, module: nn.Module | None) -> str:
    """The path segment naming ``node``: a child label, its first public tag, else its id."""
    from flodl.graph.graph import Graph

    if isinstance(module, Graph) and module.label:
        return module.label
    public = [t for t in node.tags if t not in graph.internal_tags]  # type: ignore[attr-defined]
    return public[0] if public else node.id  # type: ignore[attr-defined]


def summarize(graph: Graph, indent: str = "", prefix: str = "") -> str:
    """The summary text; ``prefix`` is the label path of ``graph`` in its tree (``"enc."``)."""
    from flodl.graph.graph import Graph

    params = list(graph.parameters())
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    title = f"Graph '{graph.label}'" if graph.label else "Graph"
    out = [
        f"{title} [hash {graph.short_hash()}] — {len(graph.nodes)} nodes, "
        f"{_count(total)} parameters ({_count(trainable)} trainable)"
    ]
    pad = indent + "  "
    for node in graph.nodes:
        module = graph.module_of(node.id) if node.attr else None
        what = _describe(module) if module is not None else node.kind
        if isinstance(node.options, MergeOptions):
            what = f"merge {node.options.op!r}"
        tags = f"  #{' #'.join(node.tags)}" if node.tags else ""
        refs = ""
        if node.refs:
            refs = "  using " + ", ".join(_ref_text(r) for r in node.refs)
        name = f" as '{node.attr}'" if node.attr and node.attr != node.id else ""
        site = f"  ({node.site})" if node.site else ""
        segment = _segment(graph, node, module)
        path = f"  [path: {prefix}{segment}]" if prefix or segment != node.id else ""
        out.append(f"{pad}{node.id}{name}: {what}{tags}{refs}{path}{site}")
        if isinstance(module, Graph):
            inner = f"{prefix}{module.label}." if module.label else prefix
            out.append(f"{pad}  {summarize(module, pad + '  ', inner)}")
        elif module is not None:
            _params(module, pad + "  ", out)
    return "\n".join(out)


def _ref_text(ref: Ref) -> str:
    """``ctx``, ``memory (previous call)``, ``heads [heads_0, heads_1]``."""
    text = ref.tag if ref.keyword is None else f"{ref.keyword}={ref.tag}"
    if ref.members is not None:
        text += " [" + ", ".join(m.tag for m in ref.members) + "]"
    return text + (" (previous call)" if ref.forward else "")
