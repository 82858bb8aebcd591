"""Read a package's public API from its source with griffe: no import, no torch.

What is public: starting from the root package, the names in each module's ``__all__`` plus the
names it re-exports explicitly with ``from x import name as name`` (the PEP 484 convention: a
subpackage's own helper, ``fl.train.current``, that the root's star import leaves out); without
``__all__``, its non-underscore names that are defined in the package. Star
re-exports are followed, so ``flodl.FlowBuilder`` and ``flodl.graph.FlowBuilder`` are one entry
(path ``flodl.FlowBuilder``, alias ``flodl.graph.FlowBuilder``). Classes that exported methods
return (a loop builder, a trainer builder) are included with ``exported: false`` so a chain
``FlowBuilder(...).loop_body(b).for_n(3)`` can be followed.

A package whose ``__init__`` imports a name that is also one of its submodules
(``from flodl.optim.param_groups import param_groups``) binds the attribute to the imported
object: ``fl.optim.param_groups`` is the function, as at run time. The submodule stays importable
(``from flodl.optim.param_groups import ...``) but is not part of the attribute surface.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from fdl.apiref.docstrings import split_examples
from fdl.apiref.model import ApiEntry, ApiReference, Member, ModuleInfo

if TYPE_CHECKING:
    import griffe

    from fdl.apiref.source import PackageSource

_SELF_NAMES = {"Self", "typing.Self", "typing_extensions.Self"}

# Bases whose constructor accepts no arguments: a subclass without its own __init__ is built
# with ``Cls()`` (nn.Module.__init__ rejects any argument).
_NO_ARGUMENT_BASES = frozenset({"object", "torch.nn.Module", "torch.nn.modules.module.Module"})


def extract(source: PackageSource) -> ApiReference:
    """The :class:`ApiReference` of ``source``'s package."""
    import griffe

    logging.getLogger("griffe").setLevel(logging.ERROR)
    loader = griffe.GriffeLoader(search_paths=[str(source.root)])
    root = loader.load(source.name, try_relative_path=False)
    loader.resolve_aliases(implicit=False, external=False)
    assert isinstance(root, griffe.Module)  # loading a package by name gives its module
    return _Extractor(source, root).run()


