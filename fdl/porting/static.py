"""Find every flodl name a script uses and check it against the extracted API.

What is followed: ``import flodl as fl`` / ``import flodl.nn`` / ``from flodl.x import Y``
bindings; attribute chains on them (``fl.nn.StateAdd``, ``fl.MergeOp.ADD``); calls, through the
return annotations the API declares (``fl.FlowBuilder(m).through(a).also(b).build()`` checks
``through``, ``also`` and ``build`` on the classes they return); and simple assignments
(``model = ...build()`` then ``model.freeze(...)``). Nothing is imported or executed.

A missing module-level name is always an error. A missing attribute on a flodl class or
instance is an error, with two exceptions, which are warnings:

- on an *instance* whose class or any base defines ``__getattr__`` (every Graph is a
  ``torch.nn.Module``, whose ``__getattr__`` returns child modules, parameters and buffers:
  ``model.encoder`` is real when the graph has a child labelled ``encoder``). Only very near
  misses of flodl names are suggested; the smoke run turns a real typo into an AttributeError.
- when a base outside flodl cannot be read, so its members are unknown.

Names torch's base classes define (``graph.state_dict``) are read from their source and known.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass, field
from typing import Any

from fdl.apiref.model import ApiEntry, ApiReference, Member
from fdl.porting.foreign import foreign_class


@dataclass
class Finding:
    """One problem, located in the script, with what to do about it."""

    file: str
    line: int
    col: int
    severity: str  # error | warning
    code: str  # syntax-error | unknown-module | unknown-name | unknown-attribute
    message: str
    suggestions: list[str] = field(default_factory=list)
    target: str = ""  # the full path that does not exist, e.g. flodl.FlowBuilder.residual

    def render(self) -> str:
        text = f"{self.file}:{self.line}:{self.col}: {self.severity}[{self.code}]: {self.message}"
        if self.suggestions:
            text += " — did you mean " + " or ".join(f"`{s}`" for s in self.suggestions) + "?"
        return text


# -- symbols: what an expression is known to be ------------------------------------------
@dataclass(frozen=True)
class _Module:
    path: str


@dataclass(frozen=True)
class _Class:
    entry: ApiEntry


@dataclass(frozen=True)
class _Instance:
    entry: ApiEntry


@dataclass(frozen=True)
class _Callable:
    returns_type: str | None
    function: str | None = None  # a flodl function's path (not a method): it has no API members


@dataclass(frozen=True)
class _Value:
    """A flodl value whose type is not tracked further (checking stops here, silently)."""


@dataclass(frozen=True)
class _Inherited:
    names: frozenset[str]
    bases: list[str]  # the bases outside flodl
    dynamic: bool  # the class or a base defines __getattr__ (instances grow attributes)
    unreadable: bool  # a base outside flodl could not be read: its names are unknown


_EXCEPTION_NAMES = frozenset({"args", "with_traceback", "add_note", "__notes__"})
_BUILTIN_BASES = {
    "Exception": _EXCEPTION_NAMES,
    "BaseException": _EXCEPTION_NAMES,
    "object": frozenset(),
}

_Sym = _Module | _Class | _Instance | _Callable | _Value


class ApiIndex:
    """Lookups over an :class:`ApiReference` for the checker."""

    def __init__(self, ref: ApiReference) -> None:
        self.package = ref.package
        self.modules = {m.path: set(m.names) for m in ref.modules}
        self.loaded = {m.path for m in ref.modules if m.loaded}
        self.entries: dict[str, ApiEntry] = {}
        self.public_by_name: dict[str, list[str]] = {}
        for entry in ref.entries:
            for path in (entry.path, *entry.aliases, entry.defined_at):
                self.entries.setdefault(path, entry)
            if entry.exported:
                self.public_by_name.setdefault(entry.name, []).append(entry.path)

    def member_of(self, module: str, name: str) -> _Sym | None:
        """What ``module.name`` is, or None if it does not exist.

        A name the package binds itself wins over a same-named submodule, as at run time
        (``fl.optim.param_groups`` is the function that ``flodl/optim/__init__.py`` imports).
        """
        path = f"{module}.{name}"
        if path in self.modules and path not in self.entries:
            return _Module(path)
        if name not in self.modules.get(module, ()):
            return None
        entry = self.entries.get(path)
        if entry is None:
            return _Value()
        return self.symbol_for_entry(entry, path)

    def symbol_for_entry(self, entry: ApiEntry, path: str | None = None) -> _Sym:
        if entry.kind == "class":
            return _Class(entry)
        if entry.kind == "function":
            return _Callable(entry.returns_type, function=path or entry.path)
        return _Value()

    def foreign_members(self, entry: ApiEntry) -> _Inherited:
        """Names ``entry`` inherits from bases outside the package (read from their source)."""
        names: set[str] = set()
        bases: list[str] = []
        dynamic, unreadable = entry.dynamic_attributes, False
        pending, seen = list(entry.bases), set()
        while pending:
            base = pending.pop()
            if base in seen:
                continue
            seen.add(base)
            own = self.entries.get(base)
            if own is not None:
                dynamic = dynamic or own.dynamic_attributes
                pending.extend(own.bases)
                continue
            if base.split(".")[0] == self.package:
                continue  # a flodl mixin the reference does not list: the entry has its members
            bases.append(base)
            if base in _BUILTIN_BASES:
                names |= _BUILTIN_BASES[base]
                continue
            found = foreign_class(base)
            if found is None:
                unreadable = True
            else:
                dynamic = dynamic or found.dynamic
                names |= found.names
        return _Inherited(frozenset(names), bases, dynamic, unreadable)

    def instance_of(self, type_path: str | None) -> _Sym:
        entry = self.entries.get(type_path) if type_path else None
        return _Instance(entry) if entry is not None and entry.kind == "class" else _Value()


def check_source(source: str, filename: str, ref: ApiReference) -> tuple[list[Finding], set[str]]:
    """Findings for ``source`` and the set of flodl paths it uses (modules, names, members)."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as err:
        line = err.lineno or 1
        return [
            Finding(
                filename,
                line,
                err.offset or 0,
                "error",
                "syntax-error",
                f"{err.msg} (the script must parse before anything else can be checked)",
            )
        ], set()
    checker = _Checker(filename, ApiIndex(ref))
    checker.visit(tree)
    findings = sorted(checker.findings.values(), key=lambda f: (f.line, f.col, f.code))
    return findings, checker.used


