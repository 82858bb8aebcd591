"""Run a script as ``__main__`` the way ``python SCRIPT`` would, and tell ``fdl check`` how it
ended: on an uncaught exception, a JSON report of it (type, message, PEP 678 notes, frames); when
flodl's Monitor ended the run at the smoke budget (``SmokeBudgetReached``), a note saying so.

Standalone on purpose (stdlib only, run by path): the child never imports fdl.
Usage: ``FDL_CHECK_REPORT=out.json python _smoke_runner.py SCRIPT [ARGS...]``
"""

import json
import os
import runpy
import sys
import traceback
from pathlib import Path


def _write(path: str, document: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle)


def _exception(exc: BaseException) -> dict:
    here = Path(__file__).resolve()
    frames = [
        {"file": f.filename, "line": f.lineno, "function": f.name, "code": f.line or ""}
        for f in traceback.extract_tb(exc.__traceback__)
        if Path(f.filename).resolve() != here and Path(f.filename).name != "runpy.py"
    ]
    return {
        "type": type(exc).__qualname__,
        "module": type(exc).__module__,
        "message": str(exc),
        "notes": [str(n) for n in getattr(exc, "__notes__", [])],
        "frames": frames,
    }


def _is_budget_stop(exc: SystemExit) -> bool:
    """flodl.monitor.SmokeBudgetReached, recognised without importing flodl."""
    return any(
        cls.__name__ == "SmokeBudgetReached" and cls.__module__.startswith("flodl.")
        for cls in type(exc).__mro__
    )


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


def main() -> None:
    report = os.environ.pop("FDL_CHECK_REPORT", "")
    script = Path(sys.argv[1]).resolve()
    sys.argv = sys.argv[1:]
    sys.path[0] = str(script.parent)
    src = _src_dir(script)
    if src is not None and str(src) not in sys.path:
        sys.path.insert(1, str(src))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        if report and _is_budget_stop(exc):
            _write(report, {"budget_stop": {"epochs": getattr(exc, "epochs", None)}})
        elif report and exc.code not in (None, 0):
            _write(report, {"exception": _exception(exc)})
        raise
    except BaseException as exc:
        if report:
            _write(report, {"exception": _exception(exc)})
        raise


if __name__ == "__main__":
    main()
