"""Whether this torch's source is the one flodl's detailed layer mirrors were checked against.

:func:`flodl.graph.inline.rnn`, :func:`~flodl.graph.inline.attention`,
:func:`~flodl.graph.inline.encoder_layer` and :func:`~flodl.graph.inline.encoder` copy torch's
``forward`` of ``nn.LSTM``/``GRU``/``RNN``, ``nn.MultiheadAttention`` and
``nn.TransformerEncoderLayer``/``TransformerEncoder`` in detail: private attributes, the fast
path's conditions, the kernel calls. A copy is exact only against the source it was checked
against, so each group of mirrors is on only when this torch's source of what it copies has a
:data:`CHECKED` fingerprint. The fingerprint reads the code, not the version number: a new torch
release that leaves these classes alone keeps its mirrors, and a patched build that changes them
(a backport, a local edit) turns them off, and the layers run their own ``forward``.

The fingerprint of a group is a digest of its definitions' syntax trees as they run, in a form
that does not depend on the Python version reading them: comments, docstrings, type annotations,
formatting and quoting do not count; any other change does (an error message included: such a
change is checked like any other, then its digest is added to :data:`CHECKED`).

    >>> from flodl.graph import torch_source
    >>> sorted(torch_source.SOURCES)
    ['attention', 'encoder', 'rnn']
    >>> len(torch_source.fingerprint("rnn"))
    16
    >>> torch_source.fingerprint("rnn") in torch_source.CHECKED["rnn"]
    True

Checking a new torch: ``python -m flodl.graph.torch_source`` prints each group's fingerprint and
whether it is checked; ``--show GROUP`` prints the definitions the fingerprint reads, to compare
with the same output under a torch already checked.
"""

from __future__ import annotations

import argparse
import ast
import functools
import gc
import hashlib
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import torch

SOURCES: dict[str, dict[str, tuple[str, ...]]] = {
    # inline.rnn: the layers' forward, their flat weight list and its refresh, the constructor
    # that sets the attributes it reads (mode, bias, batch_first...)
    "rnn": {"torch.nn.modules.rnn": ("RNNBase", "RNN", "LSTM", "GRU")},
    # inline.attention: forward's fast path and the helpers that decide it
    "attention": {
        "torch.nn.modules.activation": (
            "MultiheadAttention",
            "_check_arg_device",
            "_arg_requires_grad",
            "_is_make_fx_tracing",
        )
    },
    # inline.encoder_layer and encoder: the layer's fast path, the stack's loop, and what a
    # layer's ``__call__`` does beyond ``forward`` (encoder skips it when it would do nothing)
    "encoder": {
        "torch.nn.modules.transformer": (
            "TransformerEncoderLayer",
            "TransformerEncoder",
            "_detect_is_causal_mask",
            "_get_seq_len",
        ),
        "torch.nn.modules.module": ("Module._wrapped_call_impl", "Module._call_impl"),
    },
}
"""Each group of mirrors: the top-level definitions of torch it copies, by module (a class is
read whole; ``Class.method`` reads one method)."""

CHECKED: dict[str, dict[str, str]] = {
    "rnn": {
        # 2.4 and 2.5 set a variable they never read; 2.6 to 2.10 differ in warnings' stacklevel
        # and zip(strict=True) over lists of one length
        "3f8881eae0feb40c": "2.4, 2.5",
        "4fc7fd298fe55d52": "2.6 to 2.9",
        "f1f9df642d64da46": "2.10",
        # 2.11 words errors and constructor checks differently: the same decisions and kernels
        "0ed24658337bc0e6": "2.11 to 2.15",
    },
    "attention": {
        # 2.10's _is_make_fx_tracing also says True under torch.export (the mirror calls it)
        "54c2da60803df265": "2.4 to 2.9",
        "2afb8436788fdf47": "2.10",
        "0369ed127dd41a82": "2.11",
        # 2.12 checks make_fx tracing later: the fast path's decision itself is unchanged
        "8b08a3958d26f351": "2.12 to 2.15",
    },
    "encoder": {
        # before 2.10 the fast path takes no xpu tensor (inline._ENCODER_DEVICES); 2.4 to 2.6
        # differ in Module._call_impl's structure and keyword hooks, which a call without hooks
        # does not reach; 2.4's fast path takes no notice of hooks inside the layer (the mirror
        # then runs forward, which fuses as 2.4 does)
        "b67b38e6c694030f": "2.4",
        "b0d54c019736e305": "2.5",
        "1c2c852d0a32b1ff": "2.6 to 2.9",
        "d2584082faf86d38": "2.10 to 2.14",
        # 2.15's Module._call_impl asks whether jit traces as torch._C._is_tracing()
        "42f5610a6a0f1a9d": "2.15",
    },
}
"""Per group, the fingerprints of the torch sources its mirrors were checked against (outputs
and gradients bit for bit, every fast-path condition read), and the torch releases that have
each."""


def _source_file(module_name: str, root: Path | None) -> Path:
    """The file of ``module_name``: the installed one, or the one under ``root`` (a directory
    holding ``torch/``: an unpacked wheel or a checkout)."""
    if root is not None:
        return root.joinpath(*module_name.split(".")).with_suffix(".py")
    path = importlib.import_module(module_name).__file__
    if path is None:
        raise OSError(f"{module_name} has no source file")
    return Path(path)


