"""Graph trees: address parts of a composed model by label path to freeze, thaw, train or inspect.

``fl.Graph`` inherits :class:`TreeMethods`. Every method resolves its path strictly (see
:mod:`flodl.graph.paths`) and raises :class:`~flodl.graph.paths.PathError` when it names nothing,
before changing anything: a typo never "froze 0 parameters" silently.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from torch import nn

from flodl.graph.paths import PathError, PathKind, PathTarget, all_paths, resolve

if TYPE_CHECKING:
    from flodl.graph.graph import Graph


def _with_parameters(target: PathTarget, action: str) -> list[nn.Parameter]:
    params = target.parameters()
    if not params:
        what = f"node '{target.node.id}' ({target.node.kind})" if target.node else "it"
        raise PathError(
            f"{action}('{target.path}'): the path names {what}, which has no parameters — "
            "name the layer before it, or a subgraph label",
            target.path,
        )
    return params


def _freeze_records(owner: nn.Module) -> tuple[set[str], set[str]]:
    """The names of ``owner``'s parameters that freeze turned off, and of those it found fixed."""
    records = owner.__dict__.get("_flodl_freeze")
    if records is None:
        records = owner.__dict__["_flodl_freeze"] = (set(), set())
    return records


class TreeMethods:
    """Path-addressed operations on a graph tree (mixed into ``fl.Graph``)."""

    def validate_path(self, path: str) -> PathTarget:
        """Resolve ``path`` and return what it names (a :class:`~flodl.graph.paths.PathTarget`).

        >>> import flodl as fl
        >>> from torch import nn
        >>> enc = fl.FlowBuilder(nn.Linear(2, 4)).tag("hidden").label("encoder").build()
        >>> model = fl.FlowBuilder(enc).through(nn.Linear(4, 1)).build()
        >>> model.validate_path("encoder").kind, model.validate_path("encoder.hidden").kind
        (<PathKind.SUBGRAPH: 'subgraph'>, <PathKind.TAG: 'tag'>)
        """
        return resolve(self._self(), path)

    def paths(self) -> list[str]:
        """The graph-level paths from this graph: child labels, public tags and node ids, at
        every depth. Paths below a node (``gate_2.router.proj``) are valid too but not listed:
        they are the prefixes of ``named_parameters()``."""
        return all_paths(self._self())

    def subgraph(self, path: str) -> Graph:
        """The child Graph at ``path`` (``"encoder"``, ``"letter.read"``)."""
        target = self.validate_path(path)
        if target.kind is not PathKind.SUBGRAPH:
            raise PathError(
                f'path "{path}" resolves to a {target.kind.value}, not a subgraph (subgraphs are '
                "labelled graphs nested as steps: FlowBuilder(...).label('name'))",
                path,
            )
        return target.module  # type: ignore[return-value]

    def parameters_at(self, path: str) -> list[nn.Parameter]:
        """The parameters of what ``path`` names ([] for a tag on an add/merge/input node)."""
        return self.validate_path(path).parameters()

    def named_parameters_at(self, path: str) -> list[tuple[str, nn.Parameter]]:
        """``(name, parameter)`` pairs at ``path``, named relative to it (a child's own names)."""
        module = self.validate_path(path).module
        return list(module.named_parameters()) if module is not None else []

    def named_buffers_at(self, path: str) -> list[tuple[str, Any]]:
        """``(name, buffer)`` pairs at ``path``, named relative to it (BatchNorm running stats,
        ...); [] for a node that runs no module.

        >>> import flodl as fl
        >>> from torch import nn
        >>> enc = fl.FlowBuilder(nn.Linear(2, 4)).through(nn.BatchNorm1d(4)).tag("bn").label("enc").build()
        >>> model = fl.FlowBuilder(enc).through(nn.Linear(4, 1)).build()
        >>> [name for name, _ in model.named_buffers_at("enc.bn")]
        ['running_mean', 'running_var', 'num_batches_tracked']
        """
        module = self.validate_path(path).module
        return list(module.named_buffers()) if module is not None else []

    def freeze(self, path: str) -> int:
        """Stop training everything at ``path`` (``requires_grad = False``); returns the count.

        A path with no parameters raises instead of freezing nothing.

        >>> import flodl as fl
        >>> from torch import nn
        >>> enc = fl.FlowBuilder(nn.Linear(2, 4)).label("encoder").build()
        >>> model = fl.FlowBuilder(enc).through(nn.Linear(4, 1)).build()
        >>> model.freeze("encoder"), model.is_frozen("encoder")
        (2, True)
        """
        target = self.validate_path(path)
        params = _with_parameters(target, "freeze")
        # thaw undoes freeze, no more: a parameter already not training, unless an earlier
        # freeze did that, is fixed (a constant table) and stays so. Kept on the owning module
        # by name: deepcopy copies a module's attributes, not a parameter's.
        for owner in target.module.modules():  # type: ignore[union-attr]
            frozen, fixed = _freeze_records(owner)
            for name, p in owner._parameters.items():
                if p is None:
                    continue
                if p.requires_grad:
                    frozen.add(name)
                    fixed.discard(name)
                elif name not in frozen:
                    fixed.add(name)
        for p in params:
            p.requires_grad_(False)
        return len(params)

    def thaw(self, path: str) -> int:
        """Train everything at ``path`` again (``requires_grad = True``); returns how many
        parameters there train.

        Parameters that were already not training when :meth:`freeze` covered them (a fixed
        positional table, say) stay as they were: thaw undoes freeze, no more.

        >>> import flodl as fl
        >>> from torch import nn
        >>> model = fl.FlowBuilder(nn.Linear(2, 4)).tag("enc").through(nn.Linear(4, 1)).build()
        >>> _ = model.enc.bias.requires_grad_(False)  # fixed on purpose
        >>> model.freeze("enc"), model.thaw("enc"), model.enc.bias.requires_grad
        (2, 1, False)
        """
        target = self.validate_path(path)
        _with_parameters(target, "thaw")
        thawed: dict[int, nn.Parameter] = {}
        for owner in target.module.modules():  # type: ignore[union-attr]
            frozen, fixed = _freeze_records(owner)
            for name, p in owner._parameters.items():
                if p is not None and name not in fixed:
                    thawed[id(p)] = p
                    frozen.discard(name)
        for p in thawed.values():
            p.requires_grad_(True)
        return len(thawed)

    def is_frozen(self, path: str) -> bool:
        """True when ``path`` has parameters and none of them trains."""
        params = self.validate_path(path).parameters()
        return bool(params) and not any(p.requires_grad for p in params)

    def set_training_at(self, path: str, mode: bool = True) -> None:
        """``train(mode)`` on the module at ``path`` only (e.g. keep a frozen encoder in eval)."""
        target = self.validate_path(path)
        if target.module is None:
            raise PathError(
                f"set_training_at('{path}'): node '{target.node.id}' ({target.node.kind}) runs no "  # type: ignore[union-attr]
                "module, so it has no training mode",
                path,
            )
        target.module.train(mode)

    # ------------------------------------------------------------------ tree text
    def tree_summary(self) -> str:
        """The tree of labelled graphs with tags, parameter counts and frozen state.

        >>> import flodl as fl
        >>> from torch import nn
        >>> enc = fl.FlowBuilder(nn.Linear(2, 4)).tag("hidden").label("encoder").build()
        >>> model = fl.FlowBuilder(enc).through(nn.Linear(4, 1)).build()
        >>> print(model.tree_summary().splitlines()[2])
        +-- params: 17 in 4 tensors
        """
        graph = self._self()
        lines = ["=== Graph Tree ===", f"{graph.label or '(root)'} [hash: {graph.short_hash()}]"]
        _tree_lines(graph, "", lines)
        return "\n".join(lines) + "\n\n" + self.param_summary()

    def rich_tree(self) -> Any:
        """The tree of labelled graphs as a :class:`rich.tree.Tree` (``rich.print(model.rich_tree())``).

        >>> import flodl as fl, rich
        >>> from torch import nn
        >>> enc = fl.FlowBuilder(nn.Linear(2, 4)).tag("hidden").label("encoder").build()
        >>> model = fl.FlowBuilder(enc).through(nn.Linear(4, 1)).build()
        >>> rich.print(model.rich_tree())  # doctest: +ELLIPSIS
        (root) [...]  17 params, trainable
        └── encoder [...]  12 params, trainable  #hidden
        """
        from rich.markup import escape
        from rich.tree import Tree

        def label(graph: Graph, name: str) -> str:
            params = list(graph.parameters())
            tags = " ".join(f"#{t}" for t in graph.tag_map if t not in graph.internal_tags)
            state = _frozen_state(params)
            colour = "green" if state == "trainable" else "cyan"
            text = (
                f"[bold]{escape(name)}[/] [dim]\\[{graph.short_hash()}][/]  "
                f"{_count(params):,} params, [{colour}]{state}[/]"
            )
            return text + (f"  [blue]{escape(tags)}[/]" if tags else "")

        def grow(node: Tree, graph: Graph) -> None:
            for name, child in graph.children_graphs().items():
                grow(node.add(label(child, name)), child)

        root = self._self()
        tree = Tree(label(root, root.label or "(root)"))
        grow(tree, root)
        return tree

    def param_summary(self) -> str:
        """Parameter counts (elements) per child graph, with what is frozen."""
        graph = self._self()
        total = _count(graph.parameters())
        lines = ["=== Parameter Summary ===", f"Total: {total:,} parameters"]
        children = graph.children_graphs()
        if children:
            seen: set[int] = set()
            for label, child in children.items():
                params = list(child.parameters())
                seen |= {id(p) for p in params}
                lines.append(f"  {label}: {_line(params, total)}")
            own = [p for p in graph.parameters() if id(p) not in seen]
            if own:
                lines.append(f"  (own): {_line(own, total)}")
        return "\n".join(lines)

    def _self(self) -> Graph:
        return self  # type: ignore[return-value]


