"""Truncated, corrupted and hostile files: always a clear CheckpointError, never a crash or a
huge allocation, and a failed load never modifies the model."""

from __future__ import annotations

import functools
import gzip
import io
import random
import struct
import zlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import flodl as fl
from flodl.checkpoint import training
from tests.checkpoint.layout import checksummed, entry, header
from tests.checkpoint.memory import address_space_headroom

TB = 1 << 40  # a length no test machine could allocate


def small_file(checksum: bool = True) -> bytes:
    buf = io.BytesIO()
    fl.save_checkpoint(
        buf,
        {"enc/weight": torch.arange(6.0).reshape(2, 3), "flag": torch.tensor([True, False])},
        {"count": torch.tensor(3)},
        checksum=checksum,
    )
    return buf.getvalue()


def load_error(data: bytes) -> fl.CheckpointError:
    with pytest.raises(fl.CheckpointError) as info:
        fl.read_checkpoint(io.BytesIO(data))
    return info.value


def test_empty_input():
    assert "empty file" in str(load_error(b""))


def test_bad_magic_is_named_with_its_offset():
    err = load_error(b"JUNK" + bytes(40))
    assert "bad magic" in str(err) and err.offset == 0
    with pytest.raises(fl.CheckpointError, match="bad magic"):
        fl.checkpoint_version(io.BytesIO(b"JUNK" + bytes(40)))
    with pytest.raises(fl.CheckpointError, match="bad magic"):
        fl.checkpoint_keys(io.BytesIO(b"JUNK" + bytes(40)))


@pytest.mark.parametrize("version", [0, 3, 99])
def test_unsupported_versions(version):
    err = load_error(header(0, version=version))
    assert f"unsupported checkpoint version {version}" in str(err) and err.offset == 4


def test_header_claiming_entries_with_no_data():
    assert "declares 5 entries" in str(load_error(header(5)))


@pytest.mark.parametrize("cut", range(0, 200, 3))
def test_every_truncation_is_an_error(cut):
    data = small_file()
    assert cut < len(data)
    load_error(data[:cut])


def test_truncated_file_message_has_offset_and_advice():
    data = small_file(checksum=False)
    err = load_error(data[:60])
    assert err.offset is not None and "truncated" in str(err)


def test_unknown_dtype_tag():
    err = load_error(header(1) + entry("w", (1,), 255, b"\0"))
    assert "unknown dtype tag: 255" in str(err)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (struct.pack("<I", 0xFFFFFFFF), "name length 4294967295 exceeds"),
        (struct.pack("<I", 1000) + b"abc", "declares 1000 bytes but only 23 remain"),
        (
            entry("w", (), 3, b"")[:5] + struct.pack("<I", 0xFFFFFFFF),
            "dimensions exceeds the limit",
        ),
        (entry("w", (2, 2), 3, b""), "payload is 0 bytes but shape [2, 2] of float32 needs 16"),
        (entry("w", (TB, TB), 3, b""), "overflows int64"),
        (
            entry("w", (TB,), 3, b"", declared=4 * TB),
            "needs 4398046511104 bytes but only 20 remain",
        ),
        (entry("w", (-1,), 3, b""), "negative dimension"),
        (entry(b"\xff\xfe", (), 3, b"1234"), "not valid UTF-8"),
    ],
)
def test_hostile_lengths_fail_before_allocating(body, message):
    padding = bytes(20)  # enough bytes that the entry-count bound alone does not catch it
    assert message in str(load_error(header(1) + body + padding))


INT64_MAX = (1 << 63) - 1
SHAPE_OFFSET = 44 + 4 + 1 + 4  # header, name length, name "w", rank: where the dims start


@pytest.mark.parametrize(
    "dims", [(INT64_MAX, INT64_MAX, 0), (1 << 62, 4, 0), (0, 1 << 32, 1 << 31)], ids=str
)
@pytest.mark.parametrize("layout", ["plain", "checksummed", "gzip"])
def test_empty_shapes_whose_element_count_overflows_int64(dims, layout):
    """Regression: torch raised a raw RuntimeError ("numel: integer multiplication overflow")."""
    body = entry("w", dims, 3, b"")
    data = checksummed([body]) if layout == "checksummed" else header(1) + body
    if layout == "gzip":
        data = gzip.compress(data)
    err = load_error(data)
    assert "overflows int64" in str(err) and err.offset == SHAPE_OFFSET
    w = torch.ones(2)
    with pytest.raises(fl.CheckpointError, match="overflows int64") as info:
        fl.load_checkpoint(io.BytesIO(data), {"w": w})
    assert info.value.offset == SHAPE_OFFSET and w.tolist() == [1.0, 1.0]


