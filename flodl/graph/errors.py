"""Errors of the graph layer: builder mistakes (raised by ``build()``), bad graph inputs, paths
and tags that name nothing, and graphs that cannot be pickled, drawn or trained.

Each derives from :class:`flodl.FlodlError`; a builtin in parentheses is a second base (what
plain Python raises for the same mistake, so existing ``except`` clauses still catch it)::

    FlodlError
     ├── GraphBuildError                        a FlowBuilder chain broke a rule (``.issues``)
     ├── GraphInputError (TypeError)            a graph called with a missing/unexpected input
     ├── NotBuiltError (TypeError, AttributeError)  a builder used as the graph it describes
     ├── TraceError (KeyError)                  a loop-trace name that names no loop
     ├── PathError (KeyError)                   a label path that names nothing (``.suggestions``)
     ├── UnknownTagError (KeyError)             a tag the graph does not have
     ├── GraphPickleError (pickle.PicklingError)  a step pickle cannot store (a lambda)
     ├── GraphvizError                          Graphviz's ``dot`` is missing or failed
     ├── TrainingNotSetUpError (RuntimeError)   a training method before ``fl.Trainer.setup``
     └── GraphStateError (RuntimeError)         state across calls where it cannot be right
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

from flodl.errors import FlodlError
from flodl.graph.callsite import CallSite

__all__ = [
    "BuildIssue",
    "GraphBuildError",
    "GraphInputError",
    "GraphPickleError",
    "GraphStateError",
    "GraphvizError",
    "NotBuiltError",
    "PathError",
    "TraceError",
    "TrainingNotSetUpError",
    "UnknownTagError",
]


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


class UnknownTagError(FlodlError, KeyError):
    """A tag name that the graph does not have."""

    def __str__(self) -> str:
        return str(self.args[0])


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

    def __reduce__(self):
        return _rebuild_path_error, (type(self), self.args[0], self.path)


def _rebuild_path_error(cls: type[PathError], message: str, path: str) -> PathError:
    err = cls.__new__(cls)
    FlodlError.__init__(err, message)
    err.path, err.suggestions = path, []
    return err


class GraphPickleError(FlodlError, pickle.PicklingError):
    """A graph holds a step that pickle cannot store (a lambda or a local function)."""


class TrainingNotSetUpError(FlodlError, RuntimeError):
    """A Graph-mode training method was called on a graph that ``fl.Trainer.setup`` has not seen."""


class GraphvizError(FlodlError):
    """Graphviz's ``dot`` is missing or failed to render."""


class GraphStateError(FlodlError, RuntimeError):
    """A graph that carries state across calls was run where that state cannot be right: rerun
    while autograd runs a backward, as activation checkpointing (``torch.utils.checkpoint``)
    recomputes a forward. The state that forward read was replaced when it ran, so the rerun
    would read the next call's and give wrong gradients (also a ``RuntimeError``)."""
