"""Run a script as ``__main__`` the way ``python SCRIPT`` would; on an uncaught exception,
write a JSON report of it (type, message, PEP 678 notes, frames) for ``fdl check``.

Standalone on purpose (stdlib only, run by path): the child never imports fdl.
Usage: ``FDL_CHECK_REPORT=out.json python _smoke_runner.py SCRIPT [ARGS...]``
"""

import json
import os
import runpy
import sys
import traceback
from pathlib import Path


def _report(path: str, exc: BaseException) -> None:
    here = Path(__file__).resolve()
    frames = [
        {"file": f.filename, "line": f.lineno, "function": f.name, "code": f.line or ""}
        for f in traceback.extract_tb(exc.__traceback__)
        if Path(f.filename).resolve() != here and Path(f.filename).name != "runpy.py"
    ]
    document = {
        "type": type(exc).__qualname__,
        "module": type(exc).__module__,
        "message": str(exc),
        "notes": [str(n) for n in getattr(exc, "__notes__", [])],
        "frames": frames,
    }
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle)


def main() -> None:
    report = os.environ.pop("FDL_CHECK_REPORT", "")
    script = str(Path(sys.argv[1]).resolve())
    sys.argv = sys.argv[1:]
    sys.path[0] = str(Path(script).parent)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0) and report:
            _report(report, exc)
        raise
    except BaseException as exc:
        if report:
            _report(report, exc)
        raise


if __name__ == "__main__":
    main()