def test_shape_needing_more_bytes_than_remain_is_refused_at_the_shape():
    data = checksummed([entry("w", (1 << 40,), 3, b"", declared=4 << 40)])
    err = load_error(data)
    assert "needs 4398046511104 bytes but only" in str(err) and err.offset == SHAPE_OFFSET


def test_empty_tensor_with_large_dimensions_is_still_valid():
    """It holds no bytes, so only the int64 bound applies to its non-zero dimensions."""
    data = checksummed([entry("w", (1 << 40, 0, 3), 3, b"")])
    assert fl.read_checkpoint(io.BytesIO(data))["w"].shape == (1 << 40, 0, 3)


def test_hostile_length_in_a_gzip_stream_does_not_allocate_it():
    # Size is unknown for gzip, so the payload is read in bounded chunks and the short data is found.
    data = gzip.compress(header(1) + entry("w", (TB // 4,), 3, b"\0" * 64, declared=TB))
    assert "truncated" in str(load_error(data))


def test_duplicate_entry_names_are_refused():
    data = header(2) + entry("w", (1,), 3, b"\0" * 4) + entry("w", (1,), 3, b"\0" * 4)
    assert "duplicate entry name 'w'" in str(load_error(data))


def test_bool_payload_must_be_zero_or_one():
    assert "bool tensor" in str(load_error(header(1) + entry("b", (2,), 7, b"\x01\x02")))


def test_data_after_the_last_entry_is_refused():
    err = load_error(small_file(checksum=False) + b"garbage!")
    assert "unexpected data after the last of 3 entries" in str(err)
    assert "unexpected data after the integrity trailer" in str(load_error(small_file() + b"x"))


def test_every_single_bit_flip_is_detected_in_a_checksummed_file():
    data = small_file()
    for i in range(len(data)):
        for bit in (0, 7):
            flipped = bytearray(data)
            flipped[i] ^= 1 << bit
            load_error(bytes(flipped))


def test_payload_corruption_names_the_entry():
    data = bytearray(small_file())
    offset = data.index(struct.pack("<6f", *range(6)))
    data[offset + 5] ^= 0x10
    err = load_error(bytes(data))
    assert "checksum mismatch in entry 'enc/weight'" in str(err) and err.offset == 44


def test_corrupt_gzip():
    data = bytearray(gzip.compress(small_file()))
    data[len(data) // 2] ^= 0xFF
    load_error(bytes(data))  # found by the gzip layer or by the parser, whichever sees it first
    assert "corrupt gzip" in str(load_error(gzip.compress(small_file())[:-9]))
    assert "corrupt gzip" in str(load_error(b"\x1f\x8b" + bytes(30)))


def test_a_failed_load_leaves_the_model_untouched(tiny):
    good = io.BytesIO()
    fl.save_checkpoint(good, [(n, torch.full_like(p, 7.0)) for n, p in tiny.named_parameters()])
    data = bytearray(good.getvalue())
    trailer = 36 + 8 * len(list(tiny.parameters()))
    data[-trailer - 2] ^= 1  # corrupt the last entry's payload: every earlier entry is valid
    before = {n: p.clone() for n, p in tiny.named_parameters()}
    with pytest.raises(fl.CheckpointError, match="checksum mismatch"):
        fl.load_checkpoint(io.BytesIO(bytes(data)), tiny.named_parameters())
    assert all(torch.equal(p, before[n]) for n, p in tiny.named_parameters())


# -------------------------------------------------------------------------------- fuzzing
#
# Every outcome must be a correct load or a CheckpointError; a file with checksums that loads
# must load exactly what was saved; a failed load changes nothing; and no example may allocate
# more than FUZZ_HEADROOM (an address-space limit around each call turns such an allocation into
# a failure instead of a silent success).

FUZZ_HEADROOM = 128 << 20
SEED = small_file()
SEED_PLAIN = small_file(checksum=False)
ORIGINAL = fl.read_checkpoint(io.BytesIO(SEED))


def bits(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def is_original(loaded: dict[str, torch.Tensor]) -> bool:
    return list(loaded) == list(ORIGINAL) and all(
        loaded[k].dtype == v.dtype and loaded[k].shape == v.shape and bits(loaded[k]) == bits(v)
        for k, v in ORIGINAL.items()
    )


def outcome(data: bytes, *, checksummed: bool = False) -> None:
    """The only acceptable outcomes: a successful load (the original one, for a checksummed
    seed) or CheckpointError."""
    try:
        with address_space_headroom(FUZZ_HEADROOM):
            loaded = fl.read_checkpoint(io.BytesIO(data))
    except fl.CheckpointError:
        return
    assert not checksummed or is_original(loaded), "a corrupted checksummed file loaded"


def mutate(seed: bytes, edits, cut, insert) -> bytes:
    data = bytearray(seed)
    for pos, value in edits:
        if pos < len(data):
            data[pos] = value
    if cut is not None:
        data = data[:cut] + insert + data[cut:]
    return bytes(data)


MUTATIONS = {
    "seed": st.sampled_from([SEED, SEED_PLAIN]),
    "edits": st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 255)), max_size=6),
    "cut": st.one_of(st.none(), st.integers(0, len(SEED))),
    "insert": st.binary(max_size=12),
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**MUTATIONS)
def test_fuzz_mutated_files(seed, edits, cut, insert):
    data = mutate(seed, edits, cut, insert)
    outcome(data, checksummed=seed is SEED)
    outcome(gzip.compress(data), checksummed=seed is SEED)


def model_targets() -> dict[str, torch.Tensor]:
    return {
        "enc/weight": torch.full((2, 3), -1.0, dtype=torch.float64),  # loaded with a cast
        "flag": torch.tensor([False, True]),
        "count": torch.tensor(-5),
        "absent": torch.ones(4),
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**MUTATIONS, compressed=st.booleans())
def test_fuzz_loading_into_a_model(seed, edits, cut, insert, compressed):
    """load_checkpoint: a CheckpointError leaves every target as it was; a checksummed file
    that loads fills them with the original values."""
    data = mutate(seed, edits, cut, insert)
    data = gzip.compress(data) if compressed else data
    targets = model_targets()
    try:
        with address_space_headroom(FUZZ_HEADROOM):
            fl.load_checkpoint(io.BytesIO(data), targets)
    except fl.CheckpointError:
        assert all(bits(t) == bits(model_targets()[n]) for n, t in targets.items())
        return
    if seed is SEED:
        assert torch.equal(targets["enc/weight"], ORIGINAL["enc/weight"].double())
        assert torch.equal(targets["flag"], ORIGINAL["flag"])
        assert int(targets["count"]) == int(ORIGINAL["count"])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_arbitrary_bytes_after_a_valid_header(tail):
    outcome(header(3) + tail)
    outcome(header(1, version=1) + tail)


INT64_MAX = (1 << 63) - 1
DIMS = st.one_of(st.integers(0, 4), st.sampled_from([1 << 31, 1 << 32, 1 << 62, INT64_MAX]))


def bomb(elements: int) -> bytes:
    """A gzip stream whose one float32 entry ``enc/weight`` is ``elements`` zeros (streamed)."""
    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    parts = [
        z.compress(header(1) + entry("enc/weight", (elements,), 3, b"", declared=4 * elements))
    ]
    zeros = bytes(1 << 20)
    for start in range(0, 4 * elements, len(zeros)):
        parts.append(z.compress(zeros[: min(len(zeros), 4 * elements - start)]))
    return b"".join(parts) + z.flush()


BOMB_ELEMENTS = 3 * FUZZ_HEADROOM // 8  # 1.5 x the headroom once decompressed


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dims=st.lists(DIMS, max_size=4),
    tag=st.sampled_from([1, 3, 4, 7, 255]),
    declared=st.one_of(st.none(), st.integers(0, (1 << 64) - 1)),
    layout=st.sampled_from(["plain", "checksummed", "gzip"]),  # "bomb": only the example
)
# Regression (bug: raw RuntimeError "numel: integer multiplication overflow").
@example(dims=[INT64_MAX, INT64_MAX, 0], tag=3, declared=None, layout="checksummed")
@example(dims=[1 << 62, 4, 0], tag=3, declared=None, layout="plain")
# Regression (bug: a gzip bomb the model cannot use was allocated in full).
@example(dims=[], tag=3, declared=None, layout="bomb")
def test_fuzz_hostile_entry_headers(dims, tag, declared, layout):
    """One entry with an arbitrary shape, dtype tag and byte count, through both readers."""
    if layout == "bomb":
        data = bomb_file()
    else:
        payload = b"\x01" * min(declared or 0, 64)  # non-zero: a load would show
        body = entry("enc/weight", tuple(dims), tag, payload, declared)
        data = checksummed([body]) if layout == "checksummed" else header(1) + body
        data = gzip.compress(data) if layout == "gzip" else data
    if layout != "bomb":
        outcome(data)
    target = torch.zeros(2)
    try:
        with address_space_headroom(FUZZ_HEADROOM):
            fl.load_checkpoint(io.BytesIO(data), {"enc/weight": target}, strict_shapes=False)
    except fl.CheckpointError:
        assert target.tolist() == [0.0, 0.0]


@functools.cache
def bomb_file() -> bytes:
    """Built once, and only if an example needs it."""
    return bomb(BOMB_ELEMENTS)


def _state_files() -> list[bytes]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3)
    real_rng_state = training._rng_state

    def short_numpy_keys():
        state = real_rng_state()
        name, keys, pos, has_gauss, gauss = state["numpy"]
        return {**state, "numpy": (name, keys[:10], pos, has_gauss, gauss)}

    def save(saver, rng_state=real_rng_state) -> bytes:
        buf = io.BytesIO()
        training._rng_state = rng_state
        try:
            saver(buf)
        finally:
            training._rng_state = real_rng_state
        return buf.getvalue()

    def state(b):
        fl.save_training_state(b, model, opt, sched, epoch=1, checksum=False)

    return [
        save(lambda b: fl.save_optimizer_state(opt, b, checksum=False)),
        save(state),
        # Regressions (bug: a bad RNG state failed after the model and optimizer were written).
        save(state, lambda: {**real_rng_state(), "torch": torch.zeros(100, dtype=torch.uint8)}),
        save(state, short_numpy_keys),
    ]


