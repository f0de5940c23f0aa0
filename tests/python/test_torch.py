"""packread.torch with real torch: DataLoader workers and ranks (a real gloo group), epochs and
shuffling, resume (plain DataLoader and torchdata's StatefulDataLoader), data against the
reference readers, memory and descriptors over many epochs, and errors from workers."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

import packread
from packread._mix import source_epoch
from packread.errors import HDF5Error, InvalidArgumentError, PackreadOSError, PackreadTypeError
from packread.torch import MixDataset, PackDataset, PackMapDataset, open_reader
from support.formats import CASE_NAMES, Case, N, as_reference, same
from support.torchdata import (
    StatefulDataLoader,
    needs_stateful_dataloader,
    rank_main,
    run_gloo_ranks,
    times_two,
    write_ids,
)

#: Every case of the shared format matrix (support/formats.py), images included.
FORMATS = CASE_NAMES


@pytest.fixture
def ids(tmp_path):
    """An HDF5 file of 37 samples whose ``id`` dataset says which sample a batch row is."""
    return write_ids(str(tmp_path / "ids.h5"), N)


def dataset(case: Case, batch_size: int, **kw) -> PackDataset:
    return PackDataset(case.source, batch_size, datasets=case.datasets, **case.options, **kw)


def epoch_ids(loader) -> list[list[int]]:
    return [b.tolist() for b in loader]


def flat(batches: list[list[int]]) -> list[int]:
    return [i for b in batches for i in b]


def expected_batches(ds: PackDataset, epoch: int) -> list[list[int]]:
    idx = ds.rank_indices(epoch)
    b = ds.batch_size
    return [idx[j * b : (j + 1) * b].tolist() for j in range(len(ds))]


def tensors(batch) -> bool:
    """Whether every array of a yielded batch is a tensor (through the dicts, lists and tuples
    a batch of several or of variable-length arrays is)."""
    if isinstance(batch, dict):
        return all(tensors(v) for v in batch.values())
    if isinstance(batch, (list, tuple)):
        return all(tensors(v) for v in batch)
    return isinstance(batch, torch.Tensor)


def varying(case: Case) -> tuple[dict, Callable[[list[int], int], object]]:
    """Reader options under which a case's batches depend on the epoch, and the reference for
    ``(rows, epoch)``. Images get random crops and flips, drawn from ``(augment_seed, epoch,
    sample)``, so that a batch read with the wrong epoch differs; their reference is the
    reader's own batch for that epoch (its crops are checked against PIL in test_images, its
    center crops against PIL here). Other cases: the reference reader, whatever the epoch."""
    if not case.name.startswith("img"):
        return dict(case.options), lambda rows, epoch: case.reference(rows)
    decode = packread.ImageDecode(size=(8, 8), crop="random", flip=True)
    options = {**case.options, "decode": decode, "augment_seed": 5}
    reader = Case(case.name, case.source, options).open()
    return options, lambda rows, epoch: reader.batch(rows, epoch=epoch)


# --------------------------------------------------------------------------------------------
# The data itself, every format


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", FORMATS)
def test_batches_equal_the_reference_reader(cases, name, workers):
    case = cases[name]
    ds = dataset(case, 5, seed=3)
    loader = DataLoader(ds, batch_size=None, num_workers=workers)
    for epoch in range(2):
        kept = list(loader)  # every batch of the epoch kept, checked only at the end
        want = expected_batches(ds, epoch)
        assert len(kept) == len(want) == len(ds) == 8
        for got, rows in zip(kept, want, strict=True):
            ref = case.reference(rows)
            assert tensors(got), (name, got)
            # torch holds native byte order: the values are compared in the file's dtype.
            assert same(as_reference(got, ref), ref), (name, epoch, rows)
        assert sorted(flat(want)) == list(range(N))


def rows_of(batch, a: int, b: int):
    """Rows ``[a, b)`` of a yielded batch: a tensor, a dict of them, a list of a ragged
    array's samples, or ``ragged="flat"``'s ``(values, offsets)`` (a list once converted)."""
    if isinstance(batch, dict):
        return {k: rows_of(v, a, b) for k, v in batch.items()}
    if (
        isinstance(batch, (list, tuple))
        and len(batch) == 2
        and batch[1].ndim == 1
        and (batch[1].dtype == torch.int64 and batch[1][0] == 0 and len(batch[1]) > 2)
    ):
        values, offsets = batch
        lo, hi = int(offsets[a]), int(offsets[b])
        return type(batch)((values[lo:hi], offsets[a : b + 1] - lo))
    return batch[a:b]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", FORMATS)
def test_a_mixture_of_each_format_equals_the_reference(cases, name, workers):
    """MixDataset over two PackDatasets of each format (their own seeds; random crops for
    images): every batch's rows, piece by piece, equal the reference reader's samples from
    each source's own order for that pass (sources read about twice over: passes wrap)."""
    case = cases[name]
    options, reference = varying(case)
    sources = [
        PackDataset(case.source, 4, datasets=case.datasets, seed=s, **options) for s in (1, 2)
    ]
    ds = MixDataset(sources, [0.6, 0.4], stop=2 * N)
    plan = ds.plan(0)
    kept = list(DataLoader(ds, batch_size=None, num_workers=workers))
    assert len(kept) == len(ds) == plan.num_batches
    assert sum(plan.rows(j) for j in range(len(ds))) == 2 * N
    for j, got in enumerate(kept):
        assert tensors(got), (name, got)
        for part in plan.parts(j):
            src = sources[part.source]
            row, pos, end = part.row, part.start, part.start + part.length
            while pos < end:  # one piece per pass of the source's stream
                p, i = divmod(pos, N)
                take = min(end - pos, N - i)
                e = source_epoch(0, p)
                idx = src.order(e)[i : i + take].tolist()
                want = reference(idx, e)
                piece = rows_of(got, row, row + take)
                assert same(as_reference(piece, want), want), (name, j, part, p)
                row, pos = row + take, pos + take


