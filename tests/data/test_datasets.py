"""MNIST, CIFAR-10 and character-corpus readers on small files written in the real formats."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import pytest
import torch

import flodl as fl


def write_idx(path: Path, array: torch.Tensor, *, gz: bool) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.dim()) + struct.pack(
        f">{array.dim()}I", *array.shape
    )
    data = header + array.to(torch.uint8).numpy().tobytes()
    if gz:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)


def make_mnist(root: Path, n: int = 12, *, gz: bool = True, prefix: str = "train") -> torch.Tensor:
    root.mkdir(parents=True, exist_ok=True)
    images = torch.randint(0, 256, (n, 28, 28), generator=torch.Generator().manual_seed(n))
    write_idx(root / f"{prefix}-images-idx3-ubyte", images, gz=gz)
    write_idx(root / f"{prefix}-labels-idx1-ubyte", torch.arange(n) % 10, gz=gz)
    return images


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_reads_idx_files(tmp_path, gz):
    images = make_mnist(tmp_path, gz=gz)
    ds = fl.data.MNIST(tmp_path)
    assert len(ds) == 12 and ds.names == ("image", "label")
    image, label = ds.tensors
    assert image.shape == (12, 1, 28, 28) and image.dtype == torch.float32
    assert torch.allclose(image[3, 0] * 255, images[3].float())
    assert label.tolist() == [i % 10 for i in range(12)] and label.dtype == torch.int64
    batch = next(iter(fl.data.DataLoader.from_dataset(ds).batch_size(4).build().epoch(0)))
    assert batch["image"].shape == (4, 1, 28, 28)


def test_mnist_test_split_and_missing_files(tmp_path):
    make_mnist(tmp_path, n=5, prefix="t10k")
    assert len(fl.data.MNIST(tmp_path, train=False)) == 5
    with pytest.raises(fl.data.DatasetFormatError, match="train-images-idx3-ubyte"):
        fl.data.MNIST(tmp_path, train=True)


def test_mnist_rejects_truncated_corrupt_and_mismatched_files(tmp_path):
    make_mnist(tmp_path, gz=False)
    images = tmp_path / "train-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:-10])
    with pytest.raises(fl.data.DatasetFormatError, match="truncated or corrupt"):
        fl.data.MNIST(tmp_path)
    images.write_bytes(b"\x12\x34\x08\x03" + b"\0" * 12)
    with pytest.raises(fl.data.DatasetFormatError, match="magic"):
        fl.data.MNIST(tmp_path)
    make_mnist(tmp_path, n=12, gz=False)
    write_idx(tmp_path / "train-labels-idx1-ubyte", torch.arange(11), gz=False)
    with pytest.raises(fl.data.DatasetFormatError, match="12 images but 11 labels"):
        fl.data.MNIST(tmp_path)
    (tmp_path / "train-images-idx3-ubyte").unlink()
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"x" * 100)[:20])
    with pytest.raises(fl.data.DatasetFormatError, match="gzip"):
        fl.data.MNIST(tmp_path)


def write_cifar(path: Path, labels: list[int]) -> torch.Tensor:
    pixels = torch.randint(0, 256, (len(labels), 3072), generator=torch.Generator().manual_seed(1))
    records = torch.cat([torch.tensor(labels).unsqueeze(1), pixels], dim=1).to(torch.uint8)
    path.write_bytes(records.numpy().tobytes())
    return pixels


def test_cifar10_reads_binary_batches(tmp_path):
    root = tmp_path / "cifar-10-batches-bin"
    root.mkdir()
    for i in range(1, 6):
        write_cifar(root / f"data_batch_{i}.bin", [i, i + 1])
    pixels = write_cifar(root / "test_batch.bin", [3, 9, 0])
    train, test = fl.data.Cifar10(tmp_path), fl.data.Cifar10(root, train=False)
    assert len(train) == 10 and train.tensors[1].tolist()[:4] == [1, 2, 2, 3]
    image, label = test.tensors
    assert image.shape == (3, 3, 32, 32) and label.tolist() == [3, 9, 0]
    assert torch.allclose(image[1, 2] * 255, pixels[1, 2048:].reshape(32, 32).float())


def test_cifar10_rejects_truncated_files_and_bad_labels(tmp_path):
    write_cifar(tmp_path / "test_batch.bin", [1, 2])
    data = (tmp_path / "test_batch.bin").read_bytes()
    (tmp_path / "test_batch.bin").write_bytes(data[:-1])
    with pytest.raises(fl.data.DatasetFormatError, match="whole number of 3073-byte records"):
        fl.data.Cifar10(tmp_path, train=False)
    write_cifar(tmp_path / "test_batch.bin", [1, 12])
    with pytest.raises(fl.data.DatasetFormatError, match="label 12"):
        fl.data.Cifar10(tmp_path, train=False)


def test_char_corpus_windows_vocab_and_split(tmp_path):
    text = "To be, or not to be: that is the question.\n" * 3
    path = tmp_path / "shakespeare.txt"
    path.write_text(text, encoding="utf-8")
    ds = fl.data.CharCorpus(path, seq_len=8)
    assert len(ds) == (len(text) - 1) // 8 and ds.vocab == "".join(sorted(set(text)))
    x, y = ds[2]["input"], ds[2]["target"]
    assert ds.decode(x) == text[16:24] and ds.decode(y) == text[17:25]
    train, test = ds.split(0.9)
    assert len(train) + len(test) == len(ds) and train[0]["input"].equal(ds[0]["input"])
    batch = next(iter(fl.data.DataLoader.from_dataset(train).batch_size(3).build().epoch(0)))
    assert batch["input"].shape == (3, 8) and batch["target"].dtype == torch.int64


def test_char_corpus_bad_input(tmp_path):
    with pytest.raises(fl.data.DatasetFormatError, match="too few"):
        fl.data.CharCorpus.from_text("abc", seq_len=8)
    with pytest.raises(fl.data.DatasetFormatError, match="seq_len"):
        fl.data.CharCorpus.from_text("abcdef", seq_len=0)
    with pytest.raises(fl.data.DatasetFormatError, match="outside the vocabulary"):
        fl.data.CharCorpus.from_text("abcdef", seq_len=2, vocab="abc")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(fl.data.DatasetFormatError, match="UTF-8"):
        fl.data.CharCorpus(tmp_path / "bin.txt", seq_len=2)
    with pytest.raises(fl.data.DatasetFormatError, match="does not exist"):
        fl.data.CharCorpus(tmp_path / "missing.txt", seq_len=2)