def _definitions(
    module_name: str, names: tuple[str, ...], root: Path | None = None
) -> Iterator[tuple[str, ast.AST]]:
    """``names`` as defined in torch's module ``module_name``: each one's syntax tree."""
    path = _source_file(module_name, root)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # a large parse allocates enough objects to start a full collection over everything torch
    # has made: ten times the parse itself
    collecting = gc.isenabled()
    gc.disable()
    try:
        tree = ast.parse(text)
    finally:
        if collecting:
            gc.enable()
    for name in names:
        body: list[ast.stmt] = tree.body
        found: ast.ClassDef | ast.FunctionDef | None = None
        for part in name.split("."):
            found = next(
                (
                    node
                    for node in body
                    if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == part
                ),
                None,
            )
            if found is None:
                raise LookupError(f"{module_name} defines no {name}")
            body = found.body
        assert found is not None
        yield f"{module_name}:{name}", _Runtime().visit(found)


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


class _Runtime(ast.NodeTransformer):
    """A definition as it runs: docstrings and type annotations left out (torch rewrites its
    annotations from release to release: ``Optional[Tensor]`` became ``Tensor | None``)."""

    def _body(self, node: ast.ClassDef | ast.FunctionDef) -> ast.AST:
        self.generic_visit(node)
        if node.body and _is_docstring(node.body[0]):
            node.body = node.body[1:]
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return self._body(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.returns = None
        return self._body(node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.annotation = None
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None:  # a declaration: nothing runs
            return None
        assign = ast.Assign(targets=[node.target], value=self.visit(node.value))
        return ast.copy_location(assign, node)


def _canonical(node: object, out: list[str]) -> None:
    """Writes ``node`` to ``out`` in a form only its code decides: the node types and the fields
    set (absent fields and empty lists are left out, so a field a later Python adds with an
    empty default changes nothing), an f-string's literal parts joined."""
    if isinstance(node, list):
        out.append("[")
        for item in node:
            _canonical(item, out)
            out.append(",")
        out.append("]")
        return
    if not isinstance(node, ast.AST):
        out.append(repr(node))
        return
    out.append(type(node).__name__ + "(")
    for field in node._fields:
        value: object = getattr(node, field, None)
        if field == "values" and isinstance(node, ast.JoinedStr):
            value = _joined(node.values)
        if value is None or value == [] or field == "type_comment":
            continue
        out.append(field + "=")
        _canonical(value, out)
        out.append(" ")
    out.append(")")


def _joined(values: list[ast.expr]) -> list[object]:
    """An f-string's parts with adjacent literal text joined and empty text dropped (Pythons
    split it differently)."""
    parts: list[object] = []
    for value in values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            if parts and isinstance(parts[-1], str):
                parts[-1] += value.value
            elif value.value:
                parts.append(value.value)
        else:
            parts.append(value)
    return parts


def canonical_source(group: str, root: Path | None = None) -> str:
    """The definitions ``group``'s fingerprint reads, as Python (docstrings and annotations
    left out), from this torch or the one under ``root``."""
    chunks = []
    for module_name, names in SOURCES[group].items():
        for label, node in _definitions(module_name, names, root):
            chunks.append(f"# {label}\n{ast.unparse(node)}\n")
    return "\n".join(chunks)


def fingerprint(group: str, root: Path | None = None) -> str:
    """The digest of this torch's source of what ``group``'s mirrors copy (16 hex digits), or
    of the source under ``root`` (a directory holding ``torch/``).

    Raises ``OSError`` or ``LookupError`` when that source cannot be read (a build without its
    ``.py`` files, a definition moved away).
    """
    out: list[str] = []
    for module_name, names in SOURCES[group].items():
        for label, node in _definitions(module_name, names, root):
            out.append(label + "=")
            _canonical(node, out)
            out.append("\n")
    return hashlib.sha256("".join(out).encode()).hexdigest()[:16]


# what reading a source can raise: a missing file, a moved definition, a file that is not Python
# (ValueError: undecodable bytes, or a NUL byte, which Python 3.11 reports so)
_UNREADABLE = (OSError, LookupError, SyntaxError, ValueError)


def is_checked(group: str, root: Path | None = None) -> bool:
    """Whether this torch's source of what ``group``'s mirrors copy (or the source under
    ``root``) is one they were checked against; False when it cannot be read."""
    try:
        return fingerprint(group, root) in CHECKED[group]
    except _UNREADABLE:
        return False


@functools.cache
def mirrored(group: str) -> bool:
    """Whether ``group``'s mirrors are on in this process: :func:`is_checked` for the installed
    torch, read once, on the first graph that has such a layer (5–20 ms a group)."""
    return is_checked(group)


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """The command: each group's fingerprint and verdict on ``out`` (standard output); 1 when a
    group is not checked or cannot be read."""
    out = out or sys.stdout
    parser = argparse.ArgumentParser(
        prog="python -m flodl.graph.torch_source",
        description="This torch's fingerprint of the source each group of layer mirrors copies.",
    )
    parser.add_argument("--show", choices=sorted(SOURCES), help="print what GROUP's digest reads")
    parser.add_argument(
        "--root",
        type=Path,
        help="read the torch under this directory (an unpacked wheel) instead of the installed one",
    )
    args = parser.parse_args(argv)
    if args.show:
        try:
            out.write(canonical_source(args.show, args.root))
        except _UNREADABLE as error:
            out.write(f"{args.show}: UNREADABLE ({error})\n")
            return 1
        return 0
    out.write(f"torch {torch.__version__}\n" if args.root is None else f"torch under {args.root}\n")
    unchecked = 0
    for group in SOURCES:
        try:
            digest = fingerprint(group, args.root)
        except _UNREADABLE as error:
            digest, verdict = "-" * 16, f"UNREADABLE ({error}): mirrors off"
        else:
            known = CHECKED[group].get(digest)
            verdict = f"checked (as in torch {known})" if known else "NOT CHECKED: mirrors off"
        unchecked += not verdict.startswith("checked")
        out.write(f"{group:10} {digest}  {verdict}\n")
    return 1 if unchecked else 0


if __name__ == "__main__":
    raise SystemExit(main())
