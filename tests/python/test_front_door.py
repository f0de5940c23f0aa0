"""The seams issue 29 found between readers, each tried as a user meets it: image shards
through PackDataset, variable-length HDF5 through PackDataset, options routed by name, empty
shards, converted archives, torchvision v2 transforms, and error messages blamed on the right
call. Each test fails on the build before the front door was redesigned."""

from __future__ import annotations

import inspect
import io
import json
import zipfile

import h5py
import numpy as np
import pytest
from PIL import Image

import packread
from packread.errors import MissingKeyError
from support.helpers import assert_same

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from packread.torch import PackDataset, PackMapDataset  # noqa: E402

#: Images per archive shard.
PER_SHARD = (5, 0, 7)


def _png(rng: np.random.Generator, h: int, w: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def image_shards(tmp_path_factory) -> tuple[str, list[int]]:
    """Three ZIP shards of PNGs (one empty, as a writer's last shard may be) with labels in
    ``dataset.json``; the glob and every sample's label."""
    root = tmp_path_factory.mktemp("imgshards")
    rng = np.random.default_rng(29)
    labels: list[int] = []
    for k, n in enumerate(PER_SHARD):
        with zipfile.ZipFile(root / f"part{k}.zip", "w") as z:
            own = {}
            for i in range(n):
                name = f"{k}_{i:02d}.png"
                z.writestr(name, _png(rng, 30 + i, 34 + k))
                own[name] = (7 * len(labels) + 3) % 10
                labels.append(own[name])
            z.writestr("dataset.json", json.dumps({"labels": own}))
    return str(root / "part*.zip"), labels


def test_image_shards_through_pack_dataset_keep_labels_and_draw_crops_per_epoch(image_shards):
    pattern, labels = image_shards
    ds = PackDataset(pattern, 4, size=16, crop="random", augment_seed=3, shuffle=False)
    assert type(ds.reader) is packread.ImageReader
    epochs = []
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        batches = list(DataLoader(ds, batch_size=None))
        assert all(set(b) == {"images", "labels"} for b in batches)
        assert torch.cat([b["labels"] for b in batches]).tolist() == labels
        epochs.append(torch.cat([b["images"] for b in batches]))
    assert not torch.equal(epochs[0], epochs[1])  # crops differ from epoch to epoch
    ds.set_epoch(0)
    again = torch.cat([b["images"] for b in DataLoader(ds, batch_size=None)])
    assert torch.equal(again, epochs[0])  # and repeat within one


@pytest.mark.parametrize("workers", [0, 2])
def test_image_shards_through_pack_dataset_with_workers_equal_the_reader(image_shards, workers):
    pattern, labels = image_shards
    reader = packread.ImageReader(pattern, size=16, crop="random", augment_seed=3)
    ds = PackDataset(reader, 3, seed=1)
    ds.set_epoch(2)
    order = ds.rank_indices(2)
    seen = 0
    for b in DataLoader(ds, batch_size=None, num_workers=workers):
        idx = order[seen : seen + len(b["labels"])]
        want = reader.batch(idx, epoch=2)
        assert b["labels"].tolist() == [labels[i] for i in idx]
        assert np.array_equal(b["images"].numpy(), want["images"])
        seen += len(idx)
    assert seen == len(labels)


def test_the_augment_seed_of_an_image_source_is_not_the_shuffle_seed(image_shards):
    pattern, _ = image_shards
    a = PackDataset(pattern, 12, size=16, crop="random", augment_seed=1, shuffle=False)
    b = PackDataset(pattern, 12, size=16, crop="random", augment_seed=2, shuffle=False)
    c = PackDataset(pattern, 12, size=16, crop="random", augment_seed=1, shuffle=False, seed=9)
    first = [next(iter(DataLoader(d, batch_size=None)))["images"] for d in (a, b, c)]
    assert not torch.equal(first[0], first[1])
    assert torch.equal(first[0], first[2])


def _vlen_file(path) -> list[np.ndarray]:
    rng = np.random.default_rng(4)
    rows = [rng.standard_normal(int(n)).astype("<f4") for n in rng.integers(0, 9, 11)]
    with h5py.File(path, "w") as f:
        d = f.create_dataset("utterances", (len(rows),), dtype=h5py.vlen_dtype(np.float32))
        for k, r in enumerate(rows):
            d[k] = r
        f["speaker"] = np.arange(len(rows), dtype="<i8") % 3
    return rows


@pytest.mark.parametrize("workers", [0, 2])
def test_variable_length_hdf5_goes_through_pack_dataset(tmp_path, workers):
    path = tmp_path / "speech.h5"
    rows = _vlen_file(path)
    ds = PackDataset(str(path), 4, arrays="utterances", ragged="list", shuffle=False)
    assert type(ds.reader) is packread.HDF5Reader
    got = [u for b in DataLoader(ds, batch_size=None, num_workers=workers) for u in b]
    assert len(got) == len(rows)
    for g, w in zip(got, rows, strict=True):
        assert_same(g.numpy(), w)


def test_ragged_flat_on_hdf5_is_the_hdf5_option_not_an_image_one(tmp_path):
    path = tmp_path / "speech.h5"
    rows = _vlen_file(path)
    ds = PackDataset(str(path), 4, arrays="utterances", ragged="flat", shuffle=False)
    assert type(ds.reader) is packread.HDF5Reader
    first = next(iter(DataLoader(ds, batch_size=None)))
    values, offsets = first
    assert_same(values.numpy(), np.concatenate(rows[:4]))
    assert offsets.tolist() == np.cumsum([0, *(len(r) for r in rows[:4])]).tolist()


def test_map_dataset_reads_variable_length_hdf5(tmp_path):
    path = tmp_path / "speech.h5"
    rows = _vlen_file(path)
    ds = PackMapDataset(str(path), arrays="utterances")
    loader = DataLoader(ds, batch_size=3, collate_fn=ds.collate_fn)
    got = [u for b in loader for u in b]
    for g, w in zip(got, rows, strict=True):
        assert_same(np.asarray(g), w)


def test_a_members_pattern_over_shards_skips_an_empty_archive(tmp_path):
    raw = np.arange(6 * 8, dtype="<u2").reshape(6, 8)
    for k, rows in enumerate(([0, 1, 2], [], [3, 4, 5])):
        with zipfile.ZipFile(tmp_path / f"part{k}.zip", "w") as z:
            for i in rows:
                z.writestr(f"s{i}.raw", raw[i].tobytes())
    r = packread.ZipReader(str(tmp_path / "part*.zip"), members="*.raw", dtype="<u2", shape=(8,))
    assert r.shard_lengths == [3, 0, 3]
    assert_same(r.batch([5, 0, 3]), raw[[5, 0, 3]])
    # A pattern matching nothing anywhere is still an error naming it.
    with pytest.raises(MissingKeyError, match=r"no member matches '\*\.jpg' in any of the 3"):
        packread.ZipReader(str(tmp_path / "part*.zip"), members="*.jpg")


def test_the_zip_that_convert_writes_opens_as_images_like_its_tree(tmp_path):
    from packread.cli import main

    rng = np.random.default_rng(8)
    tree = tmp_path / "tree"
    for c in ("cat", "dog"):
        (tree / c).mkdir(parents=True)
        for i in range(3):
            (tree / c / f"{i}.png").write_bytes(_png(rng, 20, 22))
    assert main(["convert", str(tree), str(tmp_path / "train.zip")]) == 0
    ds = PackDataset(str(tmp_path / "train.zip"), 6, size=16, shuffle=False)
    assert type(ds.reader) is packread.ImageReader
    from_tree = PackDataset(str(tree), 6, size=16, shuffle=False)
    a, b = (next(iter(DataLoader(d, batch_size=None))) for d in (ds, from_tree))
    assert a["labels"].tolist() == b["labels"].tolist() == [0, 0, 0, 1, 1, 1]
    assert torch.equal(a["images"], b["images"])


def test_a_torchvision_v2_transform_gets_tensors(image_shards):
    v2 = pytest.importorskip("torchvision.transforms.v2")
    pattern, _ = image_shards
    seen = []

    def transform(batch):
        seen.append(type(batch["images"]))
        batch["images"] = v2.functional.hflip(batch["images"].permute(0, 3, 1, 2))
        return batch

    ds = PackDataset(pattern, 4, size=16, shuffle=False, transform=transform)
    plain = PackDataset(pattern, 4, size=16, shuffle=False)
    got = next(iter(DataLoader(ds, batch_size=None)))["images"]
    want = next(iter(DataLoader(plain, batch_size=None)))["images"]
    assert seen
    assert all(t is torch.Tensor for t in seen)
    assert torch.equal(got, want.permute(0, 3, 1, 2).flip(-1))  # the flip took effect


def test_help_shows_each_readers_parameters():
    for cls, names in (
        (packread.HDF5Reader, {"source", "arrays", "chunk_cache_bytes", "remote"}),
        (packread.ZipReader, {"source", "members", "dtype", "shape", "limits"}),
        (packread.ImageReader, {"source", "decode", "labels", "augment_seed", "on_error"}),
    ):
        params = set(inspect.signature(cls).parameters)
        assert names <= params, (cls, params)


def test_a_typo_is_blamed_on_pack_dataset_with_the_nearest_name(image_shards):
    pattern, _ = image_shards
    with pytest.raises(TypeError, match=r"PackDataset\(\).*'shufle'.*'shuffle'"):
        PackDataset(pattern, 4, shufle=True)


def test_an_epoch_with_no_batch_warns(tmp_path):
    path = tmp_path / "tiny.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3.0)
    with pytest.warns(RuntimeWarning, match="no batch"):
        ds = PackDataset(str(path), 4, drop_last=True)
    assert list(DataLoader(ds, batch_size=None)) == []


def test_images_skipped_in_workers_are_seen_by_the_main_process(tmp_path):
    rng = np.random.default_rng(1)
    path = tmp_path / "some_bad.zip"
    with zipfile.ZipFile(path, "w") as z:
        for i in range(8):
            data = _png(rng, 20, 20)
            z.writestr(f"{i}.png", data[: len(data) // 3] if i == 5 else data)
    ds = PackDataset(str(path), 4, size=16, on_error="skip", shuffle=False)
    with pytest.warns(RuntimeWarning):
        batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert len(batches) == 2
    assert list(ds.errors) == [5]
    assert "truncated" in ds.errors[5]
