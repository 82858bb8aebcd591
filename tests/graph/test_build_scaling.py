"""Building a graph and looking things up in it cost work linear in its size.

Work is counted as lines of flodl code executed (``sys.settrace``), never as time: a list scan
per node (a lookup by id, a child-graph search) makes the count grow quadratically, which these
tests see on any machine.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import flodl as fl


def lines_run(fn: Callable[[], Any]) -> int:
    """How many lines of flodl's own code ``fn()`` executes."""
    count = 0

    def local(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return local

    def trace(frame: Any, event: str, arg: Any) -> Any:
        return local if "/flodl/" in frame.f_code.co_filename else None

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def chain(n: int) -> fl.FlowBuilder:
    b = fl.FlowBuilder(nn.Linear(2, 2))
    for i in range(n - 1):
        b = b.through(nn.Identity()).tag(f"t{i}") if i % 2 else b.also(nn.Identity())
    return b


def with_children(n: int) -> fl.FlowBuilder:
    b = fl.FlowBuilder(nn.Identity())
    for i in range(n):
        b = b.through(fl.FlowBuilder(nn.Identity()).tag(f"x{i}").label(f"c{i}").build())
    return b


def deep(n: int) -> fl.FlowBuilder:
    g = fl.FlowBuilder(nn.Identity()).label("d0").build()
    for i in range(1, n):
        g = fl.FlowBuilder(g).through(nn.Identity()).label(f"d{i}").build()
    return fl.FlowBuilder(g)


def grows_linearly(work: Callable[[int], int], n: int = 100) -> tuple[int, int]:
    """(work at n, work at 4n): linear work is at most 4x (plus a constant) apart."""
    small, large = work(n), work(4 * n)
    assert large <= 4.4 * small, (small, large)
    return small, large


def test_building_is_linear_in_the_number_of_nodes():
    grows_linearly(lambda n: lines_run(lambda: chain(n).build()))


def test_describing_a_graph_is_linear_too():
    # tag() looks its node up by id: per node, never a scan of the nodes so far
    grows_linearly(lambda n: lines_run(lambda: chain(n)))


def test_building_over_many_child_graphs_is_linear():
    def work(n: int) -> int:
        b = with_children(n)
        return lines_run(b.build)

    grows_linearly(work)


def test_building_a_deep_nesting_is_linear_in_its_depth():
    def work(n: int) -> int:
        return lines_run(lambda: deep(n).build())

    grows_linearly(work, 25)


def test_node_lookups_and_child_paths_do_not_scan_the_graph():
    def lookups(n: int) -> int:
        b = with_children(n)
        g = b.build()
        ids = [node.id for node in g.nodes]
        labels = [f"c{i}" for i in range(0, n, 10)]

        def run() -> None:
            for node_id in ids[::10]:
                g.node(node_id)
                g.module_of(node_id)
            for label in labels:
                g.subgraph(label)

        return lines_run(run)

    grows_linearly(lookups)
    # the whole tree in one pass: children, their tags, every path
    grows_linearly(lambda n: lines_run(with_children(n).build().paths))


def test_a_large_graph_still_runs_and_finds_its_nodes():
    g = chain(400).build()
    assert g(torch.ones(1, 2)).shape == (1, 2)
    assert g.node("identity_400").id == "identity_400"
    assert g.module_of("linear_1") is g.linear_1
    c = with_children(30).build()
    assert list(c.children_graphs()) == [f"c{i}" for i in range(30)]
    assert c.validate_path("c29.x29").kind is fl.PathKind.TAG
