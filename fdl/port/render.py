"""Write the port as a Python file: ``build(...)``, ``from_torch(module)`` and ``flow(m)``.

``flow(m)`` is the FlowBuilder chain over the layers held by ``m``. ``from_torch(module)`` calls
it on the original model, so the graph shares that model's weights and buffers. ``build(...)``
takes the original constructor's parameters: its body is the original ``__init__`` with
``self`` renamed (the layers are created on a plain ``nn.Module`` holder), so weight
initialisation code in ``__init__`` keeps working. When that cannot work (the ``__init__``
calls the class's own methods, reads names the port cannot import), ``build`` constructs the
original class instead and the report says why.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import shutil
import subprocess
import sys
import textwrap
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fdl.port import settings as settings_mod
from fdl.port.errors import UnsupportedError
from fdl.port.trace import GUARD_HELPER
from fdl.port.translate import (
    ATTR_HELPER,
    CALL_HELPER,
    HELD_HELPER,
    NO_DEFAULT,
    NO_GRAD_HELPER,
    SHARED_HELPER,
    STORE_HELPER,
    Translation,
    literal,
)

CHAIN_LIMIT = 60  # builder calls per expression in flow() (deep nesting strains AST tools)


@dataclass
class Source:
    """What ``build`` needs: its parameters, its body, the names it imports."""

    params: str  # "in_channels=3, num_classes=10"
    body: list[str]  # statements, already indented by nothing
    imports: list[str]
    holder: str  # the name the layers live on in build()
    constructs_original: bool  # build() calls the original class
    note: str = ""


class _RenameSelf(ast.NodeTransformer):
    def __init__(self, holder: str) -> None:
        self.holder = holder

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == "self":
            return ast.copy_location(ast.Name(self.holder, node.ctx), node)
        return node


def _is_super_init(stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        return False
    func = stmt.value.func
    return isinstance(func, ast.Attribute) and func.attr == "__init__"


def _import_for(name: str, obj: Any, script: str) -> str:
    """The import statement binding ``name`` to ``obj`` in the generated file."""
    if isinstance(obj, types.ModuleType):
        full = obj.__name__
        if "." in full:
            parent, leaf = full.rsplit(".", 1)
            return f"from {parent} import {leaf}" if leaf == name else f"import {full} as {name}"
        return f"import {full}" if full == name else f"import {full} as {name}"
    module = getattr(obj, "__module__", None)
    if module and module != script:
        try:
            imported = __import__(module, fromlist=[name])
        except Exception:
            imported = None
        if imported is not None and getattr(imported, name, None) is obj:
            return f"from {module} import {name}"
    return f"from {script} import {name}"


def _signature_call(sig: inspect.Signature) -> str:
    parts = []
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            parts.append(f"*{p.name}")
        elif p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        elif p.kind is p.POSITIONAL_ONLY:
            parts.append(p.name)
        else:
            parts.append(f"{p.name}={p.name}")
    return ", ".join(parts)


def original_source(cls: type, script_module: Any, reason: str = "") -> Source:
    """``build`` that constructs the original class (imported from the script)."""
    script = script_module.__name__
    params, imports, call = _constructor(cls)
    return Source(
        params=params,
        body=[f"return from_torch({cls.__name__}({call}))"],
        imports=[f"from {script} import {cls.__name__}", *imports],
        holder="",
        constructs_original=True,
        note=reason,
    )


def _init_owner(cls: type) -> type:
    """The class whose ``__init__`` runs when ``cls`` is constructed: ``cls`` or a base."""
    return next(k for k in cls.__mro__ if "__init__" in vars(k))


def _constructor(cls: type) -> tuple[str, list[str], str]:
    """``build``'s parameters, the imports they need, and the call handing them to ``cls``."""
    from torch import nn

    owner = _init_owner(cls)
    if owner is nn.Module or owner is object:
        return "", [], ""  # nn.Module's (*args, **kwargs) refuses any argument: take none
    written = _params_source(owner)
    if written is None:  # no usable source: pass what the caller gives through, unchanged
        return "*args, **kwargs", [], "*args, **kwargs"
    params, imports = written
    return params, imports, _signature_call(inspect.signature(cls))


