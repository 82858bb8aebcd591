"""fdl's download engine vs curl, same loopback server, same run (interleaved); and a resume.

Throughput ratio = curl time / case time (≥ 1: at least as fast as curl). fdl's time includes its
sha256 (computed on a helper thread while streaming) and the rename into place; plain curl only
writes the file, so "curl + sha256sum" is the same-work baseline. On a machine without a spare
core the hash cannot overlap the transfer and the plain-curl ratio drops accordingly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # fdl and the test server
from harness import interleaved, write_report

from fdl.downloads import download
from fdl.downloads.engine import DownloadError
from tests.fixtures.loopback import LoopbackServer


def _serve(body_mb: int, conn) -> None:
    """The server lives in its own process, so it never competes with fdl for the GIL."""
    body = os.urandom(1 << 20) * body_mb
    with LoopbackServer() as server:
        server.add("/big.bin", body)
        server.add("/half.bin", body, drop_after=len(body) // 2, drops_left=1)
        conn.send(server.url)
        conn.recv()  # until told to stop


SIZE = int(os.environ.get("FDL_BENCH_DOWNLOAD_MB", "500")) << 20


def main(rounds: int = 5) -> list[dict[str, object]]:
    curl = shutil.which("curl")
    if curl is None:
        print("curl not found: skipping the download benchmark")
        return []
    import multiprocessing

    work = Path(tempfile.mkdtemp(prefix="fdl-bench-dl-"))
    parent, child = multiprocessing.Pipe()
    proc = multiprocessing.Process(target=_serve, args=(SIZE >> 20, child), daemon=True)
    proc.start()
    base = parent.recv()
    try:
        url = f"{base}/big.bin"

        def with_curl() -> None:
            subprocess.run([curl, "-s", "-f", "-o", str(work / "curl.bin"), url], check=True)

        def with_curl_sha256() -> None:  # the same work as fdl: fetch, then verify
            with_curl()
            subprocess.run(["sha256sum", str(work / "curl.bin")], check=True, capture_output=True)

        def with_fdl() -> None:
            download(url, work / "fdl.bin", progress=False)

        results = interleaved(
            {"curl": with_curl, "curl + sha256sum": with_curl_sha256, "fdl": with_fdl},
            rounds=rounds,
            inner=1,
            warmup=1,
        )
        # Resume: drop the connection half-way, then measure what the second call fetches.
        with contextlib.suppress(DownloadError):
            download(f"{base}/half.bin", work / "half.bin", retries=0, progress=False)
        resumed = download(f"{base}/half.bin", work / "half.bin", progress=False)
    finally:
        parent.send("stop")
        proc.join(10)
        shutil.rmtree(work, ignore_errors=True)
    mb = SIZE / (1 << 20)
    rows: list[dict[str, object]] = [
        {
            "case": name,
            "median_s": m.median_s,
            "MB_per_s": mb / m.median_s,
            "throughput_ratio_vs_curl": results["curl"].median_s / m.median_s,
        }
        for name, m in results.items()
    ]
    rows.append(
        {
            "case": "resume after a drop at 50%",
            "median_s": float("nan"),
            "MB_per_s": float("nan"),
            "throughput_ratio_vs_curl": float("nan"),
            "bytes_kept": resumed.resumed_from,
            "bytes_transferred_on_resume": resumed.transferred,
            "missing_bytes": SIZE - resumed.resumed_from,
        }
    )
    for row in rows[:-1]:
        row.update(bytes_kept="", bytes_transferred_on_resume="", missing_bytes="")
    path = write_report(
        "Download engine vs curl (loopback)",
        rows,
        "downloads",
        f"{mb:.0f} MB from a 127.0.0.1 server; median over {rounds} interleaved rounds",
    )
    print(path.read_text())
    return rows


if __name__ == "__main__":
    main()
