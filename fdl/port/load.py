"""Load what ``fdl port`` works on: the script as a module, the model, and the example inputs."""

from __future__ import annotations

import ast
import difflib
import importlib.util
import inspect
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fdl.errors import FdlUsageError
from fdl.port.errors import PortError


def module_name(script: Path) -> str:
    """The name the script is imported under: its stem (so a port can import its classes)."""
    stem = script.stem
    return stem if stem.isidentifier() else "_fdl_port_script"


def _where(exc: BaseException, script: Path) -> str:
    """``file:line`` of the innermost frame in ``script`` (else the innermost frame) of ``exc``."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if Path(f.filename).resolve() == script.resolve()]
    found = mine or frames
    if not found:
        return script.name
    return f"{Path(found[-1].filename).name}:{found[-1].lineno}"


def import_script(script: Path) -> Any:
    """Import ``script`` as a module (its ``if __name__ == "__main__":`` block does not run)."""
    name = module_name(script)
    directory = str(script.resolve().parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location(name, script)
    if spec is None or spec.loader is None:
        raise FdlUsageError(f"{script}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    argv = sys.argv
    sys.argv = [str(script)]  # a module-level parse_args() would otherwise read fdl's own argv
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:
        raise PortError(
            f"importing {script.name} exited ({exc.code})",
            'keep the script\'s work under `if __name__ == "__main__":`',
        ) from None
    except Exception as exc:
        raise PortError(
            f"importing {script.name} failed at {_where(exc, script)}: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        sys.argv = argv
    return module


def find_class(module: Any, name: str, script: Path) -> Any:
    """The ``nn.Module`` subclass ``name`` defined or imported in ``module``."""
    from torch import nn

    classes = sorted(
        key
        for key, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, nn.Module)
        and value.__module__ == module.__name__
    )
    cls = getattr(module, name, None)
    if isinstance(cls, type) and issubclass(cls, nn.Module):
        return cls
    if cls is not None:
        raise FdlUsageError(f"{name} in {script.name} is not an nn.Module class")
    close = difflib.get_close_matches(name, classes, n=1)
    if close:
        hint = f"did you mean {close[0]}?"
    elif classes:
        hint = f"model classes in {script.name}: {', '.join(classes)}"
    else:
        hint = f"{script.name} defines no nn.Module class"
    raise FdlUsageError(f"class {name} not found in {script.name}", hint)


def parse_init(text: str | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``--init``: a Python literal; a tuple is positional arguments, a dict keyword arguments."""
    if text is None:
        return (), {}
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise FdlUsageError(
            f"--init {text!r} is not a Python literal",
            "pass a tuple of positional arguments, e.g. --init '(3, 10)', or a dict, "
            "e.g. --init \"{'num_classes': 10}\"",
        ) from None
    if isinstance(value, dict):
        if not all(isinstance(k, str) and k.isidentifier() for k in value):
            raise FdlUsageError("--init: a dict's keys are the constructor's argument names")
        return (), value
    if isinstance(value, tuple):
        return value, {}
    return (value,), {}


def construct(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any], script: Path) -> Any:
    """``cls(*args, **kwargs)``; a missing or unknown argument is an error naming it."""
    try:
        inspect.signature(cls).bind(*args, **kwargs)
    except TypeError as exc:
        raise FdlUsageError(
            f"cannot construct {cls.__name__}: {exc}", "pass its arguments with --init"
        ) from None
    except ValueError:  # no signature to check: let the call say what is wrong
        pass
    try:
        return cls(*args, **kwargs)
    except Exception as exc:
        raise PortError(
            f"cannot construct {cls.__name__} ({_where(exc, script)}): {type(exc).__name__}: {exc}",
            "check the --init arguments",
        ) from None


@dataclass(frozen=True)
class Example:
    """One call's arguments: ``--example-input`` number ``number`` (from 1) drawn under ``seed``."""

    number: int
    seed: int
    args: tuple[Any, ...]


def example_inputs(exprs: list[str], seeds: int = 2) -> list[Example]:
    """Each ``--example-input`` (a tensor or a tuple of positional arguments, ``torch`` in scope),
    evaluated under ``torch.manual_seed(s)`` for each ``s < seeds``.

    A random expression gives one input per seed, so a port is proven on values nobody chose, and
    a re-run proves it on the same ones; a draw equal to an earlier one (an expression that draws
    nothing, or seeds itself) is dropped.
    """
    import torch

    if not exprs:
        raise FdlUsageError(
            "an example input is needed to trace and check the model",
            "pass --example-input 'torch.randn(2, 3, 32, 32)'",
        )
    if seeds < 1:
        raise FdlUsageError(
            f"--seeds {seeds}: at least one seed is needed", "pass --seeds 1 or more"
        )
    cases: list[Example] = []
    for number, expr in enumerate(exprs, 1):
        drawn: list[tuple[Any, ...]] = []
        for seed in range(seeds):
            torch.manual_seed(seed)
            try:
                value = eval(expr, {"torch": torch, "__builtins__": __builtins__})
            except Exception as exc:
                raise FdlUsageError(
                    f"--example-input {expr!r}: {type(exc).__name__}: {exc}",
                    "a Python expression with torch in scope, e.g. 'torch.randn(2, 3, 32, 32)'",
                ) from None
            args = value if isinstance(value, tuple) else (value,)
            if not any(_same(args, earlier) for earlier in drawn):
                drawn.append(args)
                cases.append(Example(number, seed, args))
    return cases


def _same(a: Any, b: Any) -> bool:
    """Equal values, tensors compared element by element (shape and dtype included)."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and bool(torch.equal(a, b))
        )
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:
        return False
