"""Regenerate tests/checkpoint/fixtures/ from the documented layout.

Run from the repository root: python -m tests.checkpoint.make_fixtures
"""

from __future__ import annotations

import gzip

from tests.checkpoint.layout import FIXTURES, fixture_entries, hash_of, original_bytes

if __name__ == "__main__":
    FIXTURES.mkdir(exist_ok=True)
    (FIXTURES / "original_v1.fdl").write_bytes(original_bytes(fixture_entries(), version=1))
    v2 = original_bytes(fixture_entries(), version=2, digest=bytes.fromhex(hash_of("fixture")))
    (FIXTURES / "original_v2.fdl").write_bytes(v2)
    (FIXTURES / "original_v2.fdl.gz").write_bytes(gzip.compress(v2, mtime=0))
