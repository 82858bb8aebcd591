from __future__ import annotations

import pytest
import torch

import flodl as fl


def make_batch() -> fl.data.Batch:
    return fl.data.Batch([torch.zeros(4, 3), torch.arange(4)], names=["image", "label"])


def test_access_by_position_and_name_unpack_and_size():
    b = make_batch()
    assert b["label"] is b[1] and b["image"] is b[0]
    image, label = b
    assert image.shape == (4, 3) and label.tolist() == [0, 1, 2, 3]
    assert len(b) == 2 and b.size == 4 and b.names == ("image", "label")
    assert "label" in b and "mask" not in b
    assert b.get("mask") is None and b.get("label") is b[1]
    assert list(b.to_dict()) == ["image", "label"]


def test_unknown_name_is_a_clear_error_listing_the_fields():
    with pytest.raises(fl.data.UnknownFieldError) as info:
        make_batch()["labels"]
    assert "unknown field 'labels'" in str(info.value)
    assert "['image', 'label']" in str(info.value)
    assert isinstance(info.value, KeyError) and isinstance(info.value, fl.FlodlError)


def test_positional_names_by_default_and_mismatched_names_rejected():
    b = fl.data.Batch([torch.ones(2), torch.zeros(2)])
    assert b.names == ("0", "1") and b["1"].sum() == 0
    with pytest.raises(fl.data.DatasetShapeError, match="2 tensors but 1 names"):
        fl.data.Batch([torch.ones(2), torch.zeros(2)], names=["x"])


def test_to_converts_every_tensor_and_keeps_names():
    b = make_batch().to(torch.float64)
    assert b["label"].dtype == torch.float64 and b.names == ("image", "label")
    assert "image=(4, 3):float64" in repr(b)
