"""Run a script as ``__main__`` the way ``python SCRIPT`` would, on the smoke budget, and tell
``fdl check`` how it went: which of the script's lines ran, which loops the budget shortened, and
on an uncaught exception a JSON report of it (type, message, PEP 678 notes, frames).

The budget shortens loops instead of stopping the script, so the code after a training loop
(evaluation, saving) runs too. Before compiling, the script's training-shaped loops are rewritten
to stop after ``FDL_SMOKE_LOOP_CAP`` iterations (a ``for`` iterates a capped view of its
iterable; a ``while`` counts its iterations). A loop is training-shaped when

* its body (or a function of the script it calls, transitively) calls ``.backward()``,
  ``.step()``, ``.zero_grad()`` or ``.log(...)`` on something other than ``torch``/``math``/
  ``numpy``; or
* its loop variable or what it iterates over names a loader, epochs, batches, steps or
  iterations (``for epoch in range(10)``, ``enumerate(train_loader)``, ``range(num_steps)``).

Other loops (a model's ``for t in range(x.size(1))``, building layers) run in full. Nothing else
about the script changes: line numbers, ``__file__``, ``sys.argv`` and ``__main__`` are those of
``python SCRIPT ARGS``.

What the script overwrites, deletes or renames over is kept first (``_file_guard``, loaded
from beside this file), for fdl check to put back after the run.

Standalone on purpose (stdlib only, run by path): the child never imports fdl.
Usage: ``FDL_CHECK_REPORT=out.json python _smoke_runner.py SCRIPT [ARGS...]``
"""

import ast
import importlib.util
import itertools
import json
import os
import sys
import threading
import traceback
import types
from pathlib import Path

_TRAINING_CALLS = frozenset({"backward", "step", "zero_grad", "log"})
_NOT_TRAINING_BASES = frozenset({"torch", "math", "np", "numpy", "F", "functional", "os", "cmath"})
_TRAINING_WORDS = ("loader", "epoch", "batch", "step", "iter")


def _write(path: str, document: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle)


def _exception(exc: BaseException, script: Path) -> dict:
    here = Path(__file__).resolve()
    frames = [
        {"file": f.filename, "line": f.lineno, "function": f.name, "code": f.line or ""}
        for f in traceback.extract_tb(exc.__traceback__)
        if Path(f.filename).resolve() != here and Path(f.filename).name != "runpy.py"
    ]
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        # compile errors (a misplaced `from __future__`) happen before any frame of the script
        frames.append(
            {
                "file": exc.filename,
                "line": exc.lineno,
                "function": "<module>",
                "code": (exc.text or "").strip(),
            }
        )
    return {
        "type": type(exc).__qualname__,
        "module": type(exc).__module__,
        "message": str(exc),
        "notes": [str(n) for n in getattr(exc, "__notes__", [])],
        "frames": frames,
    }


def _src_dir(script: Path) -> Path | None:
    """``src/`` of the project holding ``script`` (nearest pyproject.toml), for a src layout.

    A scaffolded project's ``src/<pkg>/train.py`` imports its own package, which ``python
    src/<pkg>/train.py`` finds only when the project is installed; the smoke run must not
    depend on that.
    """
    for directory in script.parents:
        if (directory / "pyproject.toml").is_file():
            src = directory / "src"
            return src if src.is_dir() else None
    return None


# -- which loops are training-shaped ---------------------------------------------------------
def _call_name(call: ast.Call) -> tuple[str | None, str | None]:
    """(base name, called name) of ``base.name(...)`` / ``name(...)``."""
    func = call.func
    if isinstance(func, ast.Attribute):
        base = func.value.id if isinstance(func.value, ast.Name) else None
        return base, func.attr
    if isinstance(func, ast.Name):
        return None, func.id
    return None, None


def _training_call(call: ast.Call) -> bool:
    base, name = _call_name(call)
    return (
        isinstance(call.func, ast.Attribute)
        and name in _TRAINING_CALLS
        and base not in _NOT_TRAINING_BASES
    )


