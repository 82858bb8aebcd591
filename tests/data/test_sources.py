"""Every supported kind of dataset loads the same samples; unsupported or inconsistent ones fail clearly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset

import flodl as fl
from flodl.data.sources import ConcatSource, as_source

from .conftest import CountingBatches, MapDataset


def first_batch(dataset, **kw) -> fl.data.Batch:
    builder = fl.data.DataLoader.from_dataset(dataset, **kw).batch_size(4).shuffle(False)
    return next(iter(builder.build().epoch(0)))


def test_plain_tensor_tuple_dict_and_torch_tensordataset():
    x, y = torch.arange(12.0).reshape(6, 2), torch.arange(6)
    assert first_batch(x)[0].equal(x[:4])
    assert first_batch((x, y))[1].tolist() == [0, 1, 2, 3]
    assert first_batch({"x": x, "y": y})["y"].tolist() == [0, 1, 2, 3]
    assert first_batch(TensorDataset(x, y), names=["x", "y"])["x"].equal(x[:4])


def test_map_style_dicts_get_their_names_and_numbers_become_tensors():
    b = first_batch(MapDataset())
    assert b.names == ("x", "label")
    assert b["label"].tolist() == [0, 1, 2, 3] and b["label"].dtype == torch.int64
    assert b["x"].shape == (4, 3)


class TupleTorchDataset(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return np.full((2, 2), i, dtype=np.float32), float(i) / 2


def test_torch_datasets_work_unchanged_including_numpy_samples_and_subset():
    b = first_batch(TupleTorchDataset())
    assert b[0].shape == (4, 2, 2) and b[0].dtype == torch.float32
    assert b[1].tolist() == [0.0, 0.5, 1.0, 1.5]
    sub = first_batch(Subset(TupleTorchDataset(), [9, 8, 7, 6, 5]))  # uses __getitems__
    assert b.names == ("0", "1") and sub[1].tolist() == [4.5, 4.0, 3.5, 3.0]


def test_a_subset_of_tensors_is_gathered_like_tensors_and_may_stay_resident():
    x = torch.arange(20.0).reshape(10, 2)
    train, _ = torch.utils.data.random_split(TensorDataset(x), [6, 4])
    loader = fl.data.DataLoader.from_dataset(train).batch_size(3).shuffle(False).build()
    assert loader.mode == "resident"  # random_split's parts used to stream as Python code
    rows = [int(v) // 2 for b in loader.epoch(0) for v in b[0][:, 0].tolist()]
    assert rows == list(train.indices)
    streamed = fl.data.DataLoader.from_dataset(train).batch_size(3).shuffle(False)
    assert [b[0].tolist() for b in streamed.mode("streaming").build().epoch(0)] == [
        x[list(train.indices[:3])].tolist(),
        x[list(train.indices[3:])].tolist(),
    ]
    nested = Subset(Subset(TensorDataset(x), [9, 8, 7, 6, -1]), [4, 0])
    loader = fl.data.DataLoader.from_dataset(nested).batch_size(2).shuffle(False).build()
    assert next(iter(loader.epoch(0)))[0].tolist() == [[18.0, 19.0], [18.0, 19.0]]
    with pytest.raises(fl.data.DatasetShapeError, match=r"indices \[10\] outside the 10 samples"):
        fl.data.DataLoader.from_dataset(Subset(TensorDataset(x), [0, 10])).batch_size(1).build()


def test_a_concat_dataset_of_tensors_is_gathered_like_tensors():
    # It was read sample by sample through ConcatDataset.__getitem__, as Python code.
    a = TensorDataset(torch.arange(10.0).reshape(5, 2), torch.arange(5))
    b = TensorDataset(torch.arange(100.0, 106.0).reshape(3, 2), torch.arange(5, 8))
    both = ConcatDataset(
        [a, TensorDataset(torch.empty(0, 2), torch.empty(0, dtype=torch.int64)), b]
    )
    for mode in ("auto", "streaming"):
        builder = fl.data.DataLoader.from_dataset(both).batch_size(4).seed(1).mode(mode)
        loader = builder.build()
        assert loader.mode == ("resident" if mode == "auto" else "streaming")
        assert "Python code" not in loader.mode_reason
        batches = list(loader.epoch(0))
        order = torch.cat([batch[1] for batch in batches]).tolist()
        assert sorted(order) == list(range(8)) and order != list(range(8))  # shuffled, all once
        for batch in batches:  # each row as ConcatDataset itself gives it
            for x, label in zip(batch[0], batch[1].tolist(), strict=True):
                assert x.equal(both[label][0])
        batches[0][0].add_(1000)  # a batch is memory of its own
    assert a.tensors[0].max() < 1000 and b.tensors[0].max() < 1000
    train, _ = torch.utils.data.random_split(both, [6, 2])  # its Subset too
    rows = torch.cat([b[1] for b in fl.data.DataLoader.from_dataset(train).batch_size(3)
                      .shuffle(False).mode("streaming").build().epoch(0)])  # fmt: skip
    assert rows.tolist() == list(train.indices)
    # A part made by Python code keeps the whole ConcatDataset on its __getitem__.
    mixed = fl.data.DataLoader.from_dataset(ConcatDataset([a, TupleTorchDataset()]))
    with pytest.raises(fl.data.DatasetShapeError):  # a's (2,) rows vs (2, 2) arrays: as torch
        list(mixed.batch_size(6).shuffle(False).build().epoch(0))
    assert "ConcatDataset.__getitem__" in as_source(ConcatDataset([a, MapDataset()])).code


def test_parts_of_a_concat_dataset_that_differ_are_read_sample_by_sample_as_torch_does():
    a = TensorDataset(torch.zeros(4, 2), torch.zeros(4, dtype=torch.int64))
    other = TensorDataset(torch.zeros(3, 2), torch.zeros(3, dtype=torch.int32))
    with pytest.raises(fl.data.DatasetShapeError, match=r"part 1 of the parts.*torch\.int32"):
        ConcatSource([as_source(a), as_source(other)], "the parts")  # type: ignore[list-item]
    # int32 labels in one part, int64 in the other: stacked to int64, as torch's collate does
    mixed = ConcatDataset([a, TensorDataset(torch.ones(3, 2), torch.ones(3, dtype=torch.int32))])
    assert "ConcatDataset.__getitem__" in as_source(mixed).code
    loader = fl.data.DataLoader.from_dataset(mixed).batch_size(7).shuffle(False).build()
    batch = next(iter(loader.epoch(0)))
    assert batch[1].dtype == torch.int64 and batch[1].tolist() == [0, 0, 0, 0, 1, 1, 1]


def test_a_batch_dataset_for_a_gpu_is_told_the_faster_options(caplog):
    caplog.set_level("INFO", logger="flodl.data")
    # built only: a Python dataset streams without probing the device
    for dataset in (CountingBatches(n=8), MapDataset()):
        fl.data.DataLoader.from_dataset(dataset).batch_size(4).device("cuda").build()
    said = [r.getMessage() for r in caplog.records if "background thread" in r.getMessage()]
    assert said == [
        "DataLoader: CountingBatches.get_batch runs in the training thread, one batch at a time;"
        " if it returns the same rows every epoch (no random transforms), .mode('resident')"
        " keeps the dataset on cuda, or .prefetch(n) fetches batches ahead in a background"
        " thread"
    ]  # once, and not for __getitem__ datasets (random transforms are their usual job)


def test_batch_dataset_receives_int64_index_tensors():
    ds = CountingBatches(n=10)
    b = first_batch(ds)
    assert b[1].tolist() == [0, 1, 2, 3] and b[0].shape == (4, 4)


def test_mismatched_tensor_lengths_name_each_field():
    with pytest.raises(fl.data.DatasetShapeError) as info:
        fl.data.DataLoader.from_tensors(x=torch.zeros(10, 2), y=torch.zeros(9)).batch_size(
            2
        ).build()
    assert "'x' has 10" in str(info.value) and "'y' has 9" in str(info.value)
    with pytest.raises(fl.data.DatasetShapeError, match="different lengths"):
        fl.data.DataLoader.from_dataset((torch.zeros(3), torch.zeros(4))).batch_size(1).build()


def test_zero_dim_tensor_and_non_tensor_fields_are_rejected():
    with pytest.raises(fl.data.DatasetShapeError, match="0-d tensor"):
        fl.data.DataLoader.from_tensors(torch.tensor(3.0)).batch_size(1).build()


class Ragged:
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.zeros(3 if i != 5 else 4), i


def test_map_style_sample_with_a_different_shape_names_the_index():
    loader = (
        fl.data.DataLoader.from_dataset(Ragged()).batch_size(8).shuffle(False).mode("streaming")
    )
    with pytest.raises(fl.data.DatasetShapeError, match=r"Ragged\[5\] field '0' has shape \(4,\)"):
        list(loader.build().epoch(0))


class ChangingStructure:
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return (torch.zeros(2), 1) if i < 2 else (torch.zeros(2),)


def test_map_style_sample_with_a_different_structure_is_an_error():
    loader = fl.data.DataLoader.from_dataset(ChangingStructure()).batch_size(4).shuffle(False)
    with pytest.raises(fl.data.DatasetShapeError, match="same structure"):
        list(loader.build().epoch(0))


class NestedTuple(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.full((3,), float(i)), (torch.tensor(i), torch.tensor(10 * i))


class NestedNumbers(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.full((3,), float(i)), (i, 10 * i)  # (x, (label, weight)) by position


class NestedDict(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return {"x": torch.zeros(2), "meta": {"id": i}}


def test_nested_samples_are_refused_not_merged_into_one_field():
    # torch collates (x, (label, weight)) to [x, [label, weight]]; a Batch is flat, so flodl
    # refuses it rather than stacking label and weight into one (B, 2) field
    loader = fl.data.DataLoader.from_dataset(NestedTuple()).batch_size(2).shuffle(False)
    with pytest.raises(fl.data.DatasetShapeError) as info:
        loader.build()  # build() reads sample 0
    message = str(info.value)
    assert message.startswith("DataLoader: NestedTuple[0][1] is a tuple nested in the sample")
    assert "(x, label, weight)" in message
    # plain numbers too: `x, (label, weight) = batch` would unpack the rows of one field
    numbers = fl.data.DataLoader.from_dataset(NestedNumbers()).batch_size(2).shuffle(False)
    with pytest.raises(fl.data.DatasetShapeError, match=r"NestedNumbers\[0\]\[1\] is a tuple"):
        numbers.build()
    with pytest.raises(fl.data.DatasetShapeError, match=r"NestedDict\[0\]\['meta'\] is a dict"):
        fl.data.DataLoader.from_dataset(NestedDict()).batch_size(2).build()
    nested_lists = fl.data.DataLoader.from_dataset(NestedLists()).batch_size(2)
    with pytest.raises(fl.data.DatasetShapeError, match=r"NestedLists\[0\]\['boxes'\] is a list"):
        nested_lists.build()


class NestedLists(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return {"x": torch.zeros(2), "boxes": [[0.0, 1.0], [2.0, 3.0]]}


class BoxSamples(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return {"x": torch.full((3,), float(i)), "bbox": [0.1 * i, 0.2, 0.3, 0.4]}


def test_a_flat_list_of_numbers_in_a_sample_is_one_field():
    loader = fl.data.DataLoader.from_dataset(BoxSamples()).batch_size(4).shuffle(False).build()
    batch = next(iter(loader.epoch(0)))
    assert batch["bbox"].shape == (4, 4)
    assert batch["bbox"][:, 0].tolist() == pytest.approx([0.0, 0.1, 0.2, 0.3])
    # the Trainer's workers read samples through the same adapter
    fields = as_source(BoxSamples()).fetch(torch.tensor([2, 3]))
    assert [tuple(t.shape) for t in fields] == [(2, 3), (2, 4)]


class KeysInAnyOrder(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        a, b = torch.tensor(i), torch.tensor(-i)
        return {"a": a, "b": b} if i % 2 == 0 else {"b": b, "a": a}


class BatchKeysInAnyOrder:
    def __len__(self):
        return 4

    def get_batch(self, indices):
        a, b = indices.clone(), -indices
        return {"a": a, "b": b} if indices[0] == 0 else {"b": b, "a": a}


@pytest.mark.parametrize("dataset", [KeysInAnyOrder(), BatchKeysInAnyOrder()])
def test_dict_samples_are_collated_by_key_whatever_their_order(dataset):
    dl = fl.data.DataLoader.from_dataset(dataset).batch_size(2).shuffle(False).build()
    batches = [b.to_dict() for b in dl.epoch(0)]
    assert [{k: v.tolist() for k, v in b.items()} for b in batches] == [
        {"a": [0, 1], "b": [0, -1]},
        {"a": [2, 3], "b": [-2, -3]},
    ]


class ShortGetItems(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.zeros(2)

    def __getitems__(self, keys):
        return [torch.zeros(2)] * min(len(keys), 3)  # drops samples past the third


def test_getitems_returning_too_few_samples_says_so():
    loader = fl.data.DataLoader.from_dataset(ShortGetItems()).batch_size(4).shuffle(False).build()
    with pytest.raises(fl.data.DatasetShapeError) as info:
        next(iter(loader.epoch(0)))
    assert str(info.value) == (
        "DataLoader: ShortGetItems.__getitems__ returned 3 samples for 4 indices [0, 1, 2, 3] —"
        " return one sample per index, in order"
    )


class ChangingFieldCount:
    def __len__(self):
        return 8

    def get_batch(self, indices):
        return (indices.float(), indices) if indices[0] < 4 else (indices.float(),)


def test_batch_dataset_changing_its_field_count_names_the_batch():
    loader = fl.data.DataLoader.from_dataset(ChangingFieldCount()).batch_size(2).shuffle(False)
    epoch = loader.build().epoch(0)
    assert [len(next(epoch)) for _ in range(2)] == [2, 2]
    with pytest.raises(fl.data.DatasetShapeError) as info:
        next(epoch)
    assert str(info.value).startswith(
        "DataLoader: ChangingFieldCount.get_batch returned fields 1 unnamed for the batch of"
        " indices [4, 5] but the first batch had 2 unnamed"
    )
    assert "batch 2 of epoch 0" in info.value.__notes__[-1]


class WrongBatchLength:
    def __len__(self):
        return 8

    def get_batch(self, indices):
        return torch.zeros(len(indices) + 1, 2)


def test_batch_dataset_returning_wrong_row_count_is_an_error():
    with pytest.raises(fl.data.DatasetShapeError, match="dimension 0 must equal"):
        fl.data.DataLoader.from_dataset(WrongBatchLength()).batch_size(2).build()


class Unconvertible:
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return object()


def test_unconvertible_sample_is_an_error():
    with pytest.raises(fl.data.DatasetShapeError, match="not convertible to a tensor"):
        fl.data.DataLoader.from_dataset(Unconvertible()).batch_size(1).build()


class Stream(IterableDataset):
    def __iter__(self):
        yield torch.zeros(1)


def test_unsupported_datasets_say_what_is_needed():
    with pytest.raises(fl.data.LoaderConfigError, match="IterableDataset"):
        fl.data.DataLoader.from_dataset(Stream()).batch_size(1).build()
    with pytest.raises(fl.data.LoaderConfigError, match="not a dataset"):
        fl.data.DataLoader.from_dataset(42).batch_size(1).build()


class Empty:
    def __len__(self):
        return 0

    def __getitem__(self, i):
        raise IndexError(i)


@pytest.mark.parametrize("dataset", [Empty(), torch.zeros(0, 3), {"x": torch.zeros(0)}])
def test_empty_dataset_is_a_clear_error(dataset):
    with pytest.raises(fl.data.EmptyDatasetError, match="empty dataset"):
        fl.data.DataLoader.from_dataset(dataset).batch_size(2).build()


class ShapeFrom(Dataset):
    """Samples of x shaped (3,), except those at ``odd`` indices, shaped (4,)."""

    def __init__(self, odd, single=False):
        self.odd, self.single = set(odd), single

    def __len__(self):
        return 8

    def __getitem__(self, i):
        x = torch.full((4 if i in self.odd else 3,), float(i))
        return x if self.single else (x, i)


@pytest.mark.parametrize(
    "odd",
    [
        {5},  # one sample of a batch differs: the batch cannot be stacked
        {4, 5, 6, 7},  # a whole batch differs from the first sample: it stacks, still refused
    ],
)
def test_a_sample_shaped_otherwise_than_the_first_is_named(odd):
    loader = fl.data.DataLoader.from_dataset(ShapeFrom(odd)).batch_size(4).shuffle(False).build()
    epoch = iter(loader.epoch(0))
    assert next(epoch)[0].shape == (4, 3)
    with pytest.raises(fl.data.DatasetShapeError) as info:
        next(epoch)
    assert f"ShapeFrom[{min(odd)}] field '0' has shape (4,) but the first sample's is (3,)" in str(
        info.value
    )


def test_stacked_samples_keep_their_fields_and_a_lone_tensor_is_one_field():
    pairs = fl.data.DataLoader.from_dataset(ShapeFrom(())).batch_size(4).shuffle(False).build()
    x, i = next(iter(pairs.epoch(0)))
    assert x[:, 0].tolist() == [0.0, 1.0, 2.0, 3.0] and i.tolist() == [0, 1, 2, 3]
    single = ShapeFrom((), single=True)
    (alone,) = next(
        iter(fl.data.DataLoader.from_dataset(single).batch_size(4).shuffle(False).build().epoch(0))
    )
    assert alone.shape == (4, 3) and alone[:, 0].tolist() == [0.0, 1.0, 2.0, 3.0]