class _Extractor:
    def __init__(self, source: PackageSource, root: griffe.Module) -> None:
        self.source = source
        self.root = root
        self.package = source.name
        self.entries: dict[str, ApiEntry] = {}  # canonical path -> entry
        self.modules: dict[str, ModuleInfo] = {}

    # -- walking modules ------------------------------------------------------------------
    def run(self) -> ApiReference:
        queue: deque[tuple[Any, str, bool]] = deque([(self.root, self.package, True)])
        seen: set[str] = set()
        imports: dict[str, set[str]] = {}
        while queue:
            module, public_path, exported = queue.popleft()
            if public_path in seen:
                continue
            seen.add(public_path)
            imports[public_path] = {str(target) for target in module.imports.values()}
            public = self._public_members(module)
            names = [name for name, _ in public]
            listed = set(names)
            for name, target in public:
                if target is None:
                    continue
                if target.is_module:
                    queue.append((target, f"{public_path}.{name}", exported))
                elif exported:
                    self._add(target, f"{public_path}.{name}", exported=True)
            for name, sub in module.modules.items():
                if not name.startswith("_") and not sub.is_alias:
                    if name not in listed:
                        names.append(name)
                    hidden = _shadowing_import(module, name) is not None
                    # A subpackage with its own ``__all__`` is public even when its parent
                    # leaves it out of ``__all__`` (an optional extra such as ``flodl.hf``,
                    # which a star import must not pull in with its dependencies).
                    extra = sub.is_subpackage and sub.exports is not None
                    shown = exported and (name in listed or extra) and not hidden
                    queue.append((sub, f"{public_path}.{name}", shown))
            self.modules[public_path] = ModuleInfo(
                path=public_path,
                file=self._relfile(module),
                doc=_summary(module),
                names=sorted(names),
                exported=exported,
            )
        self._mark_loaded(imports)
        self._add_returned_helpers()
        entries = sorted(
            self.entries.values(), key=lambda e: (not e.exported, e.category, e.path.lower())
        )
        return ApiReference(
            package=self.package,
            version=self.source.version(),
            source_hash=self.source.content_hash(),
            entries=entries,
            modules=sorted(self.modules.values(), key=lambda m: m.path),
        )

    def _mark_loaded(self, imports: dict[str, set[str]]) -> None:
        """Which modules ``import <package>`` loads: the closure of imports from the root.

        Importing ``a.b.c`` loads ``a.b`` and ``a.b.c``, so ``fl.nn.functional`` works only when
        something on that path imports ``flodl.nn.functional``.
        """
        loaded = {self.package}
        pending = [self.package]
        while pending:
            for target in imports.get(pending.pop(), ()):
                parts = target.split(".")
                for i in range(2, len(parts) + 1):
                    prefix = ".".join(parts[:i])
                    if prefix in self.modules and prefix not in loaded:
                        loaded.add(prefix)
                        pending.append(prefix)
        for path, info in self.modules.items():
            info.loaded = path in loaded

    def _public_members(self, module: Any) -> list[tuple[str, Any]]:
        """(name, resolved object or None when it lives outside the package) per public name."""
        exports = module.exports
        if exports is not None:
            names = [str(getattr(n, "name", n)) for n in exports]
            names += [n for n in _explicit_reexports(module) if n not in names]
        else:
            names = [n for n in module.members if not n.startswith("_")]
        found = []
        for name in names:
            member = module.members.get(name)
            if member is None:
                continue
            shadowing = _shadowing_import(module, name)
            if shadowing is not None:  # the import, not the submodule, is the attribute
                target = self._lookup(shadowing)
                found.append((name, target))
                continue
            target = self._resolve(member)
            if target is None and exports is None:
                continue  # an import of something foreign (torch, typing): not this module's API
            found.append((name, target))
        return found

    def _resolve(self, obj: Any) -> Any:
        if obj.is_alias:
            try:
                obj = obj.final_target
            except Exception:  # external or unresolvable: not part of this package
                return None
        return obj if obj.path.split(".")[0] == self.package else None

    # -- entries --------------------------------------------------------------------------
    def _add(self, obj: Any, public_path: str, *, exported: bool) -> ApiEntry:
        existing = self.entries.get(obj.path)
        if existing is not None:
            if public_path != existing.path and public_path not in existing.aliases:
                existing.aliases.append(public_path)
            if exported and not existing.exported:
                existing.exported, existing.path = True, public_path
            return existing
        entry = ApiEntry(
            name=obj.name,
            path=public_path,
            kind={"class": "class", "function": "function"}.get(obj.kind.value, "attribute"),
            category=self._category(obj.path),
            defined_at=obj.path,
            file=self._relfile(obj),
            line=obj.lineno,
            doc=_summary(obj),
            docstring=_docstring(obj),
            examples=split_examples(_docstring(obj))[1],
            exported=exported,
        )
        self.entries[obj.path] = entry
        if obj.is_class:
            self._fill_class(entry, obj)
        elif obj.is_function:
            entry.signature = _signature(obj)
            entry.returns_type = self._returns_type(obj, None)
        else:
            entry.signature = _attribute_sig(obj)
        return entry

    def _fill_class(self, entry: ApiEntry, cls: Any) -> None:
        entry.bases = [self._base_path(b) for b in cls.bases]
        members = _class_members(cls)
        entry.dynamic_attributes = "__getattr__" in members
        init = members.pop("__init__", None)
        if init is not None and init.is_function:
            entry.signature = _signature(init).removesuffix(" -> None")
        elif any(b.startswith("enum.") for b in entry.bases):
            entry.signature = "(value)"
        elif not entry.bases or set(entry.bases) <= _NO_ARGUMENT_BASES:
            # no own __init__ over a base whose constructor takes nothing: ``Cls()`` exactly
            entry.signature = "()"
        else:
            entry.signature = "(...)"
        entry.constructors.append(
            Member(cls.name, "constructor", f"{cls.name}{entry.signature}", entry.doc)
        )
        for name, obj in members.items():
            if name.startswith("_") and name != "__call__":
                continue
            if obj.is_function and "property" not in obj.labels:
                kind = next(
                    (k for k in ("classmethod", "staticmethod") if k in obj.labels), "method"
                )
                returns_type = self._returns_type(obj, cls)
                member = Member(
                    name=name,
                    kind=kind,
                    sig=f"{name}{_signature(obj)}",
                    doc=_summary(obj),
                    returns=_annotation(obj.returns),
                    returns_type=returns_type,
                )
                if kind != "method" and returns_type == cls.path:
                    member.kind = "constructor"
                    member.sig = f"{cls.name}.{member.sig}"
                    entry.constructors.append(member)
                elif kind == "method" and (returns_type == cls.path or name == "build"):
                    entry.builder_methods.append(member)
                else:
                    entry.methods.append(member)
            elif obj.is_attribute or obj.is_function:
                kind = "property" if "property" in obj.labels else "attribute"
                returns = obj.returns if obj.is_function else obj.annotation
                entry.attributes.append(
                    Member(
                        name=name,
                        kind=kind,
                        sig=_attribute_sig(obj)
                        if obj.is_attribute
                        else f": {returns}"
                        if returns
                        else "",
                        doc=_summary(obj),
                        returns=_annotation(returns),
                        returns_type=self._type_of(returns, cls),
                    )
                )

    def _add_returned_helpers(self) -> None:
        """Add the package classes that public methods return but nobody exports."""
        pending = deque(self.entries.values())
        while pending:
            entry = pending.popleft()
            members = [
                *entry.constructors,
                *entry.builder_methods,
                *entry.methods,
                *entry.attributes,
            ]
            targets = [m.returns_type for m in members] + [entry.returns_type]
            for target in filter(None, targets):
                if target in self.entries:
                    continue
                obj = self._lookup(target)
                if obj is not None and obj.is_class:
                    pending.append(self._add(obj, target, exported=False))

    # -- helpers --------------------------------------------------------------------------
    def _lookup(self, path: str) -> Any:
        try:
            obj = self.root[path.split(".", 1)[1]] if "." in path else self.root
        except Exception:
            return None
        return self._resolve(obj)

    def _returns_type(self, func: Any, cls: Any) -> str | None:
        return self._type_of(func.returns, cls)

    def _type_of(self, annotation: Any, cls: Any) -> str | None:
        """Canonical path of a package class named by ``annotation``, if it names exactly one."""
        if annotation is None:
            return None
        text = str(annotation).strip("'\"")
        if cls is not None and (text in _SELF_NAMES or text == cls.name):
            return cls.path
        path = getattr(annotation, "canonical_path", None)
        if isinstance(annotation, str):
            scope = cls.parent if cls is not None else None
            member = scope.members.get(text) if scope is not None else None
            path = member.path if member is not None else None
        if not path or path in _SELF_NAMES:
            return cls.path if cls is not None and path in _SELF_NAMES else None
        obj = self._lookup(path)
        return obj.path if obj is not None and obj.is_class else None

    def _base_path(self, base: Any) -> str:
        path = getattr(base, "canonical_path", None) or str(base)
        obj = self._lookup(path) if path.split(".")[0] == self.package else None
        return obj.path if obj is not None else path

    def _category(self, path: str) -> str:
        parts = path.split(".")
        if len(parts) >= 3:
            sub = self.root.modules.get(parts[1])
            if sub is not None and getattr(sub.filepath, "name", "") == "__init__.py":
                return parts[1]
        return "core"

    def _relfile(self, obj: Any) -> str:
        try:
            return obj.filepath.relative_to(self.source.root).as_posix()
        except (ValueError, AttributeError):
            return str(getattr(obj, "filepath", ""))