STATE_FILES = _state_files()


def global_rngs():
    return (bits(torch.get_rng_state()), random.getstate(), repr(np.random.get_state()))


@pytest.fixture(scope="module")
def keep_global_rngs():
    """The training-state fuzz restores RNG states from files: put the session's back after."""
    saved = torch.get_rng_state(), random.getstate(), np.random.get_state()
    yield
    torch.set_rng_state(saved[0])
    random.setstate(saved[1])
    np.random.set_state(saved[2])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.sampled_from(range(len(STATE_FILES))),
    edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=4),
)
@example(which=2, edits=[])
@example(which=3, edits=[])
@example(which=0, edits=[(0.302734375, 32)])  # found by this test: Adam's "step" key renamed
def test_fuzz_optimizer_and_training_state_files(keep_global_rngs, which, edits):
    """Unchecksummed state files with mutated JSON or tensors, RNG restore on: a clean load, or
    CheckpointError with the model, optimizer, scheduler and RNGs untouched."""
    data = bytearray(STATE_FILES[which])
    for where, value in edits:
        data[int(where * (len(data) - 1))] = value
    torch.manual_seed(1)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.5)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3)
    before = (
        [bits(p) for p in model.parameters()],
        repr(opt.state_dict()),
        repr(sched.state_dict()),
        global_rngs(),
    )
    try:
        with address_space_headroom(FUZZ_HEADROOM):
            if which == 0:
                fl.load_optimizer_state(opt, io.BytesIO(bytes(data)))
            else:
                fl.load_training_state(io.BytesIO(bytes(data)), model, opt, sched)
    except fl.CheckpointError:
        after = (
            [bits(p) for p in model.parameters()],
            repr(opt.state_dict()),
            repr(sched.state_dict()),
            global_rngs(),
        )
        assert after == before
        return
    assert which in (0, 1) or edits, "a malformed RNG state was accepted"
