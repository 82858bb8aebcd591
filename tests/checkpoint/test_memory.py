"""Memory stays bounded by what the caller keeps, whatever the file declares (gzip bombs included).

The decisive tests run in a subprocess under an address-space limit (RLIMIT_AS) far below the
hostile file's decompressed size: an allocation the fix forbids would fail there, and a control
in the same process shows the limit really is too small to hold the payload.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import flodl as fl
from flodl.checkpoint.streams import Reader
from tests.conftest import REPO_ROOT, clean_env

BOMB_ELEMENTS = 50_000_000  # float32: 200 MB decompressed, about 194 KB of gzip
HEADROOM = 120 << 20  # address space allowed on top of the child's size once torch is loaded

CHILD = """
import io, json, resource, zlib
import torch
import flodl as fl
from tests.checkpoint.layout import entry, header

torch.set_num_threads(1)


def bomb(n):
    # Streamed, so building it never holds the 200 MB it expands to.
    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    parts = [z.compress(header(1) + entry("w", (n,), 3, b"", declared=4 * n))]
    zeros = bytes(1 << 20)
    left = 4 * n
    while left:
        parts.append(z.compress(zeros[: min(left, len(zeros))]))
        left -= min(left, len(zeros))
    return b"".join(parts) + z.flush()


def vm_size():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize"))


def attempt(fn):
    try:
        return "ok: " + str(fn())
    except fl.CheckpointError as err:
        return "CheckpointError: " + str(err)
    except (MemoryError, RuntimeError) as err:
        return "allocation failed: " + str(err)[:200]


data = bomb(BOMB_ELEMENTS)
w, b = torch.zeros(2), torch.ones(3)
_, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (vm_size() + HEADROOM, hard))
out = {
    "gz_bytes": len(data),
    "strict": attempt(lambda: fl.load_checkpoint(io.BytesIO(data), {"w": w})),
    "partial": attempt(
        lambda: fl.load_checkpoint(io.BytesIO(data), {"w": w, "b": b}, strict_shapes=False)
    ),
    "budget": attempt(lambda: fl.read_checkpoint(io.BytesIO(data), max_bytes=1 << 20)),
    "control": attempt(lambda: fl.read_checkpoint(io.BytesIO(data))),
    "untouched": w.tolist() == [0.0, 0.0] and b.tolist() == [1.0, 1.0, 1.0],
}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_gzip_bomb_entry_the_model_cannot_use_is_never_allocated():
    """Regression: a 194 KB .gz with a 200 MB ``w`` made load_checkpoint(src, {"w": zeros(2)})
    allocate all of it before reporting the shape mismatch."""
    code = f"BOMB_ELEMENTS = {BOMB_ELEMENTS}\nHEADROOM = {HEADROOM}\n" + textwrap.dedent(CHILD)
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=clean_env(OMP_NUM_THREADS="1", MALLOC_ARENA_MAX="2"),
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    assert out["gz_bytes"] < 1 << 20
    assert out["strict"].startswith("CheckpointError") and "shape mismatch" in out["strict"]
    assert "checkpoint=[50000000] model=[2]" in out["strict"]
    assert out["partial"].startswith("ok: loaded 0, skipped 0, missing 1, mismatched 1")
    assert out["budget"].startswith("CheckpointError") and "max_bytes=1048576" in out["budget"]
    assert out["untouched"]
    # The limit is real: holding the payload (what read_checkpoint must do) does not fit under it.
    assert out["control"].startswith("allocation failed"), out["control"]


@pytest.fixture
def materialised(monkeypatch) -> list[int]:
    """Sizes of every payload the reader materialises (skipped payloads are not counted)."""
    sizes: list[int] = []
    original = Reader.read_payload

    def spy(self, n, what, hasher):
        sizes.append(n)
        return original(self, n, what, hasher)

    monkeypatch.setattr(Reader, "read_payload", spy)
    return sizes


def test_load_materialises_only_entries_that_fit_a_target(materialised):
    buf = io.BytesIO()
    fl.save_checkpoint(
        buf, {"big": torch.zeros(1000), "same": torch.ones(3), "other": torch.zeros(500)}
    )
    buf.seek(0)
    same, big = torch.zeros(3, dtype=torch.float64), torch.zeros(2)
    report = fl.load_checkpoint(buf, {"same": same, "big": big}, strict_shapes=False)
    assert report.loaded == ["same"] and report.skipped == ["other"]
    assert [str(m) for m in report.mismatches] == [
        "same: dtype checkpoint=float32 model=float64",  # cast and loaded
        "big: shape checkpoint=[1000] model=[2]",
    ]
    assert materialised == [12]  # only "same" (3 float32): not "big", not "other"
    assert same.tolist() == [1.0, 1.0, 1.0] and big.tolist() == [0.0, 0.0]


def test_training_state_materialises_only_model_entries_that_fit(materialised):
    wide, narrow = nn.Linear(4, 300), nn.Linear(4, 2)
    buf = io.BytesIO()
    fl.save_training_state(buf, wide, epoch=1, rng=False)
    buf.seek(0)
    state = fl.load_training_state(buf, narrow, strict_shapes=False, restore_rng=False)
    assert state.epoch == 1 and {m.name for m in state.report.mismatches} == {"weight", "bias"}
    assert max(materialised) < 300 * 4  # the JSON header only: no model payload was built