# PyTorch names people reach for on flodl, and where they went (layers stay PyTorch).
_LAYER = "torch.nn.{name} (layers stay PyTorch)"
PYTORCH_HINTS = {
    **{
        name: _LAYER.format(name=name)
        for name in (
            "Linear",
            "Conv1d",
            "Conv2d",
            "Conv3d",
            "BatchNorm1d",
            "BatchNorm2d",
            "LayerNorm",
            "GroupNorm",
            "Dropout",
            "ReLU",
            "GELU",
            "SiLU",
            "Tanh",
            "Sigmoid",
            "Softmax",
            "Embedding",
            "LSTM",
            "GRU",
            "MultiheadAttention",
            "MaxPool2d",
            "AvgPool2d",
            "AdaptiveAvgPool2d",
            "Flatten",
            "Identity",
            "ModuleList",
            "ModuleDict",
        )
    },
    "Sequential": "fl.FlowBuilder(first).through(...).build() (or keep torch.nn.Sequential)",
    "Module": "torch.nn.Module (a built fl.Graph is one)",
    "DataParallel": "fl.Trainer (one process per device)",
    "DistributedDataParallel": "fl.Trainer (it joins torchrun's group)",
    "DistributedSampler": "fl.Trainer / fl.data.DataLoader (they partition across ranks)",
    "SummaryWriter": "fl.Monitor",
    "save": "graph.save_checkpoint(path) / fl.save_checkpoint",
    "load": "graph.load_checkpoint(path) / fl.load_checkpoint",
    "no_grad": "torch.no_grad (unchanged)",
    "autocast": "torch.autocast (unchanged)",
}

_DUNDER_OK = {"__name__", "__doc__", "__class__", "__dict__", "__module__", "__qualname__"}