def _calls(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


def _training_functions(tree: ast.AST) -> set[str]:
    """Names of the script's functions that train, directly or through each other."""
    functions = {
        f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    training = {name for name, f in functions.items() if any(map(_training_call, _calls(f)))}
    changed = True
    while changed:
        changed = False
        for name, f in functions.items():
            if name not in training and any(_call_name(c)[1] in training for c in _calls(f)):
                training.add(name)
                changed = True
    return training


def _shaped_like_training(loop: ast.For | ast.While, training: set[str]) -> bool:
    if isinstance(loop, ast.For):
        text = f"{ast.unparse(loop.target)} {ast.unparse(loop.iter)}".lower()
    else:
        text = ast.unparse(loop.test).lower()
    if any(word in text for word in _TRAINING_WORDS):
        return True
    body = ast.Module(body=list(loop.body), type_ignores=[])
    return any(_training_call(c) or _call_name(c)[1] in training for c in _calls(body))


class _Capper(ast.NodeTransformer):
    """Rewrite training-shaped loops to stop after the cap."""

    def __init__(self, training: set[str]) -> None:
        self.training = training

    def visit_For(self, node):
        self.generic_visit(node)
        if not _shaped_like_training(node, self.training):
            return node
        node.iter = ast.Call(
            func=ast.Name("__fdl_smoke_cap__", ast.Load()),
            args=[node.iter, ast.Constant(node.lineno)],
            keywords=[],
        )
        return node

    def visit_While(self, node):
        self.generic_visit(node)
        if not _shaped_like_training(node, self.training):
            return node
        counter = f"_fdl_smoke_while_{node.lineno}"
        start = ast.Assign([ast.Name(counter, ast.Store())], ast.Constant(0))
        within = ast.Call(
            func=ast.Name("__fdl_smoke_tick__", ast.Load()),
            args=[ast.Name(counter, ast.Load()), ast.Constant(node.lineno)],
            keywords=[],
        )
        node.test = ast.BoolOp(ast.And(), [within, node.test])
        bump = ast.AugAssign(ast.Name(counter, ast.Store()), ast.Add(), ast.Constant(1))
        node.body = [bump, *node.body]
        return [start, node]


def _instrument(source: str, filename: str) -> types.CodeType:
    compile(source, filename, "exec")  # fails where `python script.py` would, and as it would
    # Walking a tree as deep as Python compiles (a long FlowBuilder chain) takes several Python
    # frames per level: more than the default recursion limit allows.
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, 20_000))
    try:
        tree = ast.parse(source, filename=filename)
        tree = _Capper(_training_functions(tree)).visit(tree)
        ast.fix_missing_locations(tree)
        return compile(tree, filename, "exec")
    finally:
        sys.setrecursionlimit(before)


# -- the run ---------------------------------------------------------------------------------
class _Budget:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.shortened: set[int] = set()

    def cap_iterable(self, iterable, line):
        iterator = iter(iterable)
        yield from itertools.islice(iterator, self.cap)
        if self._has_more(iterator):
            self.shortened.add(line)

    @staticmethod
    def _has_more(iterator) -> bool:
        try:
            next(iterator)
        except StopIteration:
            return False
        except Exception:  # an iterator that fails past the budget is not our business
            return True
        return True

    def tick(self, count: int, line: int) -> bool:
        if count >= self.cap:
            self.shortened.add(line)
            return False
        return True


class _Lines:
    """The script's executed line numbers (a trace function on the script's frames only).

    A frame is the script's when it runs in the script's globals and comes from its file. The
    globals are checked first: reading ``frame.f_code`` raises an audit event, and the file
    guard's hook would otherwise run on every Python call the run makes.
    """

    def __init__(self, filename: str, globals_: dict) -> None:
        self.filename = filename
        self.globals = globals_
        self.seen: set[int] = set()

    def _local(self, frame, event, arg):
        if event == "line":
            self.seen.add(frame.f_lineno)
        return self._local

    def global_trace(self, frame, event, arg):
        if frame.f_globals is not self.globals or frame.f_code.co_filename != self.filename:
            return None
        self.seen.add(frame.f_lineno)
        return self._local

    def start(self) -> None:
        sys.settrace(self.global_trace)
        threading.settrace(self.global_trace)

    def stop(self) -> None:
        sys.settrace(None)
        threading.settrace(None)


def _file_guard():
    """``_file_guard`` beside this file, loaded by path (this file runs outside the package)."""
    path = Path(__file__).with_name("_file_guard.py")
    spec = importlib.util.spec_from_file_location("_fdl_file_guard", path)
    assert spec is not None and spec.loader is not None  # a .py file beside this one
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    guard = _file_guard().install()
    report = os.environ.pop("FDL_CHECK_REPORT", "")
    cap = int(os.environ.pop("FDL_SMOKE_LOOP_CAP", "2") or 2)
    script = Path(sys.argv[1]).resolve()
    sys.argv = sys.argv[1:]
    sys.path[0] = str(script.parent)
    src = _src_dir(script)
    if src is not None and str(src) not in sys.path:
        sys.path.insert(1, str(src))
    # flodl's Monitor ends a smoke run itself only when nothing shortens the loops
    os.environ["FLODL_SMOKE_LOOPS_CAPPED"] = "1"
    budget = _Budget(cap)
    document: dict = {}
    main_module = types.ModuleType("__main__")
    lines = _Lines(str(script), main_module.__dict__)
    main_module.__dict__.update(
        {
            "__file__": str(script),
            "__builtins__": __builtins__,
            "__fdl_smoke_cap__": budget.cap_iterable,
            "__fdl_smoke_tick__": budget.tick,
        }
    )
    sys.modules["__main__"] = main_module
    try:
        source = script.read_text(encoding="utf-8")
        code = _instrument(source, str(script))
        lines.start()
        try:
            exec(code, main_module.__dict__)
        finally:
            lines.stop()
    except SystemExit as exc:
        if exc.code not in (None, 0):
            document["exception"] = _exception(exc, script)
        raise
    except BaseException as exc:
        document["exception"] = _exception(exc, script)
        raise
    finally:
        if guard is not None:
            guard.active = False  # the report is fdl's, not the script's
        if report:
            document["lines"] = sorted(lines.seen)
            document["shortened_loops"] = sorted(budget.shortened)
            _write(report, document)


if __name__ == "__main__":
    main()
