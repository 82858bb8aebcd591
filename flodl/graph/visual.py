"""Seeing a graph: GraphViz DOT/SVG (optionally coloured by profile), epoch-curve and tree HTML.

* ``dot()``: nodes shaped by kind, tags annotated, every nested graph a cluster (expanded), edges
  for the data flow, dashed edges for same-pass ``using`` refs and dotted ones for forward refs
  (from the node that writes the tag to the node that reads it on the next call). Labels are
  GraphViz HTML labels with every user string XML-escaped, so a ``<lambda>`` node or a tag with
  ``&`` in it renders instead of breaking the SVG.
* ``svg()`` / ``svg_with_profile()`` pipe that through the ``dot`` binary (Graphviz).
* ``plot_html()`` and ``html_view()`` need nothing installed: self-contained pages, no URLs.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from torch import nn

from flodl.errors import FlodlError
from flodl.files import write_text
from flodl.graph.errors import GraphvizError
from flodl.graph.nodes import InputOptions, MergeOptions, NodeKind
from flodl.graph.profile import Profile, format_duration

if TYPE_CHECKING:
    from flodl.graph.graph import Graph
    from flodl.graph.nodes import Node


_ACTIVATIONS = ("relu", "sigmoid", "tanh", "gelu", "silu", "elu", "softmax", "leakyrelu", "mish")
_NORMS = ("layernorm", "batchnorm", "rmsnorm", "groupnorm", "instancenorm")
PALETTE = (
    "#e74c3c", "#3498db", "#2ecc71", "#f39c12", "#9b59b6", "#1abc9c",
    "#e67e22", "#34495e", "#c0392b", "#2980b9", "#27ae60", "#d35400",
)  # fmt: skip


def esc(text: object) -> str:
    """XML-escape for GraphViz HTML labels and HTML pages."""
    return html.escape(str(text), quote=True).replace("&#x27;", "&#39;")


def _shape(graph: Graph, node: Node, module: nn.Module | None) -> tuple[str, str]:
    if node.kind in (NodeKind.IDENTITY, NodeKind.INPUT):
        return "invhouse", "#aed6f1"
    if node.kind in (NodeKind.ADD, NodeKind.MERGE):
        return "circle", "#d5dbdb"
    if node.kind is NodeKind.MAP:
        return "parallelogram", "#a9cce3"
    if node.kind is NodeKind.LOOP:
        return "box3d", "#d7bde2"
    if node.kind in (NodeKind.GATE, NodeKind.SWITCH):
        return "diamond", "#f5cba7"
    name = type(module).__name__.lower() if module is not None else ""
    if any(a == name for a in _ACTIVATIONS):
        return "ellipse", "#fdebd0"
    if any(n == name for n in _NORMS):
        return "box", "#d5f5e3"
    return "box", "#eaecee"


def _count(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M params"
    if n >= 1_000:
        return f"{n / 1e3:.1f}K params"
    return f"{n} params"


def _describe(graph: Graph, node: Node, module: nn.Module | None) -> str:
    options = node.options
    if node.kind is NodeKind.IDENTITY:
        return "input"
    if isinstance(options, InputOptions):
        return f"input '{options.name}'"
    if node.kind is NodeKind.ADD:
        return "+"
    if isinstance(options, MergeOptions):
        op = options.op
        return f"merge {op.kind}" + (f"(dim={op.dim})" if op.dim is not None else "")
    if module is None:
        return node.kind
    fn = getattr(module, "fn", None)
    if callable(fn) and type(module).__name__ == "Fn":  # a wrapped callable: show its name
        return f"fn {getattr(fn, '__name__', type(fn).__name__)}"
    extra = module.extra_repr().replace("\n", " ")
    if len(extra) > 48:
        extra = extra[:45] + "..."
    return f"{type(module).__name__}({extra})" if extra else type(module).__name__


def heat(ratio: float) -> str:
    """Green -> orange -> red for a 0..1 share of the slowest node's time."""
    r = min(max(ratio, 0.0), 1.0)
    lo, hi, u = ((39, 174, 96), (243, 156, 18), 2 * r) if r < 0.5 else (
        (243, 156, 18), (231, 76, 60), 2 * (r - 0.5))  # fmt: skip
    return "#" + "".join(f"{int(a + (b - a) * u):02x}" for a, b in zip(lo, hi, strict=True))


