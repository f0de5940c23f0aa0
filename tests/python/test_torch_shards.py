"""packread.torch over shards (a list or glob of HDF5 files): every shuffle mode with and
without DataLoader workers, shard mode's cut (whole shards dealt to ranks, then to workers,
shuffled within windows), its errors when there are too few shards, resume, a real 2-process
gloo group, and sample mode over shards against one file holding the same samples."""

from __future__ import annotations

import collections
import os

import h5py
import numpy as np
import pytest
from torch.utils.data import DataLoader

import packread
from packread.errors import InvalidArgumentError
from packread.torch import PackDataset
from support.shardranks import shard_rank_main, write_id_shards
from support.torchdata import StatefulDataLoader, needs_stateful_dataloader, run_gloo_ranks

#: Shard lengths: unequal, with an empty shard; 4 shards hold samples.
SIZES = (1, 7, 0, 500, 3)
N = sum(SIZES)
BATCH = 32
MODES = ["sample", "chunk", "shard", "none"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> list[str]:
    """The shards of ``SIZES``; dataset ``id`` holds each sample's global index (4 per chunk)."""
    return write_id_shards(str(tmp_path_factory.mktemp("idshards")), SIZES)


def epoch_ids(loader) -> list[list[int]]:
    return [b.tolist() for b in loader]


def flat(batches: list[list[int]]) -> list[int]:
    return [i for b in batches for i in b]


def expected_batches(ds: PackDataset, epoch: int, workers: int = 0) -> list[list[int]]:
    """The batches of ``epoch``, read through ``workers`` DataLoader workers (0: in process)."""
    idx = ds._plan(max(workers, 1)).rank_indices(epoch)
    b = ds.batch_size
    return [idx[j * b : (j + 1) * b].tolist() for j in range(len(ds))]


def shard_of(i: int, sizes=SIZES) -> int:
    starts = np.cumsum([0, *sizes])
    return int(np.searchsorted(starts, i, side="right") - 1)


def rank_run(ds: PackDataset, epoch: int, rank: int, world: int) -> list[int]:
    """Rank ``rank``'s contiguous run of the shard-ordered samples (``ds.order``), padded by
    repeating from the start, or cut to whole batches with ``drop_last``."""
    order = ds.order(epoch)
    b = ds.batch_size
    per = (N // (world * b)) * b if ds.drop_last else -(-N // world)
    return np.resize(order, per * world)[rank * per : (rank + 1) * per].tolist()


# --------------------------------------------------------------------------------------------
# Every mode, with and without workers


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_reads_each_index_once(shards, mode, workers):
    ds = PackDataset(shards, BATCH, datasets="id", seed=3, shuffle_mode=mode)
    assert isinstance(ds.reader, packread.ShardedReader)
    assert ds.shard_lengths == SIZES
    loader = DataLoader(ds, batch_size=None, num_workers=workers)
    orders = []
    for epoch in range(2):
        batches = epoch_ids(loader)
        assert len(batches) == len(ds) == -(-N // BATCH)
        assert batches == expected_batches(ds, epoch, workers), (mode, epoch)
        assert sorted(flat(batches)) == list(range(N))
        orders.append(flat(batches))
    if mode == "none":
        assert orders[0] == orders[1] == list(range(N))
    else:
        assert orders[0] != orders[1]
        assert orders[0] != list(range(N))


def test_shard_mode_over_a_reader_and_a_glob(shards):
    pattern = os.path.join(os.path.dirname(shards[0]), "ids_*.h5")
    reader = packread.HDF5Reader(pattern, "id")
    by_reader = PackDataset(reader, BATCH, seed=5, shuffle_mode="shard")
    assert by_reader.reader is reader
    by_glob = PackDataset(pattern, BATCH, datasets="id", seed=5, shuffle_mode="shard")
    for ds in (by_reader, by_glob):
        got = epoch_ids(DataLoader(ds, batch_size=None, num_workers=2))
        assert got == expected_batches(ds, 0, 2)
        assert sorted(flat(got)) == list(range(N))
    # One file is no source of shards.
    with pytest.raises(InvalidArgumentError, match="several files"):
        PackDataset(shards[3], BATCH, datasets="id", shuffle_mode="shard")


# --------------------------------------------------------------------------------------------
# Shard mode: the cut


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize(("world", "workers"), [(1, 0), (2, 0), (3, 0), (1, 2), (2, 2)])
def test_shard_mode_deals_contiguous_runs_to_ranks_and_workers(shards, world, workers, drop_last):
    k = max(workers, 1)
    per_rank = []
    for rank in range(world):
        ds = _shard_ds(shards, seed=2, drop_last=drop_last, rank=rank, world_size=world)
        got = epoch_ids(DataLoader(ds, batch_size=None, num_workers=workers))
        assert len(got) == len(ds)
        assert got == expected_batches(ds, 0, workers)
        if drop_last:
            assert all(len(b) == BATCH for b in got)
        # The rank reads its contiguous run of the shard-ordered samples ...
        run = rank_run(ds, 0, rank, world)
        assert sorted(flat(got)) == sorted(run)
        # ... each worker a contiguous block of it (worker w reads batches w, w + k, ...).
        at = 0
        for w in range(k):
            mine = flat(got[w::k])
            assert sorted(mine) == sorted(run[at : at + len(mine)]), (rank, w)
            at += len(mine)
        per_rank.append(got)
    assert len({len(r) for r in per_rank}) == 1  # the same number of batches on every rank
    seen = flat([b for r in per_rank for b in r])
    if drop_last:
        assert len(seen) == len(set(seen)) == (N // (world * BATCH)) * BATCH * world
    else:
        assert set(seen) == set(range(N))
        assert len(seen) == -(-N // world) * world  # padded by repeating
        assert max(collections.Counter(seen).values()) <= 2


def test_each_worker_reads_few_shards(tmp_path):
    sizes = [50] * 40
    paths = write_id_shards(str(tmp_path / "forty"), sizes, chunk=10)
    ds = PackDataset(paths, 10, datasets="id", seed=9, shuffle_mode="shard", shard_window=2)
    got = epoch_ids(DataLoader(ds, batch_size=None, num_workers=2))
    assert got == expected_batches(ds, 0, 2)
    assert sorted(flat(got)) == list(range(2000))
    touched = [{i // 50 for i in b} for b in got]
    assert max(len(t) for t in touched) <= 4  # a window of 2 shards, and a crossing
    by_worker = [set().union(*touched[w::2]) for w in range(2)]
    assert by_worker[0].isdisjoint(by_worker[1])
    assert len(by_worker[0]) == len(by_worker[1]) == 20
    # Shuffled within the windows, not read in file order.
    assert any(b != sorted(b) for b in got)
    # Sample mode, for contrast, spreads each batch over many shards.
    spread = PackDataset(paths, 10, datasets="id", seed=9, shuffle_mode="sample")
    assert max(len({i // 50 for i in b}) for b in expected_batches(spread, 0)) > 4


def test_shard_mode_epochs_and_seeds(shards):
    def run(seed, epochs=2):
        ds = PackDataset(shards, BATCH, datasets="id", seed=seed, shuffle_mode="shard")
        loader = DataLoader(ds, batch_size=None, num_workers=2)
        return [flat(epoch_ids(loader)) for _ in range(epochs)]

    first = run(4)
    assert first[0] != first[1]
    assert sorted(first[0]) == sorted(first[1]) == list(range(N))
    assert run(4) == first  # the same seed, the same orders
    assert run(5, 1)[0] != first[0]
    # The shards' own order changes between epochs too, not only the samples within.
    ds = PackDataset(shards, BATCH, datasets="id", seed=4, shuffle_mode="shard")
    shard_orders = {tuple(dict.fromkeys(shard_of(i) for i in ds.order(e))) for e in range(6)}
    assert len(shard_orders) > 1


# --------------------------------------------------------------------------------------------
# Shard mode: too few shards


def test_too_few_shards_for_the_ranks_is_said_at_construction(shards):
    # 5 files, 4 holding samples: 4 ranks are fine, 5 are not (an empty shard does not count).
    for rank in range(4):
        ds = PackDataset(
            shards, BATCH, datasets="id", shuffle_mode="shard", rank=rank, world_size=4
        )
        assert len(ds) > 0
    with pytest.raises(InvalidArgumentError, match="shuffle_mode='sample'"):
        PackDataset(shards, BATCH, datasets="id", shuffle_mode="shard", rank=0, world_size=5)
    # Sample mode has no such limit.
    assert len(PackDataset(shards, BATCH, datasets="id", rank=4, world_size=5)) > 0


def test_too_few_shards_for_the_workers_raises_from_the_loader(tmp_path):
    paths = write_id_shards(str(tmp_path / "few"), (5, 0, 6))
    ds = PackDataset(paths, 4, datasets="id", shuffle_mode="shard")
    # 2 shards hold samples: 2 workers are fine ...
    got = epoch_ids(DataLoader(ds, batch_size=None, num_workers=2, timeout=60))
    assert sorted(flat(got)) == list(range(11))
    # ... 3 are not: the workers' error reaches the loop (and nothing hangs: timeout=).
    loader = DataLoader(ds, batch_size=None, num_workers=3, timeout=60)
    with pytest.raises(InvalidArgumentError, match="shuffle_mode='sample'"):
        list(loader)


# --------------------------------------------------------------------------------------------
# Shard mode: resume


def _shard_ds(shards, seed=4, batch=BATCH, **kw) -> PackDataset:
    """Shard mode over ``shards`` with a window of 2 (``kw``: ranks, ``drop_last``)."""
    return PackDataset(
        shards, batch, datasets="id", seed=seed, shuffle_mode="shard", shard_window=2, **kw
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_shard_mode_resumes_with_a_plain_dataloader(shards, workers):
    ds = _shard_ds(shards)
    m = len(ds)
    whole = expected_batches(ds, 0, workers)
    for k in (1, m // 2, m - 1):
        run = _shard_ds(shards)
        it = iter(DataLoader(run, batch_size=None, num_workers=workers))
        seen = [next(it).tolist() for _ in range(k)]
        state = run.state_dict() if workers == 0 else run.state_dict(batches_seen=k)
        del it
        assert (state["epoch"], state["batches_seen"]) == (0, k)
        assert state["shuffle_mode"] == "shard"
        fresh = _shard_ds(shards, seed=0)  # the seed comes from the state
        fresh.load_state_dict(state)
        loader = DataLoader(fresh, batch_size=None, num_workers=workers)
        assert seen + epoch_ids(loader) == whole, k
        assert epoch_ids(loader) == expected_batches(ds, 1, workers)  # then the next epoch


def test_shard_mode_state_needs_the_same_workers(shards):
    saved_in_process = _shard_ds(shards)
    it = iter(DataLoader(saved_in_process, batch_size=None))
    next(it)
    state = saved_in_process.state_dict()
    del it
    fresh = _shard_ds(shards)
    fresh.load_state_dict(state)
    with pytest.raises(InvalidArgumentError, match="num_workers"):
        list(DataLoader(fresh, batch_size=None, num_workers=2, timeout=60))

    saved_by_workers = _shard_ds(shards)
    it = iter(DataLoader(saved_by_workers, batch_size=None, num_workers=2))
    next(it)
    state = saved_by_workers.state_dict(batches_seen=1)
    del it
    fresh = _shard_ds(shards)
    fresh.load_state_dict(state)
    with pytest.raises(InvalidArgumentError, match="num_workers"):
        list(DataLoader(fresh, batch_size=None))


@needs_stateful_dataloader
@pytest.mark.parametrize("workers", [0, 2])
def test_shard_mode_resumes_with_a_stateful_dataloader(shards, workers):
    whole = expected_batches(_shard_ds(shards), 0, workers)
    loader = StatefulDataLoader(_shard_ds(shards), batch_size=None, num_workers=workers)
    it = iter(loader)
    seen = [next(it).tolist() for _ in range(5)]
    state = loader.state_dict()
    del it, loader
    loader = StatefulDataLoader(_shard_ds(shards), batch_size=None, num_workers=workers)
    loader.load_state_dict(state)
    assert seen + epoch_ids(loader) == whole


# --------------------------------------------------------------------------------------------
# A real gloo group


def test_shard_mode_in_a_gloo_group_of_two_ranks_two_workers(shards, tmp_path):
    options = {
        "batch_size": 16,
        "seed": 9,
        # Spawned workers (which keep the ranks the main process found) and forked ones (which
        # inherit the process group).
        "runs": [
            {"drop_last": False, "context": "spawn", "persistent": True},
            {"drop_last": True, "context": "fork", "persistent": False},
        ],
        "epochs": 2,
        "workers": 2,
        "shard_window": 2,
    }
    ranks = run_gloo_ranks(shard_rank_main, 2, str(tmp_path), shards, str(tmp_path), options)
    for run, settings in enumerate(options["runs"]):
        drop_last = settings["drop_last"]
        runs = [ranks[r]["runs"][run] for r in range(2)]
        assert runs[0]["drop_last"] == runs[1]["drop_last"] == drop_last
        assert runs[0]["len"] == runs[1]["len"]
        for epoch in range(2):
            per_rank = [x["epochs"][epoch]["batches"] for x in runs]
            assert len(per_rank[0]) == len(per_rank[1]) == runs[0]["len"]
            assert runs[0]["epochs"][epoch]["all_counts"] == [runs[0]["len"]] * 2
            for rank in range(2):
                reference = _shard_ds(
                    shards, seed=9, batch=16, drop_last=drop_last, rank=rank, world_size=2
                )
                assert per_rank[rank] == expected_batches(reference, epoch, 2), (rank, epoch)
            seen = flat(per_rank[0]) + flat(per_rank[1])
            if drop_last:
                assert len(seen) == len(set(seen)) == (N // 32) * 32
            else:
                assert len(seen) == N + 1
                assert set(seen) == set(range(N))
        assert flat(runs[0]["epochs"][0]["batches"]) != flat(runs[0]["epochs"][1]["batches"])


# --------------------------------------------------------------------------------------------
# Sample mode over shards is sample mode over their concatenation


def test_sample_mode_over_shards_equals_one_file(shards, tmp_path):
    one = str(tmp_path / "one.h5")
    with h5py.File(one, "w") as f:
        f.create_dataset("id", data=np.arange(N, dtype="<i8"), chunks=(4,))
    for world, rank in ((1, 0), (2, 1)):
        kw = {"datasets": "id", "seed": 7, "rank": rank, "world_size": world}
        over_shards = PackDataset(shards, BATCH, **kw)
        over_one = PackDataset(one, BATCH, **kw)
        assert len(over_shards) == len(over_one)
        for workers in (0, 2):
            a = DataLoader(over_shards, batch_size=None, num_workers=workers)
            b = DataLoader(over_one, batch_size=None, num_workers=workers)
            for _ in range(2):  # two epochs
                got = epoch_ids(a)
                assert got == epoch_ids(b)
                assert len(got) == len(over_one)
