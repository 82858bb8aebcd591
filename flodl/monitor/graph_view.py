"""The model graph the dashboard shows: Graphviz's SVG, or the HTML tree view that needs nothing.

A flodl Graph draws an SVG through Graphviz's ``dot`` (``graph.svg()``) and, with nothing
installed, a self-contained HTML view of its tree (``graph.html_view()``). The monitor prefers
the SVG; when it cannot be drawn (no Graphviz), the HTML view keeps the graph card from staying
empty. The page shows the SVG through ``<img>`` and the HTML view in a sandboxed ``<iframe>``
(no scripts, no same-origin access), so neither can run code in the dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["GraphView", "render_graph_view"]


@dataclass(frozen=True)
class GraphView:
    """One rendering of a graph: ``kind`` is ``"svg"`` or ``"html"``; ``text`` the document."""

    kind: Literal["svg", "html"]
    text: str


def render_graph_view(graph: Any) -> tuple[GraphView | None, Exception | None]:
    """The best view ``graph`` offers, and the error that kept it from being an SVG (if any).

    >>> class NoGraphviz:
    ...     def svg(self):
    ...         raise RuntimeError("dot not found")
    ...     def html_view(self):
    ...         return "<!DOCTYPE html><p>tree</p>"
    >>> view, error = render_graph_view(NoGraphviz())
    >>> view.kind, str(error)
    ('html', 'dot not found')
    """
    svg_error: Exception | None = None
    try:
        svg = _call_text(graph, "svg")
    except Exception as err:  # no Graphviz, a failing dot: try the view that needs nothing
        svg, svg_error = None, err
    if svg:
        return GraphView("svg", svg), None
    try:
        page = _call_text(graph, "html_view")
    except Exception:  # the SVG's error is the one worth reporting
        page = None
    return (GraphView("html", page) if page else None), svg_error


def _call_text(graph: Any, method: str) -> str | None:
    render = getattr(graph, method, None)
    if not callable(render):
        return None
    text = render()
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return text if isinstance(text, str) and text.strip() else None
