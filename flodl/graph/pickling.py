"""Why a graph cannot be pickled, said where the user pickles it.

``pickle`` (and ``torch.save``, which pickles) stores a function by its importable name, so a
lambda or a function defined inside another function cannot be stored. A graph with such a step
(``.through(lambda t: t[0])``) would fail deep inside pickle with "Can't pickle <function
<lambda>>" and no word of which step. Instead, :meth:`flodl.Graph.__getstate__` puts a
:class:`PickleGuard` first in the state: pickling it raises :class:`GraphPickleError` naming each
offending node, where it was added, and what to use instead. A deep copy does not pickle (it
shares functions), so ``copy.deepcopy`` keeps working: the guard copies to nothing.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NoReturn

from flodl.graph.errors import GraphPickleError
from flodl.nn.fn import Fn

if TYPE_CHECKING:
    from flodl.graph.graph import Graph

GUARD_KEY = "_pickle_guard"


def _unstorable(fn: Any) -> str | None:
    """Why pickle cannot store ``fn`` by name (None when it can, as far as one can tell)."""
    if isinstance(fn, functools.partial):
        return _unstorable(fn.func)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(qualname, str) or not hasattr(fn, "__code__"):
        return None
    if "<lambda>" in qualname:
        return "a lambda"
    if "<locals>" in qualname:
        return f"the local function {qualname}"
    return None


def _where(fn: Any) -> str:
    code = getattr(getattr(fn, "func", fn), "__code__", None)
    return f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""


def unpicklable_steps(graph: Graph) -> list[str]:
    """One line per step of ``graph`` (nested modules included) that pickle cannot store."""
    lines = []
    for node in graph.nodes:
        module = graph.module_of(node.id) if node.attr else None
        if module is None:
            continue
        for name, sub in module.named_modules():
            if isinstance(sub, Fn) and (why := _unstorable(sub.fn)) is not None:
                path = f"{node.attr}.{name}" if name else node.attr
                lines.append(f"  node '{node.id}' ({path}, added by {node.where}) runs {why}"
                             f"{_where(sub.fn)}")  # fmt: skip
    return lines


class PickleGuard:
    """Raises :class:`GraphPickleError` when pickled; deep-copies to ``None``."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise GraphPickleError(self.message)

    def __deepcopy__(self, memo: dict[int, Any]) -> None:
        return None


def guard(graph: Graph) -> PickleGuard | None:
    """A guard for ``graph``'s pickled state, or None when every step can be stored."""
    lines = unpicklable_steps(graph)
    if not lines:
        return None
    return PickleGuard(
        "this graph cannot be pickled or torch.save()d: pickle stores functions by their "
        "importable name, and these steps have none:\n"
        + "\n".join(lines)
        + "\n  use fl.nn.Select(i) for one element of a tuple output, operator.itemgetter(i), "
        "a module-level function, or an nn.Module; or save the weights only "
        "(model.save_checkpoint(path) or torch.save(model.state_dict(), path))"
    )
