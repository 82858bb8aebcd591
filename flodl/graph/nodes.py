"""The description of a graph: nodes, their inputs, refs and tags (no tensors, no modules)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flodl.graph.callsite import CallSite


@dataclass
class Ref:
    """A ``using`` reference: tag ``tag`` delivered positionally or as keyword ``keyword``.

    ``source`` is the node whose output (same pass) is delivered; ``None`` means a forward ref,
    read from the value the tag had at the end of the previous call.

    A ref to a tag group has ``members``: one ref per member tag, in member order, and delivers
    their values as one list.
    """

    tag: str
    keyword: str | None
    site: CallSite | None
    source: str | None = None
    members: list[Ref] | None = None

    @property
    def key(self) -> str:
        return self.keyword or self.tag

    @property
    def forward(self) -> bool:
        """Reads the previous call's value (for a group: at least one member does)."""
        return any(leaf.source is None for leaf in self.leaves())

    def leaves(self) -> list[Ref]:
        """The single-tag refs this ref reads: its members for a group, else itself."""
        return list(self.members) if self.members is not None else [self]


@dataclass
class Node:
    """One step of a graph.

    ``kind``: ``identity`` (the implicit entry), ``module`` (a step), ``input`` (auxiliary input),
    ``add`` (residual sum), ``merge``, ``loop``, ``gate``, ``switch`` or ``map``.
    ``attr`` is the attribute name of the node's module on the Graph (``None`` when it has none).
    """

    id: str
    kind: str
    method: str
    site: CallSite | None
    inputs: list[str] = field(default_factory=list)
    refs: list[Ref] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    attr: str | None = None
    branch: int | None = None  # position among the branches of a split / also_with

    @property
    def where(self) -> str:
        """``.through(...) at model.py:12`` — how the node came to be."""
        return f".{self.method}(...) at {self.site}" if self.site else f".{self.method}(...)"
