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

Every call of a flodl callable is a *call site*. Its arguments are bound to the callable's real
signature (keyword arguments included, :mod:`fdl.porting.calls`); one that binds is *verified
statically*, one that does not is an error. A call the checker cannot bind (a method a Graph does
not define, called on the chance that it exists at run time) is verified only if the smoke run
executes its line; ``fdl check`` lists the call sites verified neither way.

Types flow through assignments, through the script's own functions (``model = build_model()``
is a Graph when every ``return`` of ``build_model`` is one) and into loop variables over flodl
iterables (``for batch in loader`` binds a ``fl.data.Batch``).
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fdl.apiref.model import ApiEntry, ApiReference, Member
from fdl.porting.calls import call_problem, parse_signature
from fdl.porting.foreign import foreign_class
from fdl.porting.hints import (
    BEHAVIOUR_DEFAULTS,
    PYTORCH_HINTS,
    SCHEDULER_HINTS,
    pytorch_function_hint,
    syntax_hint,
)


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


@dataclass
class CallSite:
    """One call of a flodl callable in the script (lines ``line..end_line``)."""

    line: int
    end_line: int
    text: str  # the callee as written, e.g. ``model.save_checkpoint``
    verified: bool  # its arguments were bound to the callable's real signature
    why_not: str = ""  # when not verified statically: why

    def ran(self, lines: set[int]) -> bool:
        return any(n in lines for n in range(self.line, self.end_line + 1))


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
    sig: str = ""  # the signature as source text, "(a, b=1) -> T" (a method's may start "name(")
    name: str = ""
    returns_many: Any = None  # the flodl entry of X when it returns list[X] / Iterator[X]


@dataclass(frozen=True)
class _Sequence:
    """A list/sequence/iterator of instances of a flodl class (``monitor.history``)."""

    entry: ApiEntry


@dataclass(frozen=True)
class _UserFunction:
    """A function of the script; ``returns``: what every ``return`` statement in it gives."""

    returns: Any = None


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

_Sym = _Module | _Class | _Instance | _Callable | _Value | _UserFunction | _Sequence

_CONTAINER = re.compile(r"^(?:list|List|Sequence|Iterator|Iterable|Generator)\[(\w+)(?:,.*)?\]$")

# What iterating a flodl object yields (the reference lists no dunder methods).
_ITERATES = {
    "flodl.data.loader.DataLoader": "flodl.data.batch.Batch",
    "flodl.data.epochs.EpochIterator": "flodl.data.batch.Batch",
}


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
            return _Callable(
                entry.returns_type,
                function=path or entry.path,
                sig=entry.signature,
                name=entry.name,
            )
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

    def element_entry(self, annotation: str | None) -> ApiEntry | None:
        """``X``'s entry for an annotation ``list[X]`` / ``Sequence[X]`` / ``Iterator[X]``."""
        match = _CONTAINER.match(annotation or "")
        if match is None:
            return None
        found = [
            e
            for e in {id(e): e for e in self.entries.values()}.values()
            if e.name == match.group(1) and e.kind == "class"
        ]
        return found[0] if len(found) == 1 else None

    def instance_of(self, type_path: str | None) -> _Sym:
        entry = self.entries.get(type_path) if type_path else None
        return _Instance(entry) if entry is not None and entry.kind == "class" else _Value()


def check_source(source: str, filename: str, ref: ApiReference) -> tuple[list[Finding], set[str]]:
    """Findings for ``source`` and the set of flodl paths it uses (modules, names, members)."""
    findings, used, _ = analyse(source, filename, ref)
    return findings, used


def analyse(
    source: str, filename: str, ref: ApiReference
) -> tuple[list[Finding], set[str], list[CallSite]]:
    """Findings, the flodl paths used, and every flodl call site of ``source``."""
    try:  # as `python script.py` parses and compiles it, at the usual recursion limit
        tree = ast.parse(source, filename=filename)
        compile(source, filename, "exec", dont_inherit=True)  # compile-time errors: __future__
    except RecursionError:
        message = (
            "the script nests deeper than Python can compile (a chain of about a thousand calls "
            "or more): split the chain, e.g. build blocks and join them with .through(block)"
        )
        return [Finding(filename, 1, 0, "error", "syntax-error", message)], set(), []
    except SyntaxError as err:
        line = err.lineno or 1
        lines = source.splitlines()
        text = lines[line - 1] if 0 < line <= len(lines) else (err.text or "")
        hint = syntax_hint(err.msg, text)
        return (
            [
                Finding(
                    filename,
                    line,
                    err.offset or 0,
                    "error",
                    "syntax-error",
                    f"{err.msg}{hint} (the script must compile before anything else can be checked)",
                )
            ],
            set(),
            [],
        )
    with deep_syntax_trees():
        return _walk(tree, filename, ref)


# Python's own parser takes about a thousand nested calls (a long FlowBuilder chain); walking
# that tree takes several Python frames per level, more than the default recursion limit.
DEEP_RECURSION_LIMIT = 20_000