class _Dot:
    def __init__(self, profile: Profile | None) -> None:
        self.lines: list[str] = []
        self.profile = profile
        self.max_t = 0.0
        if profile is not None:
            self.max_t = max(_all_times(profile), default=0.0)

    def graph(self, graph: Graph, prefix: str, profile: Profile | None, depth: int) -> None:
        from flodl.graph.graph import Graph as _Graph

        pad = "  " * depth
        times = profile.by_node() if profile is not None else {}
        for node in graph.nodes:
            module = graph.module_of(node.id) if node.attr else None
            nid = prefix + node.id
            if isinstance(module, _Graph):
                seg = module.label or node.id
                title = f"{seg}" + (f" [{node.id}]" if module.label else "")
                tags = "".join(f" #{t}" for t in node.tags)
                self.lines.append(f'{pad}subgraph "cluster_{nid}" {{')
                self.lines.append(
                    f"{pad}  label=<<B>{esc(title)}</B>{esc(tags)}>; style=rounded; "
                    'color="#7f8c8d"; fontname="Helvetica";'
                )
                sub = profile.children.get(seg) if profile is not None else None
                self.graph(module, nid + "/", sub, depth + 1)
                self.lines.append(f"{pad}}}")
                continue
            shape, fill = _shape(graph, node, module)
            rows = [f"<B>{esc(node.id)}</B>", esc(_describe(graph, node, module))]
            if node.tags:
                rows.append(esc(" ".join(f"#{t}" for t in node.tags)))
            if module is not None:
                n = sum(p.numel() for p in module.parameters())
                if n:
                    rows.append(esc(f"[{_count(n)}]"))
            if node.id in times:
                t = times[node.id]
                rows.append(esc(format_duration(t)))
                fill = heat(t / self.max_t if self.max_t > 0 else 0.0)
            label = "<BR/>".join(rows)
            self.lines.append(
                f'{pad}"{nid}" [id="{nid}" shape={shape} fillcolor="{fill}" label=<{label}>];'
            )

    def entry_of(self, graph: Graph, node_id: str, prefix: str) -> str:
        from flodl.graph.graph import Graph as _Graph

        module = graph.module_of(node_id) if graph.node(node_id).attr else None
        if isinstance(module, _Graph):
            return self.entry_of(module, module.nodes[0].id, f"{prefix}{node_id}/")
        return prefix + node_id

    def edges(self, graph: Graph, prefix: str) -> None:
        from flodl.graph.graph import Graph as _Graph

        def entry(node_id: str) -> str:
            return self.entry_of(graph, node_id, prefix)

        def exit_(node_id: str) -> str:
            module = graph.module_of(node_id) if graph.node(node_id).attr else None
            if isinstance(module, _Graph):
                return _out(module, f"{prefix}{node_id}/")
            return prefix + node_id

        for node in graph.nodes:
            module = graph.module_of(node.id) if node.attr else None
            for src in node.inputs:
                self.lines.append(f'  "{exit_(src)}" -> "{entry(node.id)}";')
            for ref in node.refs:
                for leaf in ref.leaves():
                    # a group member's edge says both: "heads: heads_1"
                    text = f"{ref.key}: {leaf.tag}" if ref.members is not None else ref.key
                    if leaf.source is not None:
                        self.lines.append(
                            f'  "{exit_(leaf.source)}" -> "{entry(node.id)}" [style=dashed '
                            f'color="#2980b9" fontcolor="#2980b9" label=<{esc(text)}>];'
                        )
                    else:
                        writer = graph.tag_map[leaf.tag]
                        self.lines.append(
                            f'  "{exit_(writer)}" -> "{entry(node.id)}" [style=dotted '
                            f'color="#e67e22" fontcolor="#e67e22" constraint=false '
                            f"label=<{esc(text if ref.members else leaf.tag)} (previous call)>];"
                        )
            if isinstance(module, _Graph):
                self.edges(module, f"{prefix}{node.id}/")


def _out(graph: Graph, prefix: str) -> str:
    from flodl.graph.graph import Graph as _Graph

    node_id = graph.output_node
    module = graph.module_of(node_id) if graph.node(node_id).attr else None
    if isinstance(module, _Graph):
        return _out(module, f"{prefix}{node_id}/")
    return prefix + node_id


def _all_times(profile: Profile) -> list[float]:
    out = [n.seconds for n in profile.nodes if n.kind != "graph"]  # graphs are clusters
    for child in profile.children.values():
        out += _all_times(child)
    return out


