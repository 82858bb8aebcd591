"""A cheap per-call allocation guard for tests: an address-space limit just above what the process
already uses, so any allocation bigger than the headroom fails instead of succeeding silently."""

from __future__ import annotations

import contextlib
import resource
from collections.abc import Iterator
from pathlib import Path

STATUS = Path("/proc/self/status")


def vm_size() -> int | None:
    """The process's virtual memory size in bytes (Linux), or None where /proc is unavailable."""
    try:
        text = STATUS.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return None


@contextlib.contextmanager
def address_space_headroom(nbytes: int) -> Iterator[None]:
    """Inside the block, the process may grow by at most about ``nbytes`` of address space.

    Only the soft limit changes, so it is restored afterwards. A no-op without /proc (the CI
    and the development machines are Linux).
    """
    size = vm_size()
    if size is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = size + nbytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