@pytest.mark.parametrize("workers", [0, 2])
def test_chunk_mode_keeps_chunks_together_and_reads_right(cases, workers):
    case = cases["h5_lzf"]  # 4 samples per LZF chunk
    ds = dataset(case, 6, shuffle_mode="chunk", chunk_window=2, seed=11)
    assert ds.samples_per_chunk == 4
    assert ds.chunk_window == 2
    loader = DataLoader(ds, batch_size=None, num_workers=workers)
    kept = list(loader)
    want = expected_batches(ds, 0)
    assert [len(b) for b in kept] == [len(w) for w in want]
    for got, rows in zip(kept, want, strict=True):
        assert same(got.numpy(), case.reference(rows))
    order = ds.order(0).tolist()
    assert sorted(order) == list(range(N))

    # The order splits into runs that are each the samples of 2 whole chunks (the last run
    # may hold one chunk; chunk 9 holds a single sample), shuffled within the run.
    def size(c: int) -> int:
        return min(4, N - 4 * c)

    pos = 0
    while pos < N:
        chunks: set[int] = set()
        end = pos
        while True:
            chunks.add(order[end] // 4)
            end += 1
            assert len(chunks) <= 2
            if end - pos == sum(size(c) for c in chunks) and (len(chunks) == 2 or end == N):
                break
        assert sorted(order[pos:end]) == sorted(
            i for c in chunks for i in range(4 * c, 4 * c + size(c))
        )
        pos = end
    assert order != list(range(N))
    assert order != ds.order(1).tolist()


def test_default_chunk_window_follows_the_cache(cases):
    case = cases["h5_lzf"]  # chunks of 4 samples x 70 float32 = 1120 bytes
    assert dataset(case, 4, shuffle_mode="chunk", cache_bytes=1120 * 3).chunk_window == 3
    assert dataset(case, 4, shuffle_mode="chunk", cache_bytes=0).chunk_window == 1
    assert dataset(cases["npy"], 4, shuffle_mode="chunk").chunk_window == 1


def test_transform_runs_where_the_batch_is_read(cases):
    case = cases["h5"]
    ds = dataset(case, 7, shuffle=False, transform=times_two)
    for workers in (0, 2):
        got = list(DataLoader(ds, batch_size=None, num_workers=workers))
        for j, batch in enumerate(got):
            ref = case.reference(list(range(7 * j, min(7 * j + 7, N))))
            assert np.array_equal(batch["images"].numpy(), ref["images"] * 2)
            assert np.array_equal(batch["labels"].numpy(), ref["labels"] * 2)


def test_types_torch_cannot_hold_stay_numpy(tmp_path):
    path = tmp_path / "mixed.h5"
    with h5py.File(path, "w") as f:
        f["s"] = np.array([b"ab", b"cd", b"ef"], dtype="S2")
        f["be"] = np.arange(3, dtype=">i4")
    got = next(iter(DataLoader(PackDataset(path, 3, shuffle=False), batch_size=None)))
    assert isinstance(got["s"], np.ndarray)
    assert got["s"].tolist() == [b"ab", b"cd", b"ef"]
    assert isinstance(got["be"], torch.Tensor)
    assert got["be"].tolist() == [0, 1, 2]


# --------------------------------------------------------------------------------------------
# Sharding, epochs and shuffling


@pytest.mark.parametrize("persistent", [False, True])
def test_three_epochs_two_workers_cover_every_index(ids, persistent):
    ds = PackDataset(ids, 4, datasets="id", seed=5)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=persistent)
    orders = []
    for epoch in range(3):
        batches = epoch_ids(loader)
        assert len(batches) == len(ds) == 10
        assert batches == expected_batches(ds, epoch)
        assert sorted(flat(batches)) == list(range(N))
        orders.append(flat(batches))
    assert len({tuple(o) for o in orders}) == 3  # each epoch a new order
    again = PackDataset(ids, 4, datasets="id", seed=5)
    assert flat(epoch_ids(DataLoader(again, batch_size=None, num_workers=2))) == orders[0]
    other = PackDataset(ids, 4, datasets="id", seed=6)
    assert flat(epoch_ids(DataLoader(other, batch_size=None))) != orders[0]