def _count(params: Iterator[nn.Parameter] | list[nn.Parameter]) -> int:
    return sum(p.numel() for p in params)


def _frozen_state(params: list[nn.Parameter]) -> str:
    frozen = sum(1 for p in params if not p.requires_grad)
    if not params or frozen == 0:
        return "trainable"
    return "frozen" if frozen == len(params) else f"{frozen}/{len(params)} tensors frozen"


def _line(params: list[nn.Parameter], total: int) -> str:
    n = _count(params)
    pct = 100.0 * n / total if total else 0.0
    return f"{n:,} ({pct:.1f}%)  {_frozen_state(params)}"


def _tree_lines(graph: Graph, indent: str, lines: list[str]) -> None:
    public = sorted(t for t in graph.tag_map if t not in graph.internal_tags)
    if public:
        lines.append(f"{indent}+-- tags: {', '.join(public)}")
    params = list(graph.parameters())
    if params:
        state = _frozen_state(params)
        suffix = "" if state == "trainable" else f" [{state}]"
        lines.append(f"{indent}+-- params: {_count(params):,} in {len(params)} tensors{suffix}")
    children = list(graph.children_graphs().items())
    for i, (label, child) in enumerate(children):
        cparams = list(child.parameters())
        mark = "  * frozen" if cparams and not any(p.requires_grad for p in cparams) else ""
        lines.append(f"{indent}+-- {label} [hash: {child.short_hash()}]{mark}")
        _tree_lines(child, indent + ("|   " if i < len(children) - 1 else "    "), lines)