@contextlib.contextmanager
def deep_syntax_trees() -> Iterator[None]:
    """Raise the recursion limit while a syntax tree as deep as Python compiles is walked."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, DEEP_RECURSION_LIMIT))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def _walk(
    tree: ast.Module, filename: str, ref: ApiReference
) -> tuple[list[Finding], set[str], list[CallSite]]:
    index = ApiIndex(ref)
    first = _Checker(filename, index)
    first.visit(tree)
    checker = _Checker(filename, index, returns=first.function_returns)
    checker.visit(tree)
    findings = sorted(checker.findings.values(), key=lambda f: (f.line, f.col, f.code))
    sites = sorted(checker.call_sites.values(), key=lambda c: (c.line, c.text))
    return findings, checker.used, sites


_DUNDER_OK = {"__name__", "__doc__", "__class__", "__dict__", "__module__", "__qualname__"}


class _Checker(ast.NodeVisitor):
    def __init__(
        self, filename: str, index: ApiIndex, returns: dict[str, _Sym] | None = None
    ) -> None:
        self.filename = filename
        self.index = index
        self.known_returns = dict(returns or {})
        self.function_returns: dict[str, _Sym] = {}
        self.returning: list[list[_Sym | None]] = []
        self.call_sites: dict[tuple[int, int, str], CallSite] = {}
        # module-level functions, bound before the body runs (main() may call a later def)
        self.scopes: list[dict[str, _Sym | None]] = [
            {name: _UserFunction(sym) for name, sym in self.known_returns.items()}
        ]
        self.memo: dict[int, _Sym | None] = {}
        self.findings: dict[tuple[int, int, str], Finding] = {}
        self.used: set[str] = set()
        self.imported: set[str] = set()  # modules the script imports itself
        self.missing: set[int] = set()  # attribute nodes already reported as errors (by id)

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
        top = len(self.scopes) == 1
        self.bind(node.name, _UserFunction(self.known_returns.get(node.name)) if top else None)
        self.scopes.append(dict.fromkeys(params))
        self.returning.append([])
        for statement in node.body:
            self.visit(statement)
        returned = self.returning.pop()
        self.scopes.pop()
        if (
            top
            and returned
            and isinstance(returned[0], _Instance | _Class)
            and all(r == returned[0] for r in returned)
        ):
            self.function_returns[node.name] = returned[0]

    def visit_Return(self, node: ast.Return) -> None:
        if self.returning:
            self.returning[-1].append(self.resolve(node.value) if node.value else None)
        self.generic_visit(node)

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
        self.visit(node.value)
        for target in node.targets:
            self._bind_target(target, sym)
            self.visit(target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        sym = self.resolve(node.value) if node.value is not None else None
        if node.value is not None:
            self.visit(node.value)
        self._bind_target(node.target, sym)

    def _bind_target(self, target: ast.expr, sym: _Sym | None) -> None:
        if isinstance(target, ast.Name):
            self.bind(target.id, sym)
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._bind_target(element, None)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self._bind_loop_target(node.target, node.iter)
        for statement in [*node.body, *node.orelse]:
            self.visit(statement)

    visit_AsyncFor = visit_For

    def _element(self, iterable: ast.expr) -> _Sym | None:
        """What iterating ``iterable`` yields, when it is a flodl iterable."""
        sym = self.resolve(iterable)
        if isinstance(sym, _Sequence):
            return _Instance(sym.entry)
        if isinstance(sym, _Instance):
            element = _ITERATES.get(sym.entry.defined_at)
            return self.index.instance_of(element) if element else None
        return None

    def _bind_loop_target(self, target: ast.expr, iterable: ast.expr) -> None:
        if (
            isinstance(iterable, ast.Call)
            and isinstance(iterable.func, ast.Name)
            and iterable.func.id == "enumerate"
            and iterable.args
            and isinstance(target, ast.Tuple)
            and len(target.elts) == 2
        ):
            self._bind_target(target.elts[0], None)
            self._bind_target(target.elts[1], self._element(iterable.args[0]))
            return
        self._bind_target(target, self._element(iterable))

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
        self._check_call(node)
        self.generic_visit(node)

    # -- call sites ---------------------------------------------------------------------------
    def _site(self, node: ast.Call, text: str, verified: bool, why_not: str = "") -> None:
        end = getattr(node, "end_lineno", None) or node.lineno
        # a chain's calls share a statement; each is its own site, keyed by where its name is
        key = (node.lineno, end, text)
        self.call_sites.setdefault(key, CallSite(node.lineno, end, text, verified, why_not))

    def _callee_text(self, func: ast.expr) -> str:
        """The callee as written; a long chain as ``<Type>(...).method``."""
        text = ast.unparse(func)
        if len(text) <= 40 or not isinstance(func, ast.Attribute):
            return text
        base = self.resolve(func.value)
        owner = base.entry.name if isinstance(base, _Instance | _Class) else "..."
        return (
            f"{owner}(...).{func.attr}" if isinstance(base, _Instance) else f"{owner}.{func.attr}"
        )

    def _check_call(self, node: ast.Call) -> None:
        func = self.resolve(node.func)
        text = self._callee_text(node.func)
        if isinstance(func, _Class):
            sig, name = func.entry.signature, func.entry.name
        elif isinstance(func, _Callable):
            sig, name = func.sig, func.name or text
        elif isinstance(node.func, ast.Attribute):
            self._dynamic_call(node, text)
            return
        else:
            return
        params = parse_signature(sig[sig.find("(") :] if "(" in sig else "")
        if params is None:
            self._site(node, text, False, "its signature is not known")
            return
        self._site(node, text, True)
        problem = call_problem(params, node, name)
        if problem is not None:
            message, suggestions = problem
            self._add(
                node,
                {
                    "severity": "error",
                    "code": "bad-call",
                    "message": f"`{text}(...)`: {message} (TypeError at run time)",
                    "suggestions": suggestions,
                    "target": text,
                },
            )
        if name == "build" and isinstance(node.func, ast.Attribute):
            self._behaviour_defaults(node, node.func.value)

    def _dynamic_call(self, node: ast.Call, text: str) -> None:
        """``obj.name(...)`` on a flodl object whose ``name`` is neither flodl's nor inherited."""
        assert isinstance(node.func, ast.Attribute)
        base = self.resolve(node.func.value)
        name = node.func.attr
        if not isinstance(base, _Instance | _Class) or _is_dunder(name):
            return
        if name in base.entry.members():
            return
        if name in self.index.foreign_members(base.entry).names:
            return  # torch's own (model.parameters()): not flodl's to verify
        if id(node.func) in self.missing:
            return  # an unknown-attribute error already: one mistake, one finding
        self._site(
            node,
            text,
            False,
            f"{base.entry.name} defines no '{name}': only the smoke run can show it exists",
        )

    def _behaviour_defaults(self, node: ast.Call, chain: ast.expr) -> None:
        """``X.from_...(...).a().b().build()``: defaults that differ from torch's idiom."""
        called: list[str] = []
        root = chain
        while isinstance(root, ast.Call) and isinstance(root.func, ast.Attribute):
            called.append(root.func.attr)
            root = root.func.value
        sym = self.resolve(chain)
        if not isinstance(sym, _Instance) or not called or not called[-1].startswith("from_"):
            return
        notes = [
            f"{message}: add {suggestion}"
            for (owner, setter), (message, suggestion) in BEHAVIOUR_DEFAULTS.items()
            if sym.entry.defined_at == owner and setter not in called
        ]
        if notes:
            self._add(
                node,
                {
                    "severity": "warning",
                    "code": "behaviour-difference",
                    "message": "; ".join(notes),
                    "target": sym.entry.path,
                },
            )

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
            if isinstance(func, _UserFunction):
                return func.returns
            if isinstance(func, _Class):
                return _Instance(func.entry)
            if isinstance(func, _Callable):
                if func.returns_many is not None:
                    return _Sequence(func.returns_many)
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
        message = f"`{written}` does not exist: {self.spell(module)} has no name '{name}'"
        torch_path = pytorch_function_hint(module, name)
        if name in SCHEDULER_HINTS and not elsewhere:
            equivalent, note = SCHEDULER_HINTS[name]
            suggestions = [self.spell(equivalent)]
            message += (
                f"; torch's {name} maps to flodl's pure schedule {self.spell(equivalent)} ({note})"
            )
        elif torch_path is not None and not elsewhere:
            suggestions = [torch_path.split(" ")[0]]
            message += f"; it stays PyTorch: {torch_path}"
        elif name in PYTORCH_HINTS and not elsewhere:
            hint = PYTORCH_HINTS[name]
            suggestions = [hint.split(" (")[0]]
            stays = hint.startswith("torch.")
            message += f"; it stays PyTorch: {hint}" if stays else f"; in flodl: {hint}"
        self._add(
            node,
            {
                "severity": "error",
                "code": "unknown-name",
                "message": message,
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
                f"parameter or buffer of the {entry.name}), which only a smoke run that "
                "executes this line can show"
            )
        elif unknowable:
            message += f" in {where} (allowed only if it is set at run time, e.g. a child module)"
        elif entry.builder_methods and not close:
            chain = ", ".join(f".{m.name}()" for m in entry.builder_methods)
            message += f"; its builder methods are {chain}"
        elif not close and 0 < len(members) <= 12:
            message += f"; it has {', '.join(sorted(members))}"
        if not (grows or unknowable):
            self.missing.add(id(node))
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
    many = index.element_entry(member.returns)
    if member.kind in {"method", "classmethod", "staticmethod", "constructor"}:
        return _Callable(member.returns_type, sig=member.sig, name=member.name, returns_many=many)
    if many is not None:
        return _Sequence(many)
    return index.instance_of(member.returns_type)
