"""A PyTorch wheel index on 127.0.0.1, for installing a generated project with no network.

It stands in for ``download.pytorch.org/whl/<tag>`` (through ``FDL_TORCH_MIRROR``): the page of
``torch`` lists the torch wheels found in this machine's local wheel directories (pip's
``find-links``), every other project is a 404, as on the real index for packages it lacks.
"""

from __future__ import annotations

import contextlib
import html
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote


def local_wheel_dirs() -> list[Path]:
    """Directories pip is configured to find wheels in (``PIP_FIND_LINKS``, pip's config)."""
    found = os.environ.get("PIP_FIND_LINKS", "").split()
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.find-links"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode == 0:
        found += proc.stdout.split()
    return [Path(d) for d in dict.fromkeys(found) if Path(d).is_dir()]


def torch_wheels(version: str) -> list[Path]:
    """Local wheels of torch ``version`` (e.g. ``2.13.0+cpu``)."""
    prefix = f"torch-{version}-"
    return sorted(w for d in local_wheel_dirs() for w in d.glob(f"{prefix}*.whl"))


@contextlib.contextmanager
def serve_torch_index(wheels: list[Path]) -> Iterator[str]:
    """Serve ``wheels`` as ``/whl/<tag>/torch/``; yields the mirror URL (``http://127.0.0.1:N``)."""
    by_name = {w.name: w for w in wheels}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self) -> None:
            parts = [p for p in unquote(self.path.split("?")[0]).split("/") if p]
            if parts[-1:] and parts[-1] in by_name:
                path = by_name[parts[-1]]
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(path.stat().st_size))
                self.end_headers()
                with open(path, "rb") as source:
                    shutil.copyfileobj(source, self.wfile)
                return
            if len(parts) == 3 and parts[0] == "whl" and parts[2] == "torch":
                links = "".join(
                    f'<a href="{html.escape(n)}">{html.escape(n)}</a><br>' for n in by_name
                )
                body = f"<!DOCTYPE html><html><body>{links}</body></html>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_error(404)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