def render_dot(graph: Graph, profile: Profile | None = None) -> str:
    d = _Dot(profile)
    title = graph.label or "graph"
    if profile is not None:
        title += f" — forward {format_duration(profile.total)}"
    d.lines += [
        "digraph flodl {",
        "  rankdir=TB; compound=true;",
        f'  label=<{esc(title)}>; labelloc=t; fontname="Helvetica"; fontsize=14;',
        '  node [fontname="Helvetica" fontsize=11 style=filled];',
        '  edge [fontname="Helvetica" fontsize=9 color="#2c3e50"];',
    ]
    d.graph(graph, "", profile, 1)
    if (
        graph.nodes[0].kind is not NodeKind.IDENTITY
    ):  # the entry is a module: draw where data comes in
        d.lines.append('  "input" [id="input" shape=invhouse fillcolor="#aed6f1" label=<input>];')
        d.lines.append(f'  "input" -> "{d.entry_of(graph, graph.nodes[0].id, "")}";')
    d.lines.append('  "output" [id="output" shape=house fillcolor="#a9dfbf" label=<output>];')
    d.edges(graph, "")
    d.lines.append(f'  "{_out(graph, "")}" -> "output";')
    d.lines.append("}")
    return "\n".join(d.lines) + "\n"


def run_dot(source: str, fmt: str = "svg") -> str:
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizError(
            "Graphviz's `dot` binary was not found on PATH — install Graphviz (apt install "
            "graphviz / brew install graphviz / conda install graphviz), or use graph.dot() for "
            "the text, or graph.html_view() which needs nothing installed"
        )
    try:
        done = subprocess.run(
            [exe, f"-T{fmt}"], input=source, capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GraphvizError(f"could not run {exe}: {exc}") from exc
    if done.returncode != 0:
        raise GraphvizError(f"dot exited with {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _write(path: str | os.PathLike[str] | None, text: str) -> None:
    if path is not None:
        write_text(path, text)


class VisualMethods:
    """``dot``, ``svg``, ``svg_with_profile``, ``plot_html``, ``html_view`` (mixed into Graph)."""

    def dot(self) -> str:
        """The graph as GraphViz DOT text (nested graphs as clusters).

        >>> import flodl as fl
        >>> from torch import nn
        >>> g = fl.FlowBuilder(nn.Linear(2, 2)).tag("hidden").through(nn.ReLU()).build()
        >>> '"linear_1" -> "relu_2";' in g.dot()
        True
        """
        return render_dot(self._tree())  # type: ignore[attr-defined]

    def svg(self, path: str | Path | None = None) -> str:
        """Render :meth:`dot` with Graphviz; writes ``path`` when given; returns the SVG text."""
        text = run_dot(self.dot())
        _write(path, text)
        return text

    def svg_with_profile(self, path: str | Path | None = None) -> str:
        """Like :meth:`svg`, nodes coloured green -> red by the last profiled forward's times."""
        profile = self._tree().profile()  # type: ignore[attr-defined]
        if profile is None:
            raise FlodlError(
                "svg_with_profile: no profile yet — call enable_profiling() and run a forward pass"
            )
        text = run_dot(render_dot(self._tree(), profile))  # type: ignore[attr-defined]
        _write(path, text)
        return text

    def plot_html(self, path: str | Path, names: list[str] | None = None) -> Path:
        """Write a self-contained HTML page of epoch curves (no network needed to view it).

        ``names``: metrics, tag groups or paths; default every flushed metric of the tree.
        """
        from flodl.graph.plot import curves_page

        graph = self._tree()  # type: ignore[attr-defined]
        if names is None:
            series = {k: v for k, v in _histories(graph).items() if v}
        else:
            series = {}
            for name in graph._expand(tuple(names)):
                values = graph.trend(name).values
                if values:
                    series[name] = list(values)
        if not series:
            raise FlodlError("plot_html: no epoch data to plot — record metrics and flush() first")
        text = curves_page(graph.label or "Training curves", series)
        _write(path, text)
        return Path(path)

    def html_view(self, path: str | Path | None = None) -> str:
        """A self-contained HTML view of the graph tree (collapsible subgraphs, no Graphviz)."""
        from flodl.graph.plot import tree_page

        text = tree_page(self._tree())  # type: ignore[attr-defined]
        _write(path, text)
        return text


def _histories(graph: Graph, prefix: str = "") -> dict[str, list[float]]:
    out = {prefix + k: list(v) for k, v in graph._metrics.history.items()}
    for label, child in graph.children_graphs().items():
        out.update(_histories(child, f"{prefix}{label}."))
    return out


def json_for_script(value: object) -> str:
    """JSON safe inside a <script> element (no ``</script>``, no ``<!--``)."""
    return (
        json.dumps(value, allow_nan=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
    )
