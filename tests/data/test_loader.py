"""DataLoader behaviour shared by both modes: counts, order, determinism, coverage, configuration."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import flodl as fl

from ..conftest import clean_env
from .conftest import CountingBatches, MapDataset

MODES = ["resident", "streaming"]


def loader(n=100, bs=10, mode="resident", **options) -> fl.data.DataLoader:
    builder = fl.data.DataLoader.from_tensors(
        x=torch.arange(n).float().unsqueeze(1), i=torch.arange(n)
    )
    builder.batch_size(bs).mode(mode)
    for name, value in options.items():
        getattr(builder, name)(value)
    return builder.build()


def order(dl: fl.data.DataLoader, epoch: int) -> list[int]:
    return [i for batch in dl.epoch(epoch) for i in batch["i"].tolist()]


@pytest.mark.parametrize("mode", MODES)
def test_batch_counts_shapes_and_exact_len(mode):
    dl = loader(n=103, bs=10, mode=mode)
    epoch = dl.epoch(0)
    assert len(epoch) == len(dl) == dl.num_batches == 10
    batches = list(epoch)
    assert len(batches) == 10 and all(b["x"].shape == (10, 1) for b in batches)
    assert dl.mode == mode


@pytest.mark.parametrize("mode", MODES)
def test_drop_last_false_adds_the_partial_batch_and_covers_everything(mode):
    dl = loader(n=103, bs=10, mode=mode, drop_last=False)
    batches = list(dl.epoch(0))
    assert len(dl) == 11 and [len(b["i"]) for b in batches][-1] == 3
    assert sorted(order(dl, 0)) == list(range(103))


@pytest.mark.parametrize("mode", MODES)
def test_batch_larger_than_dataset_gives_one_batch_or_a_build_error(mode):
    assert len(list(loader(n=5, bs=8, mode=mode, drop_last=False).epoch(0))) == 1
    # zero batches per epoch: a training loop would silently run zero steps
    with pytest.raises(fl.data.BatchSizeError) as info:
        loader(n=5, bs=8, mode=mode)
    assert str(info.value) == (
        "DataLoader: every epoch would have 0 batches: the dict of tensors has 5 samples, fewer"
        " than batch_size 8, with drop_last(True) — use a smaller batch_size, or"
        " .drop_last(False) to keep the partial batch"
    )


@pytest.mark.parametrize("mode", MODES)
def test_every_sample_once_per_epoch_and_epochs_differ(mode):
    dl = loader(n=100, bs=10, mode=mode)
    e0, e1 = order(dl, 0), order(dl, 1)
    assert sorted(e0) == sorted(e1) == list(range(100))
    assert e0 != e1
    assert order(dl, 0) == e0  # revisiting an epoch replays it


@pytest.mark.parametrize("mode", MODES)
def test_unshuffled_epochs_are_in_order(mode):
    dl = loader(n=30, bs=10, mode=mode, shuffle=False)
    assert order(dl, 0) == order(dl, 5) == list(range(30))


def test_same_seed_same_batches_across_modes_and_loaders_different_seed_differs():
    a = order(loader(seed=3), 4)
    assert a == order(loader(seed=3, mode="streaming"), 4)
    assert a != order(loader(seed=4), 4)
    assert order(loader(), 0) == order(loader(seed=42), 0)  # the documented default


def test_order_is_identical_across_processes():
    script = (
        "import json, torch, flodl as fl\n"
        "dl = fl.data.DataLoader.from_tensors(torch.arange(50)).batch_size(7).seed(11).build()\n"
        "print(json.dumps([b[0].tolist() for e in range(3) for b in dl.epoch(e)]))\n"
    )
    procs = [  # two processes at once: nothing shared but the seed
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(OMP_NUM_THREADS="1"),
        )
        for _ in range(2)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.append(json.loads(out))
    first, second = outputs
    dl = fl.data.DataLoader.from_tensors(torch.arange(50)).batch_size(7).seed(11).build()
    here = [b[0].tolist() for e in range(3) for b in dl.epoch(e)]
    assert first == second == here


class SlicedBatches:
    """A batch dataset returning views of its own tensor (``self.x[a:b]``), a common idiom."""

    def __init__(self):
        self.x = torch.zeros(8, 2)

    def __len__(self):
        return 8

    def get_batch(self, indices):
        start = int(indices[0])
        return self.x[start : start + len(indices)], self.x[start : start + len(indices), 0]


class SlicedArrays:
    """The same with NumPy arrays: ``torch.as_tensor`` would share their memory."""

    def __init__(self):
        self.x = np.zeros((8, 2), dtype=np.float32)

    def __len__(self):
        return 8

    def get_batch(self, indices):
        start = int(indices[0])
        return self.x[start : start + len(indices)], self.x[start : start + len(indices), 0]


class SharedArrays(SlicedArrays):
    """Slices handed to torch.from_numpy: torch sees a tensor of its own, not a view."""

    def get_batch(self, indices):
        start = int(indices[0])
        return torch.from_numpy(self.x[start : start + len(indices)])


SOURCES = {
    "sliced batches": SlicedBatches,
    "sliced arrays": SlicedArrays,
    "from_numpy": SharedArrays,
}


@pytest.mark.parametrize("mode", [*MODES, "auto", "prefetch"])
@pytest.mark.parametrize("source", ["tensors", *SOURCES])
def test_batches_own_their_tensors(mode, source):
    ds = SOURCES.get(source, SlicedBatches)()
    data = (ds.x, ds.x[:, 0]) if source == "tensors" else ds
    builder = fl.data.DataLoader.from_dataset(data).batch_size(4).shuffle(False)
    if mode == "prefetch":  # a background thread fetches
        builder = builder.mode("streaming").prefetch(2)
    else:
        builder = builder.mode(mode)
    dl = builder.build()
    for epoch in range(2):
        for batch in dl.epoch(epoch):
            for field in batch:
                field.add_(1)
    assert ds.x.sum() == 0  # changing a batch in place never changes the dataset


class FancyIndexed:
    """get_batch indexes a NumPy array: the result is already a copy, kept for the check."""

    def __init__(self):
        self.x = np.arange(16, dtype=np.float32).reshape(8, 2)
        self.given: list[np.ndarray] = []

    def __len__(self):
        return 8

    def get_batch(self, indices):
        self.given.append(self.x[indices.numpy()])
        return self.given[-1]


def test_a_fresh_array_from_get_batch_is_not_copied_again():
    ds = FancyIndexed()
    dl = fl.data.DataLoader.from_dataset(ds).batch_size(4).shuffle(False).build()
    batch = next(iter(dl.epoch(0)))
    assert batch[0].tolist() == ds.x[:4].tolist()
    assert np.shares_memory(batch[0].numpy(), ds.given[-1])


def test_iterating_the_loader_walks_epochs_in_turn():
    dl = loader(n=20, bs=5)
    assert [i for b in dl for i in b["i"].tolist()] == order(dl, 0)
    assert [i for b in dl for i in b["i"].tolist()] == order(dl, 1)
    dl.epoch(7)
    assert [i for b in dl for i in b["i"].tolist()] == order(dl, 8)


def test_names_builder_overrides_and_must_match_field_count():
    dl = fl.data.DataLoader.from_tensors(torch.zeros(4, 2), torch.ones(4)).batch_size(2)
    batch = next(iter(dl.names("image", "label").build().epoch(0)))
    assert batch["label"].tolist() == [1.0, 1.0]
    with pytest.raises(fl.data.LoaderConfigError, match="3 names"):
        fl.data.DataLoader.from_tensors(torch.zeros(4)).batch_size(2).names("a", "b", "c").build()
    with pytest.raises(fl.data.LoaderConfigError, match="repeat"):
        fl.data.DataLoader.from_tensors(torch.zeros(4)).names("a", "a")


@pytest.mark.parametrize("bad", [0, -3, 2.5, "8", True, None, np.float64(2.0)])
def test_bad_batch_size_is_rejected_at_the_setter(bad):
    with pytest.raises(fl.data.BatchSizeError, match="batch_size must be an integer ≥ 1"):
        fl.data.DataLoader.from_tensors(torch.zeros(4)).batch_size(bad)


def test_numpy_integers_are_integers():
    dl = fl.data.DataLoader.from_tensors(torch.arange(8)).batch_size(np.int64(2)).seed(np.int32(3))
    built = dl.build()
    assert (built.batch_size, type(built.batch_size), built.seed) == (2, int, 3)
    assert len(built.epoch(np.int64(1))) == 4
    assert len(list(built.epoch_subset(0, np.array([1, 3])))) == 2


@pytest.mark.parametrize("setter", ["shuffle", "drop_last"])
@pytest.mark.parametrize("bad", ["false", "False", 0, 1, None])
def test_switches_take_only_booleans(setter, bad):
    # bool("false") is True: a string would silently do the opposite of what it says
    builder = fl.data.DataLoader.from_tensors(torch.arange(9)).batch_size(2)
    with pytest.raises(fl.data.LoaderConfigError, match=f"{setter} takes True or False"):
        getattr(builder, setter)(bad)
    getattr(builder, setter)(np.bool_(False))  # a NumPy bool is a bool
    assert len(builder.build()) == (5 if setter == "drop_last" else 4)


def test_missing_batch_size_is_a_build_error():
    with pytest.raises(fl.data.BatchSizeError, match=r"call \.batch_size\(n\)"):
        fl.data.DataLoader.from_tensors(torch.zeros(4)).build()


def test_other_bad_settings():
    b = fl.data.DataLoader.from_tensors(torch.zeros(4))
    with pytest.raises(fl.data.LoaderConfigError, match="mode must be one of"):
        b.mode("gpu")
    with pytest.raises(fl.data.LoaderConfigError, match="prefetch depth"):
        b.prefetch(0)
    with pytest.raises(fl.data.LoaderConfigError, match="seed"):
        b.seed(-1)
    with pytest.raises(fl.data.LoaderConfigError, match="not a torch device"):
        b.device("tpu:banana")
    with pytest.raises(fl.data.LoaderConfigError, match="epoch"):
        loader().epoch(-1)
    with pytest.raises(fl.data.LoaderConfigError, match="either all positionally"):
        fl.data.DataLoader.from_tensors(torch.zeros(2), y=torch.zeros(2))
    with pytest.raises(fl.data.LoaderConfigError, match="callable"):
        b.memory_probe(3)


def test_all_errors_are_flodl_errors():
    for name in fl.data.__all__:
        obj = getattr(fl.data, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and not issubclass(obj, Warning):
            assert issubclass(obj, fl.FlodlError), name


@pytest.mark.parametrize("mode", MODES)
def test_smoke_env_caps_batches_per_epoch(mode, monkeypatch):
    monkeypatch.setenv("FLODL_SMOKE", "1")
    dl = loader(n=100, bs=10, mode=mode)
    assert len(dl) == fl.data.SMOKE_BATCHES and len(list(dl.epoch(0))) == fl.data.SMOKE_BATCHES
    monkeypatch.setenv("FLODL_SMOKE", "0")
    assert len(dl) == 10


def test_map_and_batch_datasets_in_both_modes_agree():
    for ds in (MapDataset(n=20), CountingBatches(n=20)):
        res = fl.data.DataLoader.from_dataset(ds).batch_size(4).seed(1).mode("resident").build()
        stream = fl.data.DataLoader.from_dataset(ds).batch_size(4).seed(1).streaming().build()
        for a, b in zip(res.epoch(2), stream.epoch(2), strict=True):
            assert all(s.equal(t) for s, t in zip(a, b, strict=True))
            assert a.names == b.names


def test_introspection():
    dl = loader(n=50, bs=8)
    assert (dl.batch_size, dl.num_samples, dl.dataset_size, dl.names) == (8, 50, 50, ("x", "i"))
    assert dl.device == torch.device("cpu") and dl.seed == 42 and dl.prefetch_depth == 0
    assert (dl.rank, dl.world_size) == (0, 1)
    assert "mode='resident'" in repr(dl)


@pytest.mark.parametrize("mode", MODES)
def test_batches_are_delivered_on_the_target_device(mode):
    # "meta" stands in for an accelerator: tensors have a device but no storage
    dl = fl.data.DataLoader.from_dataset(MapDataset(n=12)).batch_size(4).device("meta").mode(mode)
    batches = list(dl.build().epoch(0))
    assert len(batches) == 3
    assert all(t.device.type == "meta" for b in batches for t in b)
    assert batches[0]["x"].shape == (4, 3)


@pytest.mark.parametrize("mode", MODES)
def test_epoch_subset_yields_exactly_the_chosen_batches_of_that_epoch(mode):
    dl = loader(n=100, bs=10, mode=mode, seed=5)
    whole = [b["i"].tolist() for b in dl.epoch(2)]
    # Windows of an epoch handed out piecewise (El Che): together they are the epoch, in order.
    pieces = [dl.epoch_subset(2, range(a, b)) for a, b in [(0, 3), (3, 4), (4, 10)]]
    assert [b["i"].tolist() for piece in pieces for b in piece] == whole
    assert [b["i"].tolist() for b in dl.epoch_subset(2, [7, 1])] == [whole[7], whole[1]]
    assert [b["i"].tolist() for b in dl.epoch_subset(3, [0])] == [
        next(iter(dl.epoch(3)))["i"].tolist()
    ]
    assert list(dl.epoch_subset(2, [])) == []


def test_epoch_subset_refuses_positions_outside_the_epoch_or_not_integers():
    dl = loader(n=100, bs=10)
    with pytest.raises(fl.data.LoaderConfigError, match=r"positions \[10, -1\] are outside"):
        dl.epoch_subset(0, [0, 10, -1])
    for bad in ([1.7], ["1"], [True]):  # int() would truncate or parse them
        with pytest.raises(fl.data.LoaderConfigError, match="positions must be integers"):
            dl.epoch_subset(0, bad)