class _Checker(ast.NodeVisitor):
    def __init__(self, filename: str, index: ApiIndex) -> None:
        self.filename = filename
        self.index = index
        self.scopes: list[dict[str, _Sym | None]] = [{}]
        self.memo: dict[int, _Sym | None] = {}
        self.findings: dict[tuple[int, int, str], Finding] = {}
        self.used: set[str] = set()
        self.imported: set[str] = set()  # modules the script imports itself

    # -- scopes ---------------------------------------------------------------------------
    def bind(self, name: str, sym: _Sym | None) -> None:
        self.scopes[-1][name] = sym

    def lookup(self, name: str) -> _Sym | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def _with_scope(self, node: ast.AST, params: list[str]) -> None:
        self.scopes.append(dict.fromkeys(params))
        self.generic_visit(node)
        self.scopes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for deco in node.decorator_list:
            self.visit(deco)
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.visit(default)
        args = node.args
        params = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
        params += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
        self.bind(node.name, None)
        self.scopes.append(dict.fromkeys(params))
        for statement in node.body:
            self.visit(statement)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._with_scope(node, [a.arg for a in node.args.args])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in [*node.bases, *node.keywords, *node.decorator_list]:
            self.visit(expr)
        self.bind(node.name, None)
        self.scopes.append({})
        for statement in node.body:
            self.visit(statement)
        self.scopes.pop()

    # -- imports --------------------------------------------------------------------------
    def _is_ours(self, module: str | None) -> bool:
        return module is not None and module.split(".")[0] == self.index.package

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not self._is_ours(alias.name):
                continue
            if alias.name not in self.index.modules:
                self._unknown_module(node, alias.name)
                continue
            self.used.add(alias.name)
            self._mark_imported(alias.name)
            if alias.asname:
                self.bind(alias.asname, _Module(alias.name))
            else:
                self.bind(alias.name.split(".")[0], _Module(self.index.package))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not self._is_ours(node.module):
            return
        module = node.module or ""
        if module not in self.index.modules:
            self._unknown_module(node, module)
            return
        self.used.add(module)
        self._mark_imported(module)
        for alias in node.names:
            if alias.name == "*":
                for name in self.index.modules[module]:
                    self.bind(name, self.index.member_of(module, name))
                continue
            sym = self.index.member_of(module, alias.name)
            if sym is None:
                self._unknown_name(node, module, alias.name, f"from {module} import {alias.name}")
            else:
                self.used.add(f"{module}.{alias.name}")
            self.bind(alias.asname or alias.name, sym)

    def _mark_imported(self, module: str) -> None:
        parts = module.split(".")
        self.imported.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))

    # -- statements that bind names ---------------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        sym = self.resolve(node.value)
        self.generic_visit(node.value)
        for target in node.targets:
            self._bind_target(target, sym)
            self.visit(target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        sym = self.resolve(node.value) if node.value is not None else None
        if node.value is not None:
            self.generic_visit(node.value)
        self._bind_target(node.target, sym)

    def _bind_target(self, target: ast.expr, sym: _Sym | None) -> None:
        if isinstance(target, ast.Name):
            self.bind(target.id, sym)
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._bind_target(element, None)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self._bind_target(node.target, None)
        for statement in [*node.body, *node.orelse]:
            self.visit(statement)

    visit_AsyncFor = visit_For

    def visit_withitem(self, node: ast.withitem) -> None:
        self.visit(node.context_expr)
        if node.optional_vars is not None:
            self._bind_target(node.optional_vars, None)

    # -- expressions ------------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Load):
            self.resolve(node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        self.resolve(node)
        self.generic_visit(node)

    def resolve(self, node: ast.expr | None) -> _Sym | None:
        if node is None:
            return None
        key = id(node)
        if key not in self.memo:
            self.memo[key] = self._resolve(node)
        return self.memo[key]

    def _resolve(self, node: ast.expr) -> _Sym | None:
        if isinstance(node, ast.Name):
            return self.lookup(node.id)
        if isinstance(node, ast.Call):
            func = self.resolve(node.func)
            if isinstance(func, _Class):
                return _Instance(func.entry)
            if isinstance(func, _Callable):
                return self.index.instance_of(func.returns_type)
            return None if func is None else _Value()
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            base = self.resolve(node.value)
            return self._attribute(node, base) if base is not None else None
        return None

    def _attribute(self, node: ast.Attribute, base: _Sym) -> _Sym | None:
        name = node.attr
        if isinstance(base, _Module):
            sym = self.index.member_of(base.path, name)
            if sym is None:
                self._unknown_name(node, base.path, name, ast.unparse(node))
                return None
            self.used.add(f"{base.path}.{name}")
            if isinstance(sym, _Module) and not self._is_loaded(sym.path):
                self._add(
                    node,
                    {
                        "severity": "error",
                        "code": "not-imported",
                        "message": f"`{ast.unparse(node)}` is a module that `import "
                        f"{self.index.package}` does not load (AttributeError at run time)",
                        "suggestions": [f"import {sym.path}"],
                        "target": sym.path,
                    },
                )
            return sym
        if isinstance(base, _Class | _Instance):
            return self._member(node, base.entry, name, on_class=isinstance(base, _Class))
        if isinstance(base, _Callable) and base.function and not _is_dunder(name):
            self._add(
                node,
                {
                    "severity": "error",
                    "code": "unknown-attribute",
                    "message": f"`{ast.unparse(node)}` does not exist: "
                    f"{self.spell(base.function)} is a function, not a module",
                    "suggestions": [self.spell(base.function)],
                    "target": f"{base.function}.{name}",
                },
            )
            return None
        return _Value()

    def _member(self, node: ast.Attribute, entry: ApiEntry, name: str, *, on_class: bool) -> _Sym:
        if _is_dunder(name):
            return _Value()
        member = entry.members().get(name)
        if member is None:
            inherited = self.index.foreign_members(entry)
            if name not in inherited.names:
                self._unknown_attribute(node, entry, name, inherited, on_class=on_class)
            return _Value()
        self.used.add(f"{entry.path}.{name}")
        return _member_symbol(member, self.index)

    # -- findings ---------------------------------------------------------------------------
    def _add(self, node: ast.AST, finding_args: dict[str, Any]) -> None:
        line, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1
        if (
            isinstance(node, ast.Attribute)
            and node.end_lineno is not None
            and node.end_col_offset is not None
        ):
            # point at the attribute name itself, not the start of the chain
            line, col = node.end_lineno, node.end_col_offset - len(node.attr) + 1
        finding = Finding(self.filename, line, col, **finding_args)
        self.findings.setdefault((line, col, finding.code), finding)

    def _unknown_module(self, node: ast.AST, module: str) -> None:
        parent, _, leaf = module.rpartition(".")
        candidates = [
            m.rsplit(".", 1)[-1] for m in self.index.modules if m.rpartition(".")[0] == parent
        ]
        close = [f"{parent}.{c}" for c in difflib.get_close_matches(leaf, candidates, n=3)]
        self._add(
            node,
            {
                "severity": "error",
                "code": "unknown-module",
                "message": f"module '{module}' does not exist in flodl",
                "suggestions": close,
                "target": module,
            },
        )

    def _unknown_name(self, node: ast.AST, module: str, name: str, written: str) -> None:
        names = self.index.modules.get(module, set())
        close = [
            self.spell(f"{module}.{c}") for c in difflib.get_close_matches(name, sorted(names), n=3)
        ]
        elsewhere = [self.spell(p) for p in self.index.public_by_name.get(name, [])]
        lowered = [
            self.spell(p)
            for n, paths in self.index.public_by_name.items()
            if n.lower() == name.lower() and n != name
            for p in paths
        ]
        suggestions = list(dict.fromkeys([*elsewhere, *lowered, *close]))[:4]
        if name in PYTORCH_HINTS and not elsewhere:
            suggestions.append(PYTORCH_HINTS[name])
        self._add(
            node,
            {
                "severity": "error",
                "code": "unknown-name",
                "message": f"`{written}` does not exist: {self.spell(module)} has no name '{name}'",
                "suggestions": suggestions,
                "target": f"{module}.{name}",
            },
        )

    def _unknown_attribute(
        self,
        node: ast.Attribute,
        entry: ApiEntry,
        name: str,
        inherited: _Inherited,
        *,
        on_class: bool,
    ) -> None:
        members = entry.members()
        # An instance with __getattr__ grows attributes at run time (a Graph's children by
        # label): a near-miss of a flodl name proves nothing there, and only a very near one
        # (`freez` ~ `.freeze`, not `encoder` ~ `.code`) is worth suggesting.
        grows = inherited.dynamic and not on_class
        cutoff = 0.8 if grows else 0.6
        close = difflib.get_close_matches(name, sorted(members), n=3, cutoff=cutoff)
        unknowable = inherited.unreadable and not close
        written = ast.unparse(node)
        if len(written) > 48:
            written = (
                f"{entry.name}(...).{name}" if not isinstance(node.value, ast.Name) else written
            )
        where = " or ".join(["flodl", *inherited.bases])
        message = f"`{written}` does not exist: {entry.name} has no attribute '{name}'"
        if grows:
            message = (
                f"`{written}` is not in {where}: fine if it is set at run time (a child module, "
                f"parameter or buffer of the {entry.name}); the smoke run checks it"
            )
        elif unknowable:
            message += f" in {where} (allowed only if it is set at run time, e.g. a child module)"
        elif entry.builder_methods and not close:
            chain = ", ".join(f".{m.name}()" for m in entry.builder_methods)
            message += f"; its builder methods are {chain}"
        elif not close and 0 < len(members) <= 12:
            message += f"; it has {', '.join(sorted(members))}"
        self._add(
            node,
            {
                "severity": "warning" if grows or unknowable else "error",
                "code": "unknown-attribute",
                "message": message,
                "suggestions": [f".{c}" for c in close],
                "target": f"{entry.path}.{name}",
            },
        )

    def _is_loaded(self, module: str) -> bool:
        return module in self.index.loaded or module in self.imported

    def spell(self, path: str) -> str:
        """``path`` as this script would write it (``flodl.nn.X`` -> ``fl.nn.X``)."""
        best: tuple[int, str] | None = None
        for scope in self.scopes:
            for alias, sym in scope.items():
                if (
                    isinstance(sym, _Module)
                    and (path == sym.path or path.startswith(sym.path + "."))
                    and (best is None or len(sym.path) > best[0])
                ):
                    best = (len(sym.path), alias + path[len(sym.path) :])
        return best[1] if best else path


def _is_dunder(name: str) -> bool:
    return name in _DUNDER_OK or (name.startswith("__") and name.endswith("__"))


def _member_symbol(member: Member, index: ApiIndex) -> _Sym:
    if member.kind in {"method", "classmethod", "staticmethod", "constructor"}:
        return _Callable(member.returns_type)
    return index.instance_of(member.returns_type)
