"""Check a call's arguments against a signature read from source, without running anything.

``fdl check`` resolves a call such as ``model.save_checkpoint("x.fdl", compression="gzip")``
to the flodl callable it names; the API reference holds that callable's signature as source
text (``(path: Destination, *, checksum: bool = True, compress: bool | None = None)``).
:func:`call_problem` binds the call's positional and keyword arguments to it the way Python
would and says what Python would raise: an unknown keyword (with the close names), too many
positional arguments, a missing required argument, an argument given twice. A call with
``*args`` or ``**kwargs`` is checked as far as it can be (its keywords by name).
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class Parameters:
    positional: tuple[str, ...]  # in order, positional-only first
    positional_only: int
    required_positional: frozenset[str]
    keyword_only: tuple[str, ...]
    required_keyword: frozenset[str]
    varargs: bool
    varkw: bool


def parse_signature(sig: str) -> Parameters | None:
    """The parameters of ``sig`` (``"(a, b=1, *, c)"``, a return annotation allowed); ``None``
    when the text does not parse or there is none."""
    text = sig.strip()
    if not text.startswith("("):
        return None
    try:
        tree = ast.parse(f"def _f{text}: pass")
    except SyntaxError:
        return None
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    args = fn.args
    positional = [a.arg for a in [*args.posonlyargs, *args.args]]
    only = len(args.posonlyargs)
    if positional[:1] in (["self"], ["cls"]):
        positional = positional[1:]
        only = max(0, only - 1)
    n_defaults = len(args.defaults)
    required = positional[: len(positional) - n_defaults] if n_defaults else positional
    keyword_only = [a.arg for a in args.kwonlyargs]
    required_kw = [
        a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None
    ]
    return Parameters(
        tuple(positional),
        only,
        frozenset(required),
        tuple(keyword_only),
        frozenset(required_kw),
        args.vararg is not None,
        args.kwarg is not None,
    )


def call_problem(params: Parameters, call: ast.Call, name: str) -> tuple[str, list[str]] | None:
    """(what Python would raise, suggestions) for ``call`` against ``params``; None if it binds."""
    starred = any(isinstance(a, ast.Starred) for a in call.args)
    double_star = any(k.arg is None for k in call.keywords)
    n_pos = sum(not isinstance(a, ast.Starred) for a in call.args)
    if not starred and not params.varargs and n_pos > len(params.positional):
        most = len(params.positional)
        return (
            f"{name}() takes {most} positional argument{'s' if most != 1 else ''} but "
            f"{n_pos} were given",
            [],
        )
    filled = set(params.positional[:n_pos])
    accepts = set(params.positional[params.positional_only :]) | set(params.keyword_only)
    for keyword in (k.arg for k in call.keywords if k.arg is not None):
        if keyword not in accepts and not params.varkw:
            close = difflib.get_close_matches(keyword, sorted(accepts), n=2)
            known = ", ".join(sorted(accepts)) if accepts else "none"
            return (
                f"{name}() got an unexpected keyword argument '{keyword}' "
                f"(its keyword arguments: {known})",
                [f"{c}=" for c in close],
            )
        if keyword in filled and not starred:
            return f"{name}() got multiple values for argument '{keyword}'", []
        filled.add(keyword)
    if starred or double_star:
        return None
    missing = [p for p in params.positional if p in params.required_positional and p not in filled]
    missing += [p for p in params.keyword_only if p in params.required_keyword and p not in filled]
    if missing:
        names = ", ".join(f"'{m}'" for m in missing)
        return f"{name}() missing required argument{'s' if len(missing) > 1 else ''}: {names}", []
    return None