def _params_source(owner: type) -> tuple[str, list[str]] | None:
    """``owner.__init__``'s parameters as written (without ``self``), and the imports their
    annotations and defaults need in the generated file.

    When an annotation names what its module does not hold at run time (a ``TYPE_CHECKING``
    import), the annotations are dropped; None when the source is unavailable or a default
    needs such a name.
    """
    init = _init_def(owner)
    if init is None:
        return None
    args = init.args
    if args.posonlyargs:
        args.posonlyargs = args.posonlyargs[1:]
    else:
        args.args = args.args[1:]
    namespace = getattr(vars(owner)["__init__"], "__globals__", {})
    module = getattr(owner, "__module__", None) or ""
    imports = _imports_of(args, namespace, module)
    if imports is None:
        for node in ast.walk(args):
            if isinstance(node, ast.arg):
                node.annotation = None
        imports = _imports_of(args, namespace, module)
    return None if imports is None else (ast.unparse(args), imports)


def _imports_of(node: ast.AST, namespace: dict[str, Any], module: str) -> list[str] | None:
    """Imports binding the names ``node`` reads; None when one is neither in ``namespace`` nor
    a builtin."""
    imports = []
    for name in sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name)}):
        if name in namespace:
            imports.append(_import_for(name, namespace[name], module))
        elif not hasattr(builtins, name):
            return None
    return imports


def _init_def(cls: type) -> ast.FunctionDef | None:
    init = cls.__dict__.get("__init__")
    if init is None:
        return None
    try:
        text = textwrap.dedent(inspect.getsource(init))
    except (OSError, TypeError):
        return None
    tree = ast.parse(text)
    fn = tree.body[0]
    return fn if isinstance(fn, ast.FunctionDef) else None


def init_source(cls: type, script_module: Any) -> Source:
    """``build`` from the class's own ``__init__``, ``self`` renamed; else the fallback."""
    from torch import nn

    init = _init_def(cls)
    if init is None:
        return original_source(cls, script_module, f"{cls.__name__} has no __init__ of its own")
    written = _params_source(cls)
    if written is None:
        return original_source(
            cls, script_module, "its parameters' defaults read names defined elsewhere"
        )
    params, param_imports = written
    body = [s for s in init.body if not _is_super_init(s)]
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    used = {n.id for s in body for n in ast.walk(s) if isinstance(n, ast.Name)}
    holder = next(h for h in ("m", "model", "net", "layers", "holder") if h not in used)
    tree = ast.Module(body=body, type_ignores=[])
    for node in ast.walk(tree):  # self.method(...) needs the class: build() constructs it
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
            and hasattr(cls, node.func.attr)
            and not hasattr(nn.Module, node.func.attr)  # the holder is an nn.Module
        ):
            return original_source(
                cls, script_module, f"__init__ calls self.{node.func.attr}(), a method of its own"
            )
    tree = _RenameSelf(holder).visit(tree)
    ast.fix_missing_locations(tree)
    arg_names = {a.arg for a in ast.walk(init.args) if isinstance(a, ast.arg)}
    assigned = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            assigned.add(node.arg)
    free = sorted(
        n.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Name)
        and isinstance(n.ctx, ast.Load)
        and n.id not in arg_names | assigned | {holder}
        and not hasattr(builtins, n.id)
    )
    imports = list(param_imports)
    for name in dict.fromkeys(free):
        if name in ("nn", "fl"):
            continue
        if name not in vars(script_module):
            return original_source(cls, script_module, f"__init__ reads {name}, defined elsewhere")
        imports.append(_import_for(name, vars(script_module)[name], script_module.__name__))
    lines = [f"{holder} = nn.Module()"]
    lines += ast.unparse(tree).splitlines()
    lines.append(f"return flow({holder})")
    return Source(params, lines, imports, holder, False)


