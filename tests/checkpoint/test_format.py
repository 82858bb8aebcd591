"""The .fdl byte format: round trips, the original's v1/v2 layout, gzip, file objects."""

from __future__ import annotations

import gzip
import io
import struct

import pytest
import torch

import flodl as fl
from tests.checkpoint.layout import FIXTURES, fixture_entries, hash_of, original_bytes

DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
]
SHAPES = [(), (0,), (3, 0, 2), (5,), (2, 3, 4)]


def sample(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    g = torch.Generator().manual_seed(hash((str(dtype), shape)) & 0xFFFF)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        t = (torch.randn(shape, generator=g) * 100).to(dtype)
        if t.numel() > 2:  # special values must survive bit-exactly
            t.view(-1)[:3] = torch.tensor([float("nan"), float("inf"), -0.0]).to(dtype)
        return t
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(dtype)


def bits(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def roundtrip(named, **kwargs) -> dict[str, torch.Tensor]:
    buf = io.BytesIO()
    fl.save_checkpoint(buf, named, **kwargs)
    buf.seek(0)
    return fl.read_checkpoint(buf)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_and_shape_round_trips_bit_exactly(dtype):
    named = {f"t{i}": sample(dtype, shape) for i, shape in enumerate(SHAPES)}
    back = roundtrip(named)
    assert list(back) == list(named)
    for name, original in named.items():
        assert back[name].dtype == dtype
        assert back[name].shape == original.shape
        assert bits(back[name]) == bits(original)


def test_non_contiguous_and_grad_tensors_are_saved_by_value():
    base = torch.arange(12.0).reshape(3, 4)
    p = torch.nn.Parameter(torch.ones(2))
    back = roundtrip([("t", base.t()), ("s", base[:, 1]), ("p", p)])
    assert torch.equal(back["t"], base.t())
    assert torch.equal(back["s"], base[:, 1])
    assert back["p"].requires_grad is False and torch.equal(back["p"], torch.ones(2))


def test_unsupported_dtype_is_refused_before_writing(tmp_path):
    target = tmp_path / "m.fdl"
    with pytest.raises(fl.CheckpointError, match=r"complex64 is not supported.*cast it first"):
        fl.save_checkpoint(target, {"z": torch.zeros(2, dtype=torch.complex64)})
    assert list(tmp_path.iterdir()) == []


def test_duplicate_names_across_params_and_buffers_are_refused():
    with pytest.raises(fl.CheckpointError, match="duplicate name 'x'"):
        fl.save_checkpoint(io.BytesIO(), {"x": torch.zeros(1)}, {"x": torch.ones(1)})


def test_checksum_false_writes_exactly_the_originals_v2_bytes():
    entries = fixture_entries()
    digest = hash_of("model")
    buf = io.BytesIO()
    fl.save_checkpoint(buf, entries[:3], entries[3:], digest, checksum=False)
    assert buf.getvalue() == original_bytes(entries, version=2, digest=bytes.fromhex(digest))


def test_default_output_is_the_original_layout_plus_a_trailer():
    entries = fixture_entries()
    buf = io.BytesIO()
    fl.save_checkpoint(buf, entries)
    plain = original_bytes(entries)
    data = buf.getvalue()
    assert data.startswith(plain)  # an original reader stops after the last entry
    trailer = data[len(plain) :]
    assert trailer[:4] == b"FDLS"
    assert len(trailer) == 36 + 8 * len(entries)
    assert struct.unpack("<Q", trailer[-16:-8])[0] == len(plain)


@pytest.mark.parametrize("name", ["original_v1.fdl", "original_v2.fdl", "original_v2.fdl.gz"])
def test_reads_the_originals_files(name):
    path = FIXTURES / name
    expected = dict(fixture_entries())
    back = fl.read_checkpoint(path)
    assert list(back) == list(expected)
    for key, value in expected.items():
        assert back[key].dtype == value.dtype and bits(back[key]) == bits(value)
    assert fl.checkpoint_version(path) == (1 if "v1" in name else 2)
    info = fl.checkpoint_info(path)
    assert info.verified is False  # the original writes no checksums
    assert info.structural_hash == (None if "v1" in name else hash_of("fixture"))


def test_fixture_files_match_the_documented_layout():
    assert (FIXTURES / "original_v1.fdl").read_bytes() == original_bytes(
        fixture_entries(), version=1
    )
    v2 = original_bytes(fixture_entries(), digest=bytes.fromhex(hash_of("fixture")))
    assert (FIXTURES / "original_v2.fdl").read_bytes() == v2
    assert gzip.decompress((FIXTURES / "original_v2.fdl.gz").read_bytes()) == v2


def test_gz_suffix_compresses_and_loads(tmp_path):
    named = {"w": torch.zeros(256, 256), "b": torch.ones(7)}
    fl.save_checkpoint(tmp_path / "m.fdl", named)
    fl.save_checkpoint(tmp_path / "m.fdl.gz", named)
    raw = (tmp_path / "m.fdl.gz").read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    assert len(raw) < (tmp_path / "m.fdl").stat().st_size // 10
    assert gzip.decompress(raw) == (tmp_path / "m.fdl").read_bytes()
    back = fl.read_checkpoint(tmp_path / "m.fdl.gz")
    assert all(torch.equal(back[k], v) for k, v in named.items())
    assert fl.checkpoint_version(tmp_path / "m.fdl.gz") == 2


def test_gzip_is_detected_by_content_for_file_objects_and_odd_names(tmp_path):
    buf = io.BytesIO()
    fl.save_checkpoint(buf, {"w": torch.ones(3)}, compress=True)
    assert buf.getvalue()[:2] == b"\x1f\x8b"
    buf.seek(0)
    assert torch.equal(fl.read_checkpoint(buf)["w"], torch.ones(3))
    odd = tmp_path / "compressed.bin"
    odd.write_bytes(buf.getvalue())
    assert fl.checkpoint_keys(odd) == ["w"]


class Pipe(io.RawIOBase):
    """A read-only, non-seekable stream that returns data in small pieces, like a socket."""

    def __init__(self, data: bytes, piece: int = 7):
        self._data, self._piece = data, piece

    def readable(self):
        return True

    def readinto(self, b):
        n = min(len(b), self._piece, len(self._data))
        b[:n], self._data = self._data[:n], self._data[n:]
        return n


@pytest.mark.parametrize("compress", [False, True])
def test_non_seekable_streams_are_read_correctly(compress):
    named = {"w": torch.randn(40, 3), "n": torch.tensor(3)}
    buf = io.BytesIO()
    fl.save_checkpoint(buf, named, compress=compress)
    back = fl.read_checkpoint(Pipe(buf.getvalue()))
    assert all(torch.equal(back[k], v) for k, v in named.items())


def test_real_binary_file_objects(tmp_path):
    path = tmp_path / "f.fdl"
    with open(path, "wb") as f:
        f.write(b"prefix")  # the checkpoint need not start at offset 0 of the file object
        fl.save_checkpoint(f, {"w": torch.ones(2)})
    with open(path, "rb") as f:
        assert f.read(6) == b"prefix"
        assert torch.equal(fl.read_checkpoint(f)["w"], torch.ones(2))


def test_paths_and_objects_of_the_wrong_kind_are_explained():
    with pytest.raises(fl.CheckpointError, match="pass a path or a binary file object"):
        fl.save_checkpoint(12, {"w": torch.ones(1)})  # type: ignore[arg-type]
    with pytest.raises(fl.CheckpointError, match="cannot open checkpoint"):
        fl.read_checkpoint("/nonexistent/dir/m.fdl")


def test_keys_list_parameters_then_buffers_in_order(tiny):
    buf = io.BytesIO()
    fl.save_checkpoint(buf, tiny.named_parameters(), tiny.named_buffers())
    buf.seek(0)
    names = [n for n, _ in tiny.named_parameters()] + [n for n, _ in tiny.named_buffers()]
    assert fl.checkpoint_keys(buf) == names


def test_checkpoint_info_describes_entries():
    buf = io.BytesIO()
    fl.save_checkpoint(buf, {"w": torch.zeros(2, 3, dtype=torch.float16)}, None, hash_of("x"))
    buf.seek(0)
    info = fl.checkpoint_info(buf)
    assert info.version == 2 and info.verified and info.structural_hash == hash_of("x")
    (e,) = info.entries
    assert (e.name, e.shape, e.dtype, e.offset, e.nbytes) == ("w", (2, 3), torch.float16, 44, 12)


def test_structural_hash_must_be_64_hex_chars():
    with pytest.raises(fl.CheckpointError, match="expected 64 hex chars, got 3"):
        fl.save_checkpoint(io.BytesIO(), {"w": torch.ones(1)}, None, "abc")
    with pytest.raises(fl.CheckpointError, match="invalid hex"):
        fl.save_checkpoint(io.BytesIO(), {"w": torch.ones(1)}, None, "zz" * 32)