def _explicit_reexports(module: Any) -> list[str]:
    """Names ``module`` re-exports as ``from x import name as name`` at its top level."""
    import ast

    try:
        tree = ast.parse(module.source)
    except (SyntaxError, ValueError, OSError):
        return []
    return [
        alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name
    ]


def _shadowing_import(module: Any, name: str) -> str | None:
    """The path ``module``'s own import binds to ``name`` when that hides a same-named submodule.

    ``import flodl.optim`` runs ``from flodl.optim.param_groups import param_groups``: importing
    the submodule sets the attribute to the module, then the import rebinds it to the function.
    Griffe keeps the submodule as the member; this says what the attribute really is.
    """
    if name not in module.modules:
        return None
    target = module.imports.get(name)
    if target is None or str(target) == f"{module.path}.{name}":
        return None  # `from . import sub` binds the submodule itself
    return str(target)


def _class_members(cls: Any) -> dict[str, Any]:
    """Own and inherited (in-package) members, resolved; inherited ones lose to own ones."""
    try:
        members = dict(cls.all_members)
    except Exception:
        members = dict(cls.members)
    resolved = {}
    for name, obj in members.items():
        if obj.is_alias:
            try:
                obj = obj.final_target
            except Exception:
                continue
        resolved[name] = obj
    return resolved


def _docstring(obj: Any) -> str:
    return obj.docstring.value.strip() if obj.docstring else ""


def _summary(obj: Any) -> str:
    text = _docstring(obj)
    return text.split("\n\n", 1)[0].replace("\n", " ").strip() if text else ""


def _annotation(expr: Any) -> str | None:
    return None if expr is None else str(expr)


def _attribute_sig(obj: Any) -> str:
    parts = []
    if obj.annotation is not None:
        parts.append(f": {obj.annotation}")
    if obj.value is not None:
        value = str(obj.value)
        parts.append(f" = {value if len(value) <= 60 else value[:57] + '...'}")
    return "".join(parts)


def _signature(func: Any) -> str:
    """``(a: int, /, b=1, *args, c, **kw) -> R`` without ``self``/``cls``."""
    params = list(func.parameters)
    if params and params[0].name in {"self", "cls"} and "staticmethod" not in func.labels:
        params = params[1:]
    rendered: list[str] = []
    saw_kw_only_marker = False
    positional_only_done = False
    for i, p in enumerate(params):
        kind = p.kind.value if p.kind is not None else "positional or keyword"
        text = p.name
        if kind == "variadic positional":
            text = f"*{p.name}"
            saw_kw_only_marker = True
        elif kind == "variadic keyword":
            text = f"**{p.name}"
        elif kind == "keyword-only" and not saw_kw_only_marker:
            rendered.append("*")
            saw_kw_only_marker = True
        if p.annotation is not None:
            text += f": {p.annotation}"
        if p.default is not None and not kind.startswith("variadic"):
            text += f" = {p.default}" if p.annotation is not None else f"={p.default}"
        rendered.append(text)
        nxt = params[i + 1].kind.value if i + 1 < len(params) else None
        if kind == "positional-only" and nxt != "positional-only" and not positional_only_done:
            rendered.append("/")
            positional_only_done = True
    sig = f"({', '.join(rendered)})"
    if func.returns is not None:
        sig += f" -> {func.returns}"
    return sig
