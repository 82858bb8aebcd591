"""`fdl api-ref`: time to extract the whole flodl package, cold (griffe, no cache) and cached.

Baselines measured in the same run: `python -c pass` and `python -c "import flodl"` (what an
import-based extractor would pay before reading anything). Set FDL_BENCH_SRC to a flodl source
tree to measure another checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import interleaved, ratio, write_report

from fdl.apiref import load_reference
from fdl.apiref.extract import extract
from fdl.apiref.source import find_source


def main(rounds: int = 9) -> list[dict[str, object]]:
    src = os.environ.get("FDL_BENCH_SRC")
    source = find_source(src)
    home = tempfile.mkdtemp(prefix="fdl-bench-home-")
    repo = str(Path(__file__).resolve().parent.parent)  # this checkout's fdl
    env = {
        **os.environ,
        "FLODL_HOME": home,
        "PYTHONPATH": os.pathsep.join([str(source.root), repo]),
    }
    os.environ["FLODL_HOME"] = home
    load_reference(src)  # warm the cache for the cached cases
    path_args = ["--path", str(source.root)]

    def cli(*args: str):
        def run() -> None:
            subprocess.run([sys.executable, *args], check=True, capture_output=True, env=env)

        return run

    results = interleaved(
        {
            "extract, cold (in-process)": lambda: extract(source),
            "load, cached (in-process)": lambda: load_reference(src),
            "python -c pass": cli("-c", "pass"),
            "python -c 'import flodl'": cli("-c", "import flodl"),
            "fdl api-ref --json (cached)": cli("-m", "fdl", "api-ref", "--json", *path_args),
            "fdl api-ref --json --no-cache": cli(
                "-m", "fdl", "api-ref", "--json", "--no-cache", *path_args
            ),
        },
        rounds=rounds,
        inner=3,
        warmup=1,
    )
    entries = len(extract(source).entries)
    rows = [
        {
            "case": name,
            "median_ms": m.median_s * 1e3,
            "ratio_vs_import_flodl": ratio(results, name, "python -c 'import flodl'"),
        }
        for name, m in results.items()
    ]
    path = write_report(
        "fdl api-ref extraction",
        rows,
        "api_ref",
        f"{source.package_dir} ({entries} entries, {len(source.python_files())} files); "
        f"median of per-round medians over {rounds} interleaved rounds",
    )
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main()