def render(
    translation: Translation | None,
    source: Source,
    *,
    class_name: str,
    script_name: str,
    header: list[str],
    opaque_inputs: Sequence[tuple[str, Any]] = (),
    settings: dict[str, Any] | None = None,
) -> str:
    """The generated module's text (formatted with ruff when it is installed). ``settings``:
    what the translated forward computes with as constants, checked first by ``flow(m)``."""
    imports = {"from torch import nn", "import flodl as fl", *source.imports}
    defs: list[str] = []
    if translation is not None:
        for name in translation.imports:
            if name.startswith("from "):
                imports.add(name)
            else:
                imports.add("import torch.nn.functional as F" if name == "F" else f"import {name}")
        if translation.needs_call:
            defs.append(CALL_HELPER.strip() + "\n")
        if translation.needs_shared:
            defs.append(SHARED_HELPER.strip() + "\n")
        if translation.needs_held:
            defs.append(HELD_HELPER.strip() + "\n")
        if translation.needs_attr:
            defs.append(ATTR_HELPER.strip() + "\n")
        if translation.needs_store:
            defs.append(STORE_HELPER.strip() + "\n")
        if translation.needs_no_grad:
            imports.add("import torch")
            defs.append(NO_GRAD_HELPER.strip() + "\n")
        if translation.needs_guard:
            defs.append(GUARD_HELPER.strip() + "\n")
        if settings:
            imports |= settings_mod.imports(settings)
            defs.append(settings_mod.SETTINGS_HELPER.strip() + "\n")
            defs.append("\n".join(settings_mod.lines(settings, literal)) + "\n")
        defs += translation.functions
        calls = translation.chain
        if len(calls) <= CHAIN_LIMIT:
            chain = "\n".join(["    " + translation.entry, *("    " + c for c in calls)])
            flow_body = f"return (\n{chain}\n    .build()\n)"
        else:  # Python's compiler limits how deep one expression nests: continue in pieces
            pieces = [calls[i : i + CHAIN_LIMIT] for i in range(0, len(calls), CHAIN_LIMIT)]
            parts = []
            for i, piece in enumerate(pieces):
                head = translation.entry if i == 0 else "flow"
                body = "\n".join(["    " + head, *("    " + c for c in piece)])
                parts.append(f"flow = (\n{body}\n)")
            flow_body = "\n".join(parts) + "\nreturn flow.build()"
        flow_doc = f'"""The data flow of {class_name}.forward over the layers held by ``m``."""'
        if settings:
            flow_body = "settings_checked(m, SETTINGS)\n" + flow_body
    else:
        steps = ["fl.FlowBuilder()"] if opaque_inputs else ["fl.FlowBuilder(m)"]
        for name, default in opaque_inputs:
            steps.append(
                f".input({name!r})"
                if default is NO_DEFAULT
                else f".input({name!r}, default={literal(default)})"
            )
        if opaque_inputs:
            refs = ", ".join(f"{n}={n!r}" for n, _ in opaque_inputs)
            steps += [".through(m)", f".using({refs})"]
        steps.append(".build()")
        flow_body = "return " + "".join(steps)
        flow_doc = f'"""{class_name}, kept whole as one step (its forward could not be traced)."""'
    body_text = "\n".join(header) + "\n"
    body_text += f'"""flodl port of {class_name} ({script_name}), written by ``fdl port``."""\n\n'
    parts = [
        "\n\n".join(defs),
        f"def build({source.params}) -> fl.Graph:\n"
        f'    """A new {class_name} as a graph (the arguments of {class_name}(...))."""\n'
        + textwrap.indent("\n".join(source.body), "    ")
        + "\n",
        "def from_torch(module: nn.Module) -> fl.Graph:\n"
        f'    """The graph of ``module`` (a {class_name}), sharing its weights and buffers."""\n'
        + "    return flow(module)\n",
        f"def flow(m: nn.Module) -> fl.Graph:\n    {flow_doc}\n"
        + textwrap.indent(flow_body, "    ")
        + "\n",
    ]
    text_so_far = "\n".join(parts)
    if "torch." in text_so_far:
        imports.add("import torch")
    body_text += _imports_block(imports) + "\n\n"
    body_text += "\n\n".join(p for p in parts if p)
    return format_source(body_text)


def _imports_block(imports: set[str]) -> str:
    def rank(line: str) -> tuple[int, int, str]:
        module = line.split()[1]
        top = module.split(".")[0]
        group = {"torch": 1, "flodl": 2}.get(top, 0 if top in sys.stdlib_module_names else 3)
        return (group, 0 if line.startswith("import ") else 1, line)

    groups: dict[int, list[str]] = {}
    for line in sorted(imports, key=rank):
        groups.setdefault(rank(line)[0], []).append(line)
    return "\n\n".join("\n".join(g) for _, g in sorted(groups.items()))


def format_source(text: str) -> str:
    """``text`` formatted by ruff (``ruff format -``) when ruff is on PATH or importable."""
    ruff = shutil.which("ruff")
    if ruff is None:
        try:
            from ruff.__main__ import find_ruff_bin  # type: ignore[import-untyped]

            ruff = find_ruff_bin()
        except Exception:
            return text
    try:
        done = subprocess.run(
            [ruff, "format", "--isolated", "--line-length", "100", "-"],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return text
    return done.stdout if done.returncode == 0 else text


__all__ = ["Source", "UnsupportedError", "init_source", "original_source", "render"]
