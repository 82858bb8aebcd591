"""The description of a graph: nodes, their inputs, refs and tags (no tensors, no modules).

A node's kind is a :class:`NodeKind` and its settings one frozen options object per kind
(:class:`LoopOptions` for a loop, ...); the kind follows from the options, so the two cannot
disagree. Both are ``str``-compatible where they are stored: a pickled node keeps the kind as
its plain name and the options as a plain dict (:meth:`Node.serialized_options`), so pickles,
checkpoints and structural hashes read the same as before the kinds were typed.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from flodl.graph.callsite import CallSite
from flodl.graph.merge import MergeOp


class NodeKind(enum.StrEnum):
    """What a node does. The value is the kind's name in pickles, hashes and drawings."""

    IDENTITY = "identity"  # the implicit entry: forward's first argument
    MODULE = "module"  # a step: one module call
    INPUT = "input"  # an auxiliary input of forward
    ADD = "add"  # a residual sum (also, also_with)
    MERGE = "merge"  # several open streams combined by a MergeOp
    LOOP = "loop"  # a body repeated: for_n, while_cond, until_cond
    GATE = "gate"  # soft routing: a router's weights over experts
    SWITCH = "switch"  # hard routing: a selector picks one branch
    MAP = "map"  # a body applied element-wise
    SCAN = "scan"  # a cell run along a sequence dimension
    SCAN_STATE = "scan_state"  # a scan's final state (no code of its own)


class LoopKind(enum.StrEnum):
    """How a loop decides to stop."""

    FOR_N = "for_n"  # exactly n iterations
    WHILE = "while"  # the condition is checked before each iteration
    UNTIL = "until"  # the condition is checked after each iteration


class MapMode(enum.StrEnum):
    """What a map applies its body to."""

    EACH = "each"  # each element along dim 0 of the stream
    OVER = "over"  # each element of a tagged value
    SLICES = "slices"  # n slices of the last dimension


def _plain(value: Any) -> Any:
    """An enum member as its plain value (the interned name itself), anything else as is."""
    return value.value if isinstance(value, enum.Enum) else value


@dataclass(frozen=True)
class Options:
    """The settings of one node kind; ``KIND`` names the kind they belong to."""

    KIND: ClassVar[NodeKind]

    def serialized(self) -> dict[str, Any]:
        """The settings as a plain dict in field order, enums as their names: what pickles and
        the structural hash store."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_serialized(cls, items: Mapping[str, Any]) -> Options:
        """The inverse of :meth:`serialized` (enum fields convert in ``__post_init__``)."""
        return cls(**items)


@dataclass(frozen=True)
class IdentityOptions(Options):
    KIND: ClassVar[NodeKind] = NodeKind.IDENTITY


@dataclass(frozen=True)
class ModuleOptions(Options):
    KIND: ClassVar[NodeKind] = NodeKind.MODULE


@dataclass(frozen=True)
class InputOptions(Options):
    KIND: ClassVar[NodeKind] = NodeKind.INPUT
    name: str  # the keyword argument of forward


@dataclass(frozen=True)
class AddOptions(Options):
    KIND: ClassVar[NodeKind] = NodeKind.ADD


@dataclass(frozen=True)
class MergeOptions(Options):
    KIND: ClassVar[NodeKind] = NodeKind.MERGE
    op: MergeOp


@dataclass(frozen=True)
class LoopOptions(Options):
    KIND: ClassVar[NodeKind] = NodeKind.LOOP
    kind: LoopKind
    n: int  # the iteration count (for_n) or the most iterations (while, until)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", LoopKind(self.kind))


@dataclass(frozen=True)
class GateOptions(Options):
    KIND: ClassVar[NodeKind] = NodeKind.GATE
    n: int  # the number of experts


@dataclass(frozen=True)
class SwitchOptions(Options):
    KIND: ClassVar[NodeKind] = NodeKind.SWITCH
    n: int  # the number of branches


@dataclass(frozen=True)
class MapOptions(Options):
    KIND: ClassVar[NodeKind] = NodeKind.MAP
    mode: MapMode
    batched: bool  # one call on the whole tensor instead of one per element
    n: int  # the number of slices (slices mode; 0 otherwise)
    over: str | None  # the tag mapped over (over mode)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", MapMode(self.mode))


@dataclass(frozen=True)
class ScanOptions(Options):
    KIND: ClassVar[NodeKind] = NodeKind.SCAN
    dim: int  # the sequence dimension
    state: str | None  # the node holding the initial state (None: the cell's own zeros)
    keep: str = "all"  # "all": every step's output, stacked; "last": the final step's only

    def serialized(self) -> dict[str, Any]:
        # ``keep`` only when it is not the default: graphs made before it existed keep their
        # pickles and their structural hash (which checkpoints carry).
        items = super().serialized()
        if self.keep == "all":
            del items["keep"]
        return items


@dataclass(frozen=True)
class ScanStateOptions(Options):
    KIND: ClassVar[NodeKind] = NodeKind.SCAN_STATE


OPTIONS: dict[NodeKind, type[Options]] = {
    cls.KIND: cls
    for cls in (
        IdentityOptions,
        ModuleOptions,
        InputOptions,
        AddOptions,
        MergeOptions,
        LoopOptions,
        GateOptions,
        SwitchOptions,
        MapOptions,
        ScanOptions,
        ScanStateOptions,
    )
}
"""The options class of each kind (every kind has one)."""

OptionsT = TypeVar("OptionsT", bound=Options)


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

    ``options`` holds the kind's settings (one :class:`Options` subclass per :class:`NodeKind`);
    :attr:`kind` follows from it. ``attr`` is the attribute name of the node's module on the
    Graph (``None`` when it has none). ``writes_state`` lists the tags whose value this node
    stores for the next call (forward refs read them).
    """

    id: str
    method: str
    site: CallSite | None
    options: Options
    inputs: list[str] = field(default_factory=list)
    refs: list[Ref] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    attr: str | None = None
    branch: int | None = None  # position among the branches of a split / also_with
    writes_state: list[str] = field(default_factory=list)

    @property
    def kind(self) -> NodeKind:
        return self.options.KIND

    def opts(self, cls: type[OptionsT]) -> OptionsT:
        """The options, checked to be of ``cls`` (a typed view for the code that knows the kind)."""
        options = self.options
        if not isinstance(options, cls):
            raise TypeError(f"node '{self.id}' is a {self.kind} node, not a {cls.KIND} node")
        return options

    @property
    def where(self) -> str:
        """``.through(...) at model.py:12`` — how the node came to be."""
        return f".{self.method}(...) at {self.site}" if self.site else f".{self.method}(...)"

    def serialized_options(self) -> dict[str, Any]:
        """The options as one plain dict, ``writes_state`` last when there is any: the form
        pickles and the structural hash store."""
        items = self.options.serialized()
        if self.writes_state:
            items["writes_state"] = self.writes_state
        return items

    def __getstate__(self) -> dict[str, Any]:
        # Plain names and a plain dict, in the order of the fields before kinds were typed:
        # pickles stay byte for byte the same, and older pickles load.
        return {
            "id": self.id,
            "kind": self.kind.value,
            "method": self.method,
            "site": self.site,
            "inputs": self.inputs,
            "refs": self.refs,
            "tags": self.tags,
            "options": self.serialized_options(),
            "attr": self.attr,
            "branch": self.branch,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        items = dict(state["options"])
        writes = items.pop("writes_state", [])
        kept = {k: v for k, v in state.items() if k not in ("kind", "options")}
        options = OPTIONS[NodeKind(state["kind"])].from_serialized(items)
        vars(self).update(kept, options=options, writes_state=writes)
