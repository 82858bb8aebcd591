"""Errors of the graph layer: builder mistakes (raised by ``build()``) and bad graph inputs."""

from __future__ import annotations

from dataclasses import dataclass

from flodl.errors import FlodlError
from flodl.graph.callsite import CallSite


@dataclass(frozen=True)
class BuildIssue:
    """One rule broken while describing a graph: what, where (the builder call) and what to do."""

    rule: str
    site: CallSite | None
    method: str
    hint: str = ""

    def render(self) -> str:
        lines = [self.rule]
        if self.site is not None:
            lines.append(f"at {self.site} in .{self.method}(...)")
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n    ".join(lines)


class GraphBuildError(FlodlError):
    """A FlowBuilder chain broke a rule; raised by ``build()``, naming each offending call site.

    Every problem found is listed (``.issues``), each with the file:line of the builder call that
    caused it::

        >>> import flodl as fl
        >>> from torch import nn
        >>> try:
        ...     fl.FlowBuilder(nn.Linear(2, 2)).split(nn.ReLU()).merge(fl.MergeOp.ADD).build()
        ... except fl.GraphBuildError as err:
        ...     print(err.issues[0].rule)
        split requires at least 2 branches (got 1)
    """

    def __init__(self, issues: list[BuildIssue]) -> None:
        self.issues = list(issues)
        if len(self.issues) == 1:
            message = self.issues[0].render()
        else:
            body = "\n".join(f"  {i}. {issue.render()}" for i, issue in enumerate(self.issues, 1))
            message = f"the graph description has {len(self.issues)} problems:\n{body}"
        super().__init__(message)

    def __reduce__(self) -> tuple[type[GraphBuildError], tuple[list[BuildIssue]]]:
        return type(self), (self.issues,)  # survives pickling (e.g. from a worker process)


class GraphInputError(FlodlError, TypeError):
    """A graph was called with a missing or unexpected input (also a ``TypeError``)."""


class TraceError(FlodlError, KeyError):
    """A loop-trace name that names no loop or published trace, or one two loops publish.

    >>> import flodl as fl
    >>> from torch import nn
    >>> g = fl.FlowBuilder(nn.Linear(2, 2)).tag("out").build()
    >>> try:
    ...     g.traces("out")
    ... except fl.TraceError as err:
    ...     print(err)
    traces('out'): the tag is on a module node, not on a loop
    """

    def __str__(self) -> str:
        return str(self.args[0])


class NotBuiltError(FlodlError, TypeError, AttributeError):
    """A builder was used as what it describes: an unbuilt :class:`~flodl.FlowBuilder` called or
    used as a module, or an unfinished ``loop_body(...)`` / ``map(...)`` used as a FlowBuilder.
    The message names the call that finishes it (also a ``TypeError`` and an ``AttributeError``,
    what Python raises for such mistakes).

    >>> import flodl as fl
    >>> from torch import nn
    >>> try:
    ...     fl.FlowBuilder(nn.Linear(2, 2)).parameters()
    ... except fl.NotBuiltError as err:
    ...     print(str(err).split(":")[0])
    FlowBuilder has no .parameters()
    """