def test_set_epoch_and_shuffle_off(ids):
    ds = PackDataset(ids, 4, datasets="id", seed=5)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    first = flat(epoch_ids(loader))
    ds.set_epoch(7)
    seventh = flat(epoch_ids(loader))
    assert seventh == flat(expected_batches(ds, 7)) != first
    ds.set_epoch(0)
    assert flat(epoch_ids(DataLoader(ds, batch_size=None))) == first
    assert flat(epoch_ids(loader)) == flat(expected_batches(ds, 1))  # then on by itself
    plain = PackDataset(ids, 4, datasets="id", shuffle=False)
    assert flat(epoch_ids(DataLoader(plain, batch_size=None, num_workers=2))) == list(range(N))
    assert plain.shuffle_mode == "none"


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("workers", [0, 3])
def test_ranks_partition_each_epoch(ids, world, drop_last, workers):
    batch = 4
    per_rank = []
    for rank in range(world):
        ds = PackDataset(
            ids, batch, datasets="id", seed=2, drop_last=drop_last, rank=rank, world_size=world
        )
        got = epoch_ids(DataLoader(ds, batch_size=None, num_workers=workers))
        assert len(got) == len(ds)
        if drop_last:
            assert all(len(b) == batch for b in got)
        per_rank.append(got)
    assert len({len(r) for r in per_rank}) == 1  # the same number of batches on every rank
    seen = [i for r in per_rank for i in flat(r)]
    order = PackDataset(ids, batch, datasets="id", seed=2).order(0).tolist()
    if drop_last:
        used = (N // (world * batch)) * batch * world
        assert sorted(seen) == sorted(order[:used])
        assert len(set(seen)) == len(seen)
    else:
        total = -(-N // world) * world
        assert sorted(seen) == sorted((order * 2)[:total])  # padded from the start
        assert set(seen) == set(range(N))


@pytest.mark.parametrize(("n", "world", "batch"), [(37, 2, 4), (5, 8, 2), (100, 3, 7), (1, 1, 1)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_length_matches_distributed_sampler(tmp_path, n, world, batch, drop_last):
    path = write_ids(str(tmp_path / "n.h5"), n)
    for rank in range(world):
        ds = PackDataset(
            path, batch, datasets="id", drop_last=drop_last, rank=rank, world_size=world
        )
        sampler = DistributedSampler(
            range(n), num_replicas=world, rank=rank, shuffle=False, drop_last=drop_last
        )
        want = len(DataLoader(range(n), batch_size=batch, sampler=sampler, drop_last=drop_last))
        assert len(ds) == want


@pytest.mark.parametrize("drop_last", [False, True])
def test_two_ranks_two_workers_in_a_gloo_group(ids, tmp_path, drop_last):
    options = {"batch_size": 3, "seed": 9, "drop_last": drop_last, "epochs": 2}
    ranks = run_gloo_ranks(rank_main, 2, str(tmp_path), ids, str(tmp_path), options)
    reference = PackDataset(ids, 3, datasets="id", seed=9, drop_last=drop_last)
    for epoch in range(2):
        per_rank = [r["epochs"][epoch]["batches"] for r in ranks]
        assert len(per_rank[0]) == len(per_rank[1]) == ranks[0]["len"] == ranks[1]["len"]
        assert ranks[0]["epochs"][epoch]["all_counts"] == [ranks[0]["len"]] * 2
        seen = flat(per_rank[0]) + flat(per_rank[1])
        order = reference.order(epoch).tolist()
        if drop_last:
            assert len(seen) == len(set(seen)) == (N // 6) * 6
            assert sorted(seen) == sorted(order[: len(seen)])
        else:
            assert len(seen) == 38
            assert set(seen) == set(range(N))
            assert sorted(seen) == sorted(order + order[:1])
        assert flat(per_rank[0]) == order[: len(flat(per_rank[0]))]  # rank 0: the first block
    assert flat(ranks[0]["epochs"][0]["batches"]) != flat(ranks[0]["epochs"][1]["batches"])


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
@pytest.mark.parametrize("name", FORMATS)
def test_start_methods(cases, name, method):
    # Every case: the dataset (its reader by source and options, the transform) pickled to
    # spawned and forkserver workers; images with random crops, so that each epoch's crops
    # must reach the workers too.
    case = cases[name]
    options, reference = varying(case)
    ds = PackDataset(case.source, 6, seed=1, transform=times_two, datasets=case.datasets, **options)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=method)
    for epoch in range(2):  # the epoch advances through the workers
        got = list(loader)
        want = expected_batches(ds, epoch)
        assert len(got) == len(want)
        for batch, rows in zip(got, want, strict=True):
            ref = times_two(reference(rows, epoch))
            assert same(as_reference(batch, ref), ref), (name, method, epoch, rows)
    assert expected_batches(ds, 0) != expected_batches(ds, 1)


# --------------------------------------------------------------------------------------------
# Resume


def _resume_points(m: int) -> list[int]:
    return sorted({1, 2, m // 2, m - 2, m - 1})


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_with_plain_dataloader(ids, workers):
    ds = PackDataset(ids, 4, datasets="id", seed=4)
    m = len(ds)
    whole = expected_batches(ds, 0)
    for k in _resume_points(m):
        run = PackDataset(ids, 4, datasets="id", seed=4)
        it = iter(DataLoader(run, batch_size=None, num_workers=workers))
        seen = [next(it).tolist() for _ in range(k)]
        state = run.state_dict() if workers == 0 else run.state_dict(batches_seen=k)
        del it
        assert state["epoch"] == 0
        assert state["batches_seen"] == k
        for resume_workers in (workers, 3):  # the state is global: any worker count
            fresh = PackDataset(ids, 4, datasets="id", seed=0)  # the seed comes from the state
            fresh.load_state_dict(state)
            rest = epoch_ids(DataLoader(fresh, batch_size=None, num_workers=resume_workers))
            assert seen + rest == whole, (k, resume_workers)
            # ... and then the next epoch, whole.
            following = epoch_ids(DataLoader(fresh, batch_size=None, num_workers=resume_workers))
            assert following == expected_batches(ds, 1)


@pytest.mark.parametrize("loader", ["plain", "stateful"])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", FORMATS)
def test_resume_mid_epoch_in_every_format(cases, name, workers, loader):
    # Stopped mid-epoch 1 and resumed from the state in a fresh dataset (another seed, which
    # the state overrides): the batches are those of the uninterrupted epoch, data included;
    # for images with random crops, epoch 1's crops (epoch 0's would differ).
    if loader == "stateful" and StatefulDataLoader is None:
        pytest.skip("no torchdata.stateful_dataloader here (torchdata >= 0.8, torch >= 2.4)")
    case = cases[name]
    options, reference = varying(case)

    def make(seed: int) -> PackDataset:
        return PackDataset(case.source, 5, seed=seed, datasets=case.datasets, **options)

    m = len(make(4))
    want = expected_batches(make(4), 1)
    for k in (1, m // 2, m - 1):
        run = make(4)
        if loader == "plain":
            run.set_epoch(1)
            it = iter(DataLoader(run, batch_size=None, num_workers=workers))
            seen = [next(it) for _ in range(k)]
            state = run.state_dict() if workers == 0 else run.state_dict(batches_seen=k)
            assert (state["epoch"], state["batches_seen"]) == (1, k)
            del it
            fresh = make(0)
            fresh.load_state_dict(state)
            rest = list(DataLoader(fresh, batch_size=None, num_workers=workers))
        else:
            stateful = StatefulDataLoader(run, batch_size=None, num_workers=workers)
            assert len(list(stateful)) == m  # epoch 0, whole
            it = iter(stateful)
            seen = [next(it) for _ in range(k)]
            state = stateful.state_dict()
            del it, stateful
            stateful = StatefulDataLoader(make(0), batch_size=None, num_workers=workers)
            stateful.load_state_dict(state)
            rest = list(stateful)
        got = seen + rest
        assert len(got) == m, (k, len(seen), len(rest))
        for batch, rows in zip(got, want, strict=True):
            ref = reference(rows, 1)
            assert same(as_reference(batch, ref), ref), (name, k, rows)
    if name.startswith("img"):
        assert not same(reference(want[0], 0), reference(want[0], 1))


def test_state_needs_batches_seen_after_worker_epochs(ids):
    ds = PackDataset(ids, 4, datasets="id")
    assert ds.state_dict()["batches_seen"] == 0
    list(DataLoader(ds, batch_size=None, num_workers=2))
    with pytest.raises(InvalidArgumentError, match="batches_seen"):
        ds.state_dict()
    end = ds.state_dict(batches_seen=len(ds))
    fresh = PackDataset(ids, 4, datasets="id")
    fresh.load_state_dict(end)  # saved at the end of epoch 0: resumes with epoch 1
    assert epoch_ids(DataLoader(fresh, batch_size=None)) == expected_batches(ds, 1)
    with pytest.raises(InvalidArgumentError):
        ds.state_dict(batches_seen=len(ds) + 1)


def test_state_refuses_other_settings(ids):
    state = PackDataset(ids, 4, datasets="id").state_dict()
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        PackDataset(ids, 5, datasets="id").load_state_dict(state)
    with pytest.raises(InvalidArgumentError, match="world_size"):
        PackDataset(ids, 4, datasets="id", rank=0, world_size=2).load_state_dict(state)
    with pytest.raises(InvalidArgumentError):
        PackDataset(ids, 4, datasets="id").load_state_dict({"epoch": 1})


@needs_stateful_dataloader
@pytest.mark.parametrize("workers", [0, 2])
def test_resume_with_stateful_dataloader(ids, workers):
    ds = PackDataset(ids, 4, datasets="id", seed=8)
    m = len(ds)
    whole = expected_batches(ds, 0)
    for k in _resume_points(m):
        run = PackDataset(ids, 4, datasets="id", seed=8)
        loader = StatefulDataLoader(run, batch_size=None, num_workers=workers)
        it = iter(loader)
        seen = [next(it).tolist() for _ in range(k)]
        state = loader.state_dict()
        del it, loader
        fresh = PackDataset(ids, 4, datasets="id", seed=8)
        loader = StatefulDataLoader(fresh, batch_size=None, num_workers=workers)
        loader.load_state_dict(state)
        rest = epoch_ids(loader)
        assert seen + rest == whole, k
        assert epoch_ids(loader) == expected_batches(ds, 1)


@needs_stateful_dataloader
@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_saved_at_the_end_of_an_epoch(ids, workers):
    ds = PackDataset(ids, 4, datasets="id", seed=8)
    loader = StatefulDataLoader(ds, batch_size=None, num_workers=workers)
    assert epoch_ids(loader) == expected_batches(ds, 0)
    state = loader.state_dict()
    fresh = PackDataset(ids, 4, datasets="id", seed=8)
    loader = StatefulDataLoader(fresh, batch_size=None, num_workers=workers)
    loader.load_state_dict(state)
    assert epoch_ids(loader) == expected_batches(ds, 1)


# --------------------------------------------------------------------------------------------
# Map-style


@pytest.mark.parametrize("workers", [0, 2])
def test_map_dataset_with_samplers(cases, workers):
    case = cases["h5"]
    ds = PackMapDataset(case.source)
    assert len(ds) == N
    one = ds[3]
    ref = case.reference([3])
    assert np.array_equal(one["images"].numpy(), ref["images"][0])
    sampler = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=1)
    loader = DataLoader(
        ds, batch_size=5, sampler=sampler, collate_fn=ds.collate_fn, num_workers=workers
    )
    rows = list(sampler)
    got = list(loader)
    for j, batch in enumerate(got):
        want = case.reference(rows[5 * j : 5 * j + 5])
        assert np.array_equal(batch["images"].numpy(), want["images"])
        assert np.array_equal(batch["labels"].numpy(), want["labels"])
    # With torch's default collate the batch is stacked again, and still right.
    plain = DataLoader(ds, batch_size=4, shuffle=False, num_workers=workers)
    first = next(iter(plain))
    want = case.reference([0, 1, 2, 3])
    assert np.array_equal(first["labels"].numpy(), want["labels"])
    assert np.array_equal(first["images"].numpy(), want["images"])
    rows = ds.__getitems__([5, 6])
    assert len(rows) == 2
    assert np.array_equal(rows[1]["images"].numpy(), ds[6]["images"].numpy())


def sample(batch, k: int):
    """Sample ``k`` of a batch (an array, a dict, a ragged list, or a flat ``(values,
    offsets)``)."""
    if isinstance(batch, dict):
        return {name: sample(v, k) for name, v in batch.items()}
    if isinstance(batch, tuple):
        values, offsets = batch
        return values[int(offsets[k]) : int(offsets[k + 1])]
    return batch[k]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", FORMATS)
def test_map_dataset_in_every_format(cases, name, workers):
    case = cases[name]
    ds = PackMapDataset(case.source, datasets=case.datasets, **case.options)
    assert len(ds) == N
    order = np.random.default_rng(3).permutation(N).tolist()
    loader = DataLoader(
        ds, batch_size=5, sampler=order, collate_fn=ds.collate_fn, num_workers=workers
    )
    got = list(loader)
    assert len(got) == 8
    for j, batch in enumerate(got):
        ref = case.reference(order[5 * j : 5 * j + 5])
        assert tensors(batch), (name, batch)
        assert same(as_reference(batch, ref), ref), (name, j)
    # The rows __getitems__ gives torch's default collate, and ds[i], are the samples.
    idx = [4, 0, 4, 36, 5]
    ref = case.reference(idx)
    rows = ds.__getitems__(idx)
    assert len(rows) == len(idx)
    for k, (row, i) in enumerate(zip(rows, idx, strict=True)):
        want = sample(ref, k)
        assert same(as_reference(row, want), want), (name, k)
        assert same(as_reference(ds[i], want), want), (name, i)
    assert same(as_reference(ds.collate_fn(rows), ref), ref)


def test_map_dataset_rows_of_flat_images_at_their_own_size(cases):
    # ragged="flat" images are (values, offsets, shapes): a row is one image, shaped.
    case = cases["img_zip"]
    ds = PackMapDataset(case.source, decode=packread.ImageDecode(), ragged="flat")
    idx = [3, 0, 36]
    want = case.reference(idx)
    rows = ds.__getitems__(idx)
    assert len(rows) == len(idx)
    for k, (row, i) in enumerate(zip(rows, idx, strict=True)):
        assert same(row["images"].numpy(), want["images"][k])
        assert same(ds[i]["images"].numpy(), want["images"][k])
        assert int(row["labels"]) == want["labels"][k]
    values, offsets, shapes = ds.collate_fn(rows)["images"]
    assert shapes.tolist() == [[10, 12, 3]] * 3
    assert offsets.tolist() == [0, 360, 720, 1080]
    assert same(values.numpy(), np.concatenate([w.ravel() for w in want["images"]]))


def test_map_dataset_transform(cases):
    ds = PackMapDataset(cases["npy"].source, transform=times_two)
    assert np.array_equal(ds[2].numpy(), cases["npy"].reference([2])[0] * 2)


# --------------------------------------------------------------------------------------------
# Memory, descriptors, errors, arguments


def _children() -> list[int]:
    me = str(os.getpid())
    kids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            kids.append(int(pid))
    return kids


def _rss_and_fds(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return rss * 1024, len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.slow
def test_memory_and_descriptors_flat_over_30_epochs(tmp_path):
    path = str(tmp_path / "big.h5")
    n = 400
    with h5py.File(path, "w") as f:
        rng = np.random.default_rng(0)
        f.create_dataset(
            "x", data=rng.integers(0, 255, (n, 64, 1024), dtype="u1"), chunks=(1, 64, 1024)
        )
    ds = PackDataset(path, 32, datasets="x", prefetch=2)
    others = set(_children())  # e.g. a forkserver left by another test
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    seen: dict[int, list[tuple[int, int]]] = {}  # pid -> (rss, fds) after each epoch
    for _ in range(30):
        assert sum(len(b) for b in loader) == n
        gc.collect()
        for pid in [os.getpid(), *(set(_children()) - others)]:
            seen.setdefault(pid, []).append(_rss_and_fds(pid))
    batch_bytes = 32 * 64 * 1024
    workers = [pid for pid in seen if pid != os.getpid()]
    assert len(workers) == 2
    assert all(len(seen[p]) == 30 for p in workers)  # the same (persistent) workers throughout
    for pid, series in seen.items():
        # Batches in flight come and go (each shared-memory batch holds a descriptor for a
        # while); what must not happen is growth: the last 15 epochs stay within the first's.
        early, late = series[3:15], series[15:]
        who = "main process" if pid == os.getpid() else "worker"
        assert max(f for _, f in late) <= max(f for _, f in early) + 2, f"{who} fds grew"
        assert max(r for r, _ in late) - max(r for r, _ in early) < 8 * batch_bytes, (
            f"{who} memory grew"
        )


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_chunk_raises_the_packread_error_naming_the_file(tmp_path, workers):
    path = str(tmp_path / "bad.h5")
    data = np.arange(20 * 64, dtype="<f4").reshape(20, 64)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(1, 64), compression="gzip")
        info = f["x"].id.get_chunk_info(7)
    with open(path, "r+b") as f:
        f.seek(info.byte_offset)
        f.write(b"\xff" * info.size)
    ds = PackDataset(path, 4, datasets="x", shuffle=False)
    with pytest.raises(HDF5Error, match=r"bad\.h5"):
        list(DataLoader(ds, batch_size=None, num_workers=workers))


@pytest.mark.parametrize("workers", [0, 2])
def test_file_truncated_after_the_dataset_opened_raises_naming_it(make_samples, workers):
    paths = make_samples(n=12, shape=(3, 3), dtype="<f4")
    ds = PackDataset(paths, 4, shuffle=False)
    os.truncate(paths[9], os.path.getsize(paths[9]) - 8)
    # The main process's reader sees the file changed; a worker's, opened later, a short file.
    with pytest.raises(packread.PackreadError, match=r"s009\.npy") as err:
        list(DataLoader(ds, batch_size=None, num_workers=workers))
    assert isinstance(err.value, (PackreadOSError, packread.NpyFormatError))


def test_arguments_are_checked(ids, cases):
    with pytest.raises(InvalidArgumentError):
        PackDataset(ids, 0)
    with pytest.raises(PackreadTypeError):
        PackDataset(ids, 2.5)
    with pytest.raises(InvalidArgumentError):
        PackDataset(ids, 4, shuffle_mode="random")
    with pytest.raises(InvalidArgumentError):
        PackDataset(ids, 4, rank=0)
    with pytest.raises(InvalidArgumentError):
        PackDataset(ids, 4, rank=2, world_size=2)
    with pytest.raises(InvalidArgumentError):
        PackDataset(ids, 4, prefetch=-1)
    with pytest.raises(PackreadTypeError):
        PackDataset(ids, 4, transform=3)
    with pytest.raises(InvalidArgumentError):
        PackDataset(str(ids) + ".unknown", 4)
    reader = packread.HDF5Reader(ids, "id")
    with pytest.raises(TypeError, match="PackDataset"):  # reader options for a reader
        PackDataset(reader, 4, num_threads=2)
    with pytest.raises(PackreadTypeError):
        PackDataset(object(), 4)


def test_sources_open_the_right_reader(cases, tmp_path):
    assert isinstance(open_reader(cases["h5"].source), packread.HDF5Reader)
    assert isinstance(open_reader(cases["zip_npy"].source), packread.ZipReader)
    assert isinstance(open_reader(cases["npz"].source), packread.NpzReader)
    assert isinstance(open_reader(cases["npy"].source), packread.NpyReader)
    npy_files = sorted(
        str(p) for p in __import__("pathlib").Path(cases["npy"].source).glob("*.npy")
    )
    assert isinstance(open_reader(npy_files[:3]), packread.NpyReader)
    assert isinstance(open_reader(os.path.join(cases["npz"].source, "*.npz")), packread.NpzReader)
    zr = open_reader(cases["zip_raw"].source, "img/*.raw", dtype="<f4")
    assert len(zr) == N
    assert open_reader(cases["npz"].source, ["label"]).keys() == ["label"]
    reader = packread.HDF5Reader(cases["h5"].source)
    assert open_reader(reader) is reader
    ds = PackDataset(reader, 5)
    assert ds.reader is reader
    assert len(ds) == 8


def test_a_reader_of_another_library_plugs_in(ids):
    class Squares:
        """The smallest BatchReader: no batch_async, no samples_per_chunk."""

        shape = (2,)
        dtype = np.dtype("<i8")

        def __len__(self):
            return 11

        def batch(self, idx, *, out=None):
            idx = np.asarray(idx)
            return np.stack([idx, idx * idx], axis=1)

    ds = PackDataset(Squares(), 3, shuffle=False)
    got = list(DataLoader(ds, batch_size=None))
    assert torch.cat(got).tolist() == [[i, i * i] for i in range(11)]
    assert len(got) == len(ds) == 4


def test_prefetch_zero_and_kept_batches(cases):
    case = cases["h5_lzf"]
    for prefetch in (0, 1, 4):
        ds = dataset(case, 4, seed=2, prefetch=prefetch)
        kept = list(DataLoader(ds, batch_size=None))
        time.sleep(0.05)  # any late write would land by now
        for got, rows in zip(kept, expected_batches(ds, 0), strict=True):
            assert same(got.numpy(), case.reference(rows))
