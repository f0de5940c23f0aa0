"""Encoded images through the torch datasets: ``{"images", "labels"}`` batches equal to the
reader's own (same crops for the same epoch), with workers, resume, map-style epochs and
images at their own sizes."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import packread
from packread.torch import PackDataset, PackMapDataset
from support.images import files

pytest.importorskip("PIL.Image")
pytest.importorskip("skimage")

N = 23


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> str:
    """``N`` images (real photos, several formats, repeated), labels in ``dataset.json``."""
    enc = files()
    names = sorted(enc)
    path = str(tmp_path_factory.mktemp("zip") / "train.zip")
    labels = {}
    with zipfile.ZipFile(path, "w") as z:
        for k in range(N):
            name = f"img{k:03d}_{names[k % len(names)]}"
            z.writestr(name, enc[names[k % len(names)]])
            labels[name] = k
        z.writestr("dataset.json", json.dumps({"labels": labels}))
    return path


def _reader(path: str, **kw) -> packread.ImageReader:
    return packread.ImageReader(path, size=(20, 24), crop="random", flip=True, seed=5, **kw)


def _check_epoch(ds: PackDataset, reader: packread.ImageReader, loader, epoch: int) -> list:
    order = ds.rank_indices(epoch)
    b = ds.batch_size
    batches = list(loader)
    assert len(batches) == len(ds)
    for j, batch in enumerate(batches):
        idx = order[j * b : (j + 1) * b]
        assert set(batch) == {"images", "labels"}
        assert batch["images"].dtype == torch.uint8
        assert batch["labels"].dtype == torch.int64
        # Labels are the sample indices here: every batch is exactly its planned samples ...
        assert batch["labels"].tolist() == idx.tolist()
        # ... with the crops of this epoch.
        assert np.array_equal(batch["images"].numpy(), reader.batch(idx, epoch=epoch)["images"])
    return batches


@pytest.mark.parametrize("workers", [0, 2])
def test_pack_dataset_yields_images_and_labels_with_the_epochs_crops(archive, workers):
    reader = _reader(archive)
    ds = PackDataset(reader, 4, seed=1)
    loader = DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=workers > 0)
    first = _check_epoch(ds, reader, loader, 0)
    second = _check_epoch(ds, reader, loader, 1)
    # A sample's crop changes from one epoch to the next.
    pos0 = {int(i): k for k, i in enumerate(ds.rank_indices(0))}
    pos1 = {int(i): k for k, i in enumerate(ds.rank_indices(1))}
    a = torch.cat([x["images"] for x in first])[pos0[7]]
    c = torch.cat([x["images"] for x in second])[pos1[7]]
    assert not torch.equal(a, c)


def test_a_path_with_image_options_opens_images_and_resumes(archive):
    ds = PackDataset(archive, 5, seed=2, size=(20, 24), crop="random", flip=True)
    assert isinstance(ds.reader, packread.ImageReader)
    reader = ds.reader
    whole = list(DataLoader(ds, batch_size=None))
    run = PackDataset(archive, 5, seed=2, size=(20, 24), crop="random", flip=True)
    it = iter(DataLoader(run, batch_size=None))
    seen = [next(it) for _ in range(2)]
    state = run.state_dict()
    del it
    fresh = PackDataset(archive, 5, seed=0, size=(20, 24), crop="random", flip=True)
    fresh.load_state_dict(state)
    rest = list(DataLoader(fresh, batch_size=None))
    got = seen + rest
    assert len(got) == len(whole)
    for x, y in zip(got, whole, strict=True):
        assert torch.equal(x["images"], y["images"])
        assert torch.equal(x["labels"], y["labels"])
    order = ds.rank_indices(0)
    assert np.array_equal(whole[0]["images"].numpy(), reader.batch(order[:5], epoch=0)["images"])


def test_image_folder_trees_and_own_sizes(tmp_path):
    enc = files()
    names = sorted(n for n in enc if n.endswith((".jpg", ".png")))[:6]
    for k, n in enumerate(names):
        d = tmp_path / "tree" / f"class{k % 2}"
        d.mkdir(parents=True, exist_ok=True)
        (d / n).write_bytes(enc[n])
    ds = PackDataset(str(tmp_path / "tree"), 4, shuffle=False)
    reader = ds.reader
    assert isinstance(reader, packread.ImageReader)
    assert reader.classes == ["class0", "class1"]
    batches = list(DataLoader(ds, batch_size=None))
    got = [img for b in batches for img in b["images"]]
    labels = torch.cat([b["labels"] for b in batches])
    assert labels.tolist() == reader.labels.tolist()
    want = reader.batch(range(len(reader)))["images"]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, torch.from_numpy(w))


@pytest.mark.parametrize("workers", [0, 2])
def test_map_dataset_draws_crops_from_the_epoch_it_is_set_to(archive, workers):
    reader = _reader(archive)
    ds = PackMapDataset(reader)
    loader = DataLoader(
        ds,
        batch_size=6,
        shuffle=False,
        num_workers=workers,
        persistent_workers=workers > 0,
        collate_fn=ds.collate_fn,
    )
    for epoch in (0, 3, 1):
        ds.set_epoch(epoch)
        for j, batch in enumerate(loader):
            idx = list(range(j * 6, min((j + 1) * 6, N)))
            assert batch["labels"].tolist() == idx
            assert np.array_equal(batch["images"].numpy(), reader.batch(idx, epoch=epoch)["images"])
    one = ds[4]
    assert set(one) == {"images", "labels"}
    assert int(one["labels"]) == 4


@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_split_image_epochs_like_every_other_reader(archive, drop_last):
    reader = _reader(archive)
    seen = []
    counts = []
    for rank in (0, 1):
        ds = PackDataset(reader, 4, seed=3, rank=rank, world_size=2, drop_last=drop_last)
        batches = list(DataLoader(ds, batch_size=None, num_workers=2))
        counts.append(len(batches))
        order = ds.rank_indices(0)
        for j, b in enumerate(batches):
            idx = order[j * 4 : (j + 1) * 4]
            assert b["labels"].tolist() == idx.tolist()
            assert np.array_equal(b["images"].numpy(), reader.batch(idx, epoch=0)["images"])
            seen.extend(b["labels"].tolist())
    assert counts[0] == counts[1]
    if drop_last:
        assert len(seen) == len(set(seen)) <= N
    else:
        assert set(seen) == set(range(N))  # every sample, the shorter rank padded
