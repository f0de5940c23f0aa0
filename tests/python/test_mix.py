"""packread.torch.MixDataset and its torch-free arithmetic (packread._mix): proportions, the
stopping rules' exact counts, data against the sources' own reads, ranks (explicit and a real
gloo group), resume (plain DataLoader, workers, StatefulDataLoader), curricula, bad input,
pickling and transforms.

Every fixture sample's first value is a tag, ``source * 100_000 + index``, so a batch says
which sample of which source each row is; the other values are random (compared bit for bit
with h5py, numpy.load and the ZIP members' bytes)."""

from __future__ import annotations

import copy
import io
import itertools
import math
import os
import pickle
import sys
import zipfile

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import packread
from packread._mix import MixPlan, check_weights, source_epoch
from packread.errors import InvalidArgumentError, PackreadError, PackreadTypeError
from packread.torch import MixDataset, PackDataset, SourceBatch, SourceRead
from support.torchdata import (
    StatefulDataLoader,
    join_gloo,
    needs_stateful_dataloader,
    report_rank,
    run_gloo_ranks,
)

TAG = 100_000
#: The fixture sources: name, format, samples.
SIZES = {"h5": 53, "npy": 23, "zip": 11}
NAMES = list(SIZES)
WEIGHTS = [0.5, 0.3, 0.2]
SEEDS = {"h5": 11, "npy": 12, "zip": 13}


def _data(tag: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(100 + tag)
    x = rng.standard_normal((n, 3)).astype("<f4")
    x[:, 0] = tag * TAG + np.arange(n)
    return x


def write_files(folder: str) -> dict:
    """The three sources (an HDF5 file with gzip chunks, a folder of .npy files, a ZIP of raw
    members) and their data as written."""
    out = {"data": {}}
    data = {name: _data(t, n) for t, (name, n) in enumerate(SIZES.items())}
    h5 = os.path.join(folder, "a.h5")
    with h5py.File(h5, "w") as f:
        f.create_dataset("x", data=data["h5"], chunks=(4, 3), compression="gzip")
        f.create_dataset("y", data=np.arange(SIZES["h5"] * 2, dtype="<i4").reshape(-1, 2))
        f.create_dataset("empty", data=np.zeros((0, 3), "<f4"))
        f.create_dataset("wide", data=np.zeros((5, 4), "<f4"))
    npy = os.path.join(folder, "npy")
    os.makedirs(npy, exist_ok=True)
    for i, row in enumerate(data["npy"]):
        np.save(os.path.join(npy, f"s{i:03d}.npy"), row)
    zp = os.path.join(folder, "c.zip")
    with zipfile.ZipFile(zp, "w") as z:
        for i, row in enumerate(data["zip"]):
            z.writestr(f"m{i:03d}.bin", row.tobytes())
    out.update(h5=h5, npy=npy, zip=zp)
    # The reference reads, by the formats' own libraries.
    with h5py.File(h5, "r") as f:
        out["data"]["h5"] = f["x"][:]
    out["data"]["npy"] = np.stack([np.load(os.path.join(npy, f"s{i:03d}.npy")) for i in range(23)])
    with zipfile.ZipFile(zp) as z:
        out["data"]["zip"] = np.stack(
            [np.frombuffer(z.read(f"m{i:03d}.bin"), "<f4") for i in range(11)]
        )
    for name in NAMES:
        assert out["data"][name].tobytes() == data[name].tobytes()
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    return write_files(str(tmp_path_factory.mktemp("mix")))


def pack_sources(files: dict, batch_size: int = 4, **kw) -> dict[str, PackDataset]:
    return {
        "h5": PackDataset(files["h5"], batch_size, arrays="x", seed=SEEDS["h5"], **kw),
        "npy": PackDataset(files["npy"], batch_size, seed=SEEDS["npy"], **kw),
        "zip": PackDataset(
            files["zip"], batch_size, dtype="<f4", shape=(3,), seed=SEEDS["zip"], **kw
        ),
    }


def mix(files: dict, weights=None, batch_size: int = 4, **kw) -> MixDataset:
    weights = WEIGHTS if weights is None else weights
    return MixDataset(pack_sources(files, batch_size), weights, **kw)


def tags(batch) -> list[tuple[int, int]]:
    """``(source, index)`` of each row of a batch (a ``SourceBatch``'s too)."""
    if isinstance(batch, SourceBatch):
        batch = batch.batch
    return [divmod(int(v), TAG) for v in batch[:, 0].tolist()]


class Orders:
    """Each source's order per source epoch, from the public ``PackDataset.order``."""

    def __init__(self, sources: dict[str, PackDataset]) -> None:
        self.sources = list(sources.values())
        self.kept: dict[tuple[int, int], np.ndarray] = {}

    def index(self, s: int, epoch: int, position: int) -> tuple[int, int]:
        """``(pass, sample)`` at ``position`` of source ``s``'s stream in mix epoch ``epoch``."""
        n = self.sources[s].num_samples
        p, i = divmod(position, n)
        key = (s, source_epoch(epoch, p))
        if key not in self.kept:
            self.kept[key] = self.sources[s].order(key[1])
        return p, int(self.kept[key][i])


def expected_rows(plan: MixPlan, j: int, orders: Orders) -> list[tuple[int, int]]:
    """``(source, sample)`` of each row of batch ``j``, by rule 3 from ``plan.parts``."""
    rows = []
    for part in plan.parts(j):
        for pos in range(part.start, part.start + part.length):
            rows.append((part.source, orders.index(part.source, plan.epoch, pos)[1]))
    return rows


def expected_epoch(ds: MixDataset, epoch: int, sources: dict) -> list[list[tuple[int, int]]]:
    plan = ds.plan(epoch)
    orders = Orders(sources)
    return [expected_rows(plan, j, orders) for j in range(plan.num_batches)]


def read_tags(loader) -> list[list[tuple[int, int]]]:
    return [tags(b) for b in loader]


# --------------------------------------------------------------------------------------------
# 1. Proportions


PROPORTION_CASES = [
    ((1, 100_000), (0.9, 0.1)),
    ((100_000, 37, 5_000), (0.2, 0.5, 0.3)),
    ((12, 100_000, 999, 1), (0.4, 0.1, 0.3, 0.2)),
    ((1, 10, 100, 1_000, 100_000), (5, 4, 3, 2, 1)),
]


@pytest.mark.parametrize("mode", ["sample", "batch"])
@pytest.mark.parametrize(("lengths", "weights"), PROPORTION_CASES)
def test_proportions_of_100000_draws_per_rank_and_overall(lengths, weights, mode):
    n = 100_000
    w = np.asarray(check_weights(weights, [str(i) for i in range(len(lengths))]))
    assert np.isclose(w.sum(), 1)
    b = 8 if mode == "sample" else 4
    for world in (1, 2, 3, 8):
        per_rank = []
        for rank in range(world):
            plan = MixPlan(
                lengths, tuple(w), b, seed=5, mode=mode, stop=n, rank=rank, world_size=world
            )
            m = plan.num_batches
            mine = plan.rank_read(m)
            assert mine.sum() == -(-n // world), (world, rank)
            assert np.abs(mine / mine.sum() - w).max() < 0.01, (world, rank, mine)
            # Tighter: the low-discrepancy bound, within the number of sources of units.
            per_unit = 1 if mode == "sample" else b
            bound = (len(w) + 1) * per_unit / mine.sum()
            assert np.abs(mine / mine.sum() - w).max() <= bound, (world, rank, mine)
            everyone = plan.read(m)
            assert everyone.tolist() == (mine * world).tolist()
            assert np.abs(everyone / everyone.sum() - w).max() < 0.01
            per_rank.append((m, mine.tolist()))
        # Every rank: the same batches, the same sources.
        assert all(x == per_rank[0] for x in per_rank), per_rank
    # Low discrepancy: every prefix of the choices within the number of sources of its share.
    plan = MixPlan(lengths, tuple(w), b, seed=5, mode=mode, stop=n)
    units = n if mode == "sample" else plan.num_batches
    choices = plan.choices(0, units)
    assert len(choices) == units
    prefix = np.cumsum(np.eye(len(w), dtype=np.int64)[choices], axis=0)
    u = np.arange(1, units + 1)[:, None]
    assert np.abs(prefix - u * w).max() <= len(w)
    for at in (0, 1, 777, units // 2, units):
        want = prefix[at - 1] if at else np.zeros(len(w), np.int64)
        assert plan.counts_before(at).tolist() == want.tolist()
    assert plan.choices(500, 600).tolist() == choices[500:600].tolist()  # a window agrees
    # A pure function of (seed, epoch, weights): made again, the same; another seed, others.
    again = MixPlan(lengths, tuple(w), b, seed=5, mode=mode, stop=n, rank=0, world_size=3)
    assert again.choices(0, 3000).tolist() == plan.choices(0, 3000).tolist()
    reseeded = MixPlan(lengths, tuple(w), b, seed=6, mode=mode, stop=n)
    assert reseeded.choices(0, 300).tolist() != plan.choices(0, 300).tolist()


def test_choices_are_the_same_every_epoch():
    # The choices depend on (seed, weights) alone: the same every epoch, so is the length.
    w = (0.5, 0.3, 0.2)
    e0 = MixPlan((100, 100, 100), w, 4, seed=5, epoch=0, stop=1000)
    e3 = MixPlan((100, 100, 100), w, 4, seed=5, epoch=3, stop=1000)
    assert e3.choices(0, 300).tolist() == e0.choices(0, 300).tolist()


def test_proportions_counted_in_the_samples_read(files):
    sources = pack_sources(files, 20)
    ds = MixDataset(sources, {"h5": 5, "npy": 3, "zip": 2}, stop=2000, seed=3)
    assert len(ds) == 100
    counts = np.zeros(3, np.int64)
    for rows in read_tags(ds):
        for s, _ in rows:
            counts[s] += 1
    assert counts.sum() == 2000
    assert np.abs(counts / 2000 - np.array(WEIGHTS)).max() < 0.01, counts
    assert counts.tolist() == ds.plan(0).read(100).tolist()


# --------------------------------------------------------------------------------------------
# 2. Stopping rules, 4. ranks


def _rank_sets(files, world, **kw) -> tuple[list[MixDataset], list[MixPlan], dict]:
    sources = pack_sources(files)
    dss = [
        MixDataset(sources, WEIGHTS, rank=r, world_size=world, seed=7, **kw) for r in range(world)
    ]
    return dss, [d.plan(0) for d in dss], sources


def _positions(plans: list[MixPlan]) -> dict[int, list[int]]:
    """Each source's stream positions read by every rank in every batch of the epoch."""
    out: dict[int, list[int]] = {}
    for plan in plans:
        for j in range(plan.num_batches):
            for part in plan.parts(j):
                out.setdefault(part.source, []).extend(range(part.start, part.start + part.length))
    return out


def _check_read_as_planned(dss, sources) -> None:
    """Each rank's iteration reads the samples its plan says (by the tags)."""
    for ds in dss:
        ds.set_epoch(0)
        items = list(ds)
        assert [tags(b) for b in items] == expected_epoch(ds, 0, sources)
        if ds.mode == "batch":
            for j, item in enumerate(items):
                assert isinstance(item, SourceBatch)
                s = ds.plan(0).parts(j)[0].source
                assert (item.source, item.name) == (s, NAMES[s])
                assert {t[0] for t in tags(item)} == {s}


@pytest.mark.parametrize("mode", ["sample", "batch"])
@pytest.mark.parametrize("world", [1, 3])
def test_first_exhausted_reads_no_sample_twice(files, mode, world):
    dss, plans, sources = _rank_sets(files, world, mode=mode, stop="first_exhausted")
    n = plans[0].num_batches
    assert n > 0
    assert all(len(d) == n == p.num_batches for d, p in zip(dss, plans, strict=True))
    read = plans[0].read(n)
    positions = _positions(plans)
    lengths = [SIZES[k] for k in NAMES]
    orders = Orders(sources)
    for s, pos in positions.items():
        assert sorted(pos) == list(range(read[s])), s  # no gap, no repeat
        assert max(pos) < lengths[s]  # the first pass only
        idx = [orders.index(s, 0, p)[1] for p in pos]
        assert len(set(idx)) == len(idx) == read[s]
    assert (read <= lengths).all()
    # One more step would need a sample that is not there: less than a step's share unread.
    upb, per_unit = (4, 1) if mode == "sample" else (1, 4)
    after = plans[0].counts_before((n + 1) * upb) * per_unit * world
    assert any(after[s] > lengths[s] for s in range(3)), (read, after)
    _check_read_as_planned(dss, sources)


@pytest.mark.parametrize("mode", ["sample", "batch"])
@pytest.mark.parametrize("world", [1, 3])
def test_all_exhausted_reads_every_sample_and_whole_passes_are_permutations(files, mode, world):
    dss, plans, sources = _rank_sets(files, world, mode=mode, stop="all_exhausted")
    n = plans[0].num_batches
    assert all(len(d) == n == p.num_batches for d, p in zip(dss, plans, strict=True))
    read = plans[0].read(n)
    lengths = [SIZES[k] for k in NAMES]
    orders = Orders(sources)
    multi = False
    for s, pos in _positions(plans).items():
        assert sorted(pos) == list(range(read[s])), s
        assert read[s] >= lengths[s]
        passes: dict[int, list[int]] = {}
        for p in pos:
            k, i = orders.index(s, 0, p)
            passes.setdefault(k, []).append(i)
        assert set(passes[0]) == set(range(lengths[s]))
        for k, idx in passes.items():
            if (k + 1) * lengths[s] <= read[s]:  # a complete pass: each sample exactly once
                assert sorted(idx) == list(range(lengths[s])), (s, k)
            else:
                assert len(set(idx)) == len(idx)
        multi |= len(passes) > 1
    assert multi  # the smaller sources were oversampled
    # The fewest steps: one fewer leaves a source not wholly read.
    upb, per_unit = (4, 1) if mode == "sample" else (1, 4)
    before = plans[0].counts_before((n - 1) * upb) * per_unit * world
    assert any(before[s] < lengths[s] for s in range(3))
    _check_read_as_planned(dss, sources)


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("mode", ["sample", "batch"])
@pytest.mark.parametrize("world", [1, 3])
def test_stop_n_reads_n_samples(files, mode, world, drop_last):
    n_samples = 50
    dss, plans, sources = _rank_sets(files, world, mode=mode, stop=n_samples, drop_last=drop_last)
    per_rank = (n_samples // (world * 4)) * 4 if drop_last else -(-n_samples // world)
    lens = {len(d) for d in dss}
    assert lens == {-(-per_rank // 4)}
    for d, plan in zip(dss, plans, strict=True):
        rows = [plan.rows(j) for j in range(plan.num_batches)]
        assert sum(rows) == per_rank
        assert all(r == 4 for r in rows[:-1])
        assert plan.rank_read(plan.num_batches).sum() == per_rank
        with pytest.raises(IndexError):
            plan.rows(plan.num_batches)
        assert sum(len(b) for b in read_tags(d)) == per_rank
    read = plans[0].read(plans[0].num_batches)
    for s, pos in _positions(plans).items():
        assert len(set(pos)) == len(pos) == read[s]  # no stream position twice
    _check_read_as_planned(dss, sources)


@pytest.mark.parametrize("mode", ["sample", "batch"])
@pytest.mark.parametrize("world", [2, 3, 8])
def test_ranks_of_one_step_read_disjoint_ranges(mode, world):
    lengths, w = (40, 9, 300), (0.5, 0.2, 0.3)
    b = 5
    plans = [
        MixPlan(lengths, w, b, seed=1, mode=mode, stop="all_exhausted", rank=r, world_size=world)
        for r in range(world)
    ]
    m = plans[0].num_batches
    assert m > 3
    assert {p.num_batches for p in plans} == {m}
    per_unit = 1 if mode == "sample" else b
    for j in range(m):
        assert len({tuple(p.batch_sources(j).tolist()) for p in plans}) == 1  # same sources
        parts = [p.parts(j) for p in plans]
        for s in range(3):
            mine = [[q for q in ps if q.source == s] for ps in parts]
            if not mine[0]:
                assert not any(mine)
                continue
            ranges = [(q[0].start, q[0].start + q[0].length) for q in mine]
            # Rank order, touching, from W * C_s (C_s the choices before this step).
            c_before = int(plans[0].counts_before(j * plans[0].units_per_batch)[s])
            assert ranges[0][0] == world * c_before * per_unit
            for (a0, a1), (b0, b1) in itertools.pairwise(ranges):
                assert a1 == b0
                assert a1 > a0
                assert b1 > b0
    # Batch mode: every rank reads the same source at each step.
    if mode == "batch":
        for j in range(m):
            assert len({p.parts(j)[0].source for p in plans}) == 1


def test_rank_datasets_agree_on_length(files):
    for world in (2, 3):
        for stop in ("first_exhausted", "all_exhausted", 37):
            lens = {len(mix(files, rank=r, world_size=world, stop=stop)) for r in range(world)}
            assert len(lens) == 1, (world, stop, lens)


# --------------------------------------------------------------------------------------------
# 3. Data against the sources' own reads


def _expected_batch(files, plan: MixPlan, j: int, orders: Orders) -> np.ndarray:
    rows = expected_rows(plan, j, orders)
    return np.stack([files["data"][NAMES[s]][i] for s, i in rows])


@pytest.mark.parametrize("stop", ["all_exhausted", 70])
def test_sample_mode_batches_equal_the_sources_reads(files, stop):
    sources = pack_sources(files)
    ds = MixDataset(sources, WEIGHTS, stop=stop, seed=2)
    orders = Orders(sources)
    for epoch in (0, 1):
        plan = ds.plan(epoch)
        got = [b.numpy().copy() for b in ds]
        assert len(got) == plan.num_batches == len(ds)
        for j, batch in enumerate(got):
            want = _expected_batch(files, plan, j, orders)
            assert batch.dtype == want.dtype
            assert batch.shape == want.shape
            assert batch.tobytes() == want.tobytes(), (epoch, j)
            # Each source's samples together, in source order.
            src = [s for s, _ in tags(torch.from_numpy(batch))]
            assert src == sorted(src) == plan.batch_sources(j).tolist()
        # And with the readers' own batch(): the mixed rows are the sources' reads.
        for j in (0, plan.num_batches - 1):
            for part in plan.parts(j):
                reader = ds.source(NAMES[part.source])
                idx = [
                    orders.index(part.source, epoch, p)[1]
                    for p in range(part.start, part.start + part.length)
                ]
                own = np.asarray(reader.batch(np.asarray(idx)))
                assert got[j][part.row : part.row + part.length].tobytes() == own.tobytes()
    assert ds.plan(0).parts(0) != ds.plan(1).parts(0) or (
        expected_epoch(ds, 0, sources) != expected_epoch(ds, 1, sources)
    )


def test_batch_mode_source_batches_equal_the_sources_reads(files):
    sources = pack_sources(files)
    # A source of another shape is fine in batch mode.
    sources["wide"] = PackDataset(files["h5"], 4, arrays="wide", seed=1)
    ds = MixDataset(sources, [0.4, 0.3, 0.2, 0.1], mode="batch", stop="all_exhausted")
    orders = Orders(sources)
    plan = ds.plan(0)
    seen = set()
    items = list(ds)
    assert len(items) == plan.num_batches
    for j, item in enumerate(items):
        assert isinstance(item, SourceBatch)
        (part,) = plan.parts(j)
        assert item.source == part.source
        assert item.name == list(sources)[part.source]
        seen.add(item.name)
        if item.name == "wide":
            assert item.batch.shape == (part.length, 4)
            continue
        want = _expected_batch(files, plan, j, orders)
        assert item.batch.numpy().tobytes() == want.tobytes()
    assert seen == set(sources)


def test_plain_reader_sources_are_shuffled_from_the_mix_seed(files):
    # Paths and readers: no PackDataset order to compare with, so each pass must be a
    # permutation and each row the reader's own sample.
    readers = {
        "h5": packread.open(files["h5"], arrays="x"),
        "npy": files["npy"],
        "zip": packread.open(files["zip"], dtype="<f4", shape=(3,)),
    }
    ds = MixDataset(readers, WEIGHTS, batch_size=4, stop="all_exhausted", seed=4)
    batches = [b.numpy().copy() for b in ds]
    streams: dict[int, list[int]] = {0: [], 1: [], 2: []}
    for b in batches:
        for row, (s, i) in zip(b, tags(torch.from_numpy(b)), strict=True):
            assert row.tobytes() == files["data"][NAMES[s]][i].tobytes()
            streams[s].append(i)
    plan = ds.plan(0)
    assert [len(v) for v in streams.values()] == plan.read(plan.num_batches).tolist()
    for s, idx in streams.items():
        n = SIZES[NAMES[s]]
        first = idx[:n]
        assert sorted(first) == list(range(n))
        assert first != list(range(n))  # shuffled
    other = MixDataset(readers, WEIGHTS, batch_size=4, stop="all_exhausted", seed=5)
    assert read_tags(other) != [tags(torch.from_numpy(b)) for b in batches]
    unshuffled = MixDataset(readers, WEIGHTS, batch_size=4, shuffle=False)
    firsts = [i for b in read_tags(unshuffled) for s, i in b if s == 0]
    assert firsts == list(range(len(firsts)))


# --------------------------------------------------------------------------------------------
# 5. Resume


def _points(m: int) -> list[int]:
    pts = sorted({1, 2, 3, m // 4, m // 3, m // 2, 2 * m // 3, m - 3, m - 2, m - 1})
    assert len(pts) == 10, (m, pts)
    return pts


def _resume_ds(files, **kw) -> MixDataset:
    return mix(files, stop="all_exhausted", seed=21, **kw)


def _whole_epoch1(files) -> list:
    ds = _resume_ds(files)
    ds.set_epoch(1)
    return read_tags(ds)


def test_resume_in_the_main_process_at_ten_points(files):
    whole = _whole_epoch1(files)
    m = len(whole)
    for k in _points(m):
        run = _resume_ds(files)
        assert len(read_tags(run)) == m  # epoch 0
        it = iter(run)
        seen = [tags(next(it)) for _ in range(k)]
        state = run.state_dict()
        assert (state["epoch"], state["batches_seen"]) == (1, k)
        del it
        fresh = _resume_ds(files)
        fresh.load_state_dict(state)
        assert len(fresh) == m
        rest = read_tags(fresh)
        assert seen + rest == whole, k
        assert read_tags(fresh) == expected_epoch(fresh, 2, pack_sources(files))  # then epoch 2


def test_resume_with_two_workers_and_batches_seen(files):
    whole = _whole_epoch1(files)
    m = len(whole)
    for k in _points(m):
        run = _resume_ds(files)
        loader = DataLoader(run, batch_size=None, num_workers=2)
        assert len(read_tags(loader)) == m
        seen = []
        for b in loader:
            seen.append(tags(b))
            if len(seen) == k:
                break
        with pytest.raises(InvalidArgumentError, match="batches_seen"):
            run.state_dict()
        state = run.state_dict(batches_seen=k)
        del loader
        fresh = _resume_ds(files)
        fresh.load_state_dict(state)
        rest = read_tags(DataLoader(fresh, batch_size=None, num_workers=2))
        assert seen + rest == whole, k


@needs_stateful_dataloader
@pytest.mark.parametrize("workers", [0, 2])
def test_resume_with_stateful_dataloader(files, workers):
    whole = _whole_epoch1(files)
    m = len(whole)
    for k in _points(m):
        run = _resume_ds(files)
        loader = StatefulDataLoader(run, batch_size=None, num_workers=workers)
        assert len(read_tags(loader)) == m
        it = iter(loader)
        seen = [tags(next(it)) for _ in range(k)]
        state = loader.state_dict()
        del it, loader
        fresh = _resume_ds(files)
        loader = StatefulDataLoader(fresh, batch_size=None, num_workers=workers)
        loader.load_state_dict(state)
        rest = read_tags(loader)
        assert seen + rest == whole, (workers, k)


@needs_stateful_dataloader
def test_a_stateful_dataloader_state_needs_the_same_workers(files):
    loader = StatefulDataLoader(_resume_ds(files), batch_size=None, num_workers=2)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    del it, loader
    other = StatefulDataLoader(_resume_ds(files), batch_size=None, num_workers=1)
    other.load_state_dict(state)
    with pytest.raises(InvalidArgumentError, match="resume with the same num_workers"):
        list(other)


def test_resume_with_another_number_of_workers(files):
    whole = _whole_epoch1(files)
    m = len(whole)
    k = m // 2
    # Saved in the main process, resumed with two workers.
    run = _resume_ds(files)
    read_tags(run)
    it = iter(run)
    seen = [tags(next(it)) for _ in range(k)]
    state = run.state_dict()
    fresh = _resume_ds(files)
    fresh.load_state_dict(state)
    assert seen + read_tags(DataLoader(fresh, batch_size=None, num_workers=2)) == whole
    # Saved with two workers (batches_seen), resumed in the main process.
    run = _resume_ds(files)
    loader = DataLoader(run, batch_size=None, num_workers=2)
    read_tags(loader)
    read_tags(loader)  # epoch 1, whole; the state says where a loop stopped in it
    state = run.state_dict(batches_seen=k)
    assert state["epoch"] == 1
    fresh = _resume_ds(files)
    fresh.load_state_dict(state)
    assert whole[:k] + read_tags(fresh) == whole


def test_the_saved_epochs_weights_come_back(files):
    run = _resume_ds(files, weights=[1, 1, 1])
    run.set_weights([6, 3, 1])
    want = _resume_ds(files, weights=[6, 3, 1])
    whole = read_tags(want)
    it = iter(run)
    seen = [tags(next(it)) for _ in range(3)]
    state = run.state_dict()
    assert state["weights"] == pytest.approx([0.6, 0.3, 0.1])
    fresh = _resume_ds(files, weights=[1, 1, 1])
    fresh.load_state_dict(state)
    assert len(fresh) == len(whole)
    assert fresh.realised()["h5"].weight == pytest.approx(0.6)
    assert seen + read_tags(fresh) == whole
    # Fixed weights: the state's stay for the epochs after.
    assert fresh.plan(1).weights == pytest.approx((0.6, 0.3, 0.1))
    assert read_tags(fresh) == expected_epoch(want, 1, pack_sources(files))


def ramp(epoch: int) -> list[float]:
    """A curriculum (module level, so that spawned processes can unpickle it): the npy source
    from epoch 1 on, the zip source never."""
    return [1.0, float(epoch), 0.0]


def test_resume_under_a_weight_function(files):
    ds = _resume_ds(files, weights=ramp)
    ds.set_epoch(1)
    whole = read_tags(ds)
    run = _resume_ds(files, weights=ramp)
    run.set_epoch(1)
    it = iter(run)
    seen = [tags(next(it)) for _ in range(2)]
    state = run.state_dict()
    fresh = _resume_ds(files, weights=ramp)
    fresh.load_state_dict(state)
    assert seen + read_tags(fresh) == whole
    assert fresh.plan(2).weights == pytest.approx((1 / 3, 2 / 3, 0))  # the function's again
    sources = pack_sources(files)
    assert read_tags(fresh) == expected_epoch(_resume_ds(files, weights=ramp), 2, sources)


# --------------------------------------------------------------------------------------------
# 6. A real gloo group


def gloo_sources(files: dict) -> dict[str, PackDataset]:
    return pack_sources(files)


def gloo_rank(rank: int, world: int, port: int, files: dict, out_dir: str) -> None:
    """One rank of a 2-process gloo group (file:// rendezvous, loopback only): reads epoch 0
    with two workers, then resumes it at its middle in a fresh dataset."""
    import torch.distributed as dist

    join_gloo(out_dir, rank, world)
    try:
        ds = MixDataset(gloo_sources(files), WEIGHTS, seed=31)
        full = read_tags(DataLoader(ds, batch_size=None, num_workers=2))
        counts = [None] * world
        dist.all_gather_object(counts, len(full))
        k = len(full) // 2
        state = ds.state_dict(batches_seen=k)
        fresh = MixDataset(gloo_sources(files), WEIGHTS, seed=31)
        fresh.load_state_dict(state)
        rest = read_tags(DataLoader(fresh, batch_size=None, num_workers=2))
        plan = ds.plan(0)
        result = {
            "rank": rank,
            "len": len(ds),
            "counts": counts,
            "full": full,
            "rest": rest,
            "k": k,
            "rank_read": plan.rank_read(plan.num_batches).tolist(),
            "world": plan.world_size,
        }
        report_rank(out_dir, rank, result)
    finally:
        dist.destroy_process_group()
        sys.stdout.flush()


def test_two_ranks_in_a_gloo_group(files, tmp_path):
    ranks = run_gloo_ranks(gloo_rank, 2, str(tmp_path), files_paths(files), str(tmp_path))
    sources = pack_sources(files)
    lens = [r["len"] for r in ranks]
    assert lens[0] == lens[1] > 0
    assert ranks[0]["counts"] == ranks[1]["counts"] == lens
    assert all(r["world"] == 2 for r in ranks)
    for r in ranks:
        full = [[tuple(x) for x in b] for b in r["full"]]
        rest = [[tuple(x) for x in b] for b in r["rest"]]
        assert len(full) == r["len"]
        assert full[r["k"] :] == rest  # resumed mid-epoch: the same batches
        twin = MixDataset(sources, WEIGHTS, seed=31, rank=r["rank"], world_size=2)
        assert full == expected_epoch(twin, 0, sources)
        counts = np.bincount([s for b in full for s, _ in b], minlength=3)
        assert counts.tolist() == r["rank_read"]
        assert np.abs(counts / counts.sum() - np.array(WEIGHTS)).max() < 0.05
    # first_exhausted: one pass, so no sample is read by both ranks (nor twice by one).
    both = [tuple(x) for r in ranks for b in r["full"] for x in b]
    assert len(both) == len(set(both))
    # Rank 0 and rank 1 read the same sources at each step.
    src = [[[x[0] for x in b] for b in r["full"]] for r in ranks]
    assert src[0] == src[1]


def files_paths(files: dict) -> dict:
    return {k: v for k, v in files.items() if k != "data"}


# --------------------------------------------------------------------------------------------
# 7. Curriculum and realised()


def _counts(batches, n=3) -> list[int]:
    return np.bincount([s for b in batches for s, _ in b], minlength=n).tolist()


def test_set_weights_applies_from_the_next_epoch(files):
    ds = mix(files, stop=60, seed=4)
    it = iter(ds)
    head = [tags(next(it)) for _ in range(2)]
    ds.set_weights({"h5": 0, "npy": 1, "zip": 1})
    assert ds.realised()["h5"].weight == pytest.approx(0.5)  # the epoch being read keeps its own
    epoch0 = head + [tags(b) for b in it]
    old = MixPlan((53, 23, 11), tuple(WEIGHTS), 4, seed=ds.seed, stop=60)
    assert _counts(epoch0) == old.read(old.num_batches).tolist()
    assert _counts(epoch0)[0] > 0
    epoch1 = read_tags(ds)
    counts = _counts(epoch1)
    assert counts[0] == 0
    assert sum(counts) == 60
    assert counts == ds.plan(1).read(len(ds)).tolist()
    real = ds.realised()
    assert real["h5"].weight == 0
    assert real["npy"].weight == pytest.approx(0.5)
    assert [real[k].samples for k in NAMES] == counts


def test_plan_of_the_epoch_being_read_keeps_its_weights(files):
    ds = mix(files, stop=60, seed=4)
    it = iter(ds)
    first = tags(next(it))
    ds.set_weights([0, 1, 1])
    assert ds.realised()["h5"].weight == pytest.approx(0.5)
    # The plan of the epoch being read keeps that epoch's weights after set_weights.
    assert ds.plan(0).weights == pytest.approx(tuple(WEIGHTS))
    assert expected_epoch(ds, 0, pack_sources(files))[0] == first


def test_a_weight_function_in_workers(files):
    ds = mix(files, weights=ramp, stop=40, seed=6)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    sources = pack_sources(files)
    for epoch in range(3):
        got = read_tags(loader)
        counts = _counts(got)
        assert counts[2] == 0  # weight 0 throughout
        if epoch == 0:
            assert counts[1] == 0
        else:
            assert counts[1] > 0
        assert counts == ds.plan(epoch).read(len(got)).tolist()
        assert got == expected_epoch(ds, epoch, sources)
        real = ds.realised(batches_seen=len(got))
        assert [real[k].samples for k in NAMES] == counts
        assert real["npy"].weight == pytest.approx(epoch / (1 + epoch))
    assert ds.state_dict(batches_seen=0)["epoch"] == 2


@pytest.mark.parametrize("stop", ["first_exhausted", "all_exhausted", 40])
def test_weight_zero_turns_a_source_off(files, stop):
    ds = mix(files, weights={"h5": 0, "npy": 2, "zip": 1}, stop=stop)
    got = read_tags(ds)
    assert got
    assert _counts(got)[0] == 0
    if stop == "all_exhausted":  # the zero-weight source does not hold the epoch up
        assert _counts(got)[1] >= 23
        assert _counts(got)[2] >= 11


def test_realised_counts_the_batches_that_arrived_from_workers(files):
    ds = mix(files, stop="all_exhausted", seed=8)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    got = []
    for b in loader:
        got.append(tags(b))
        real = ds.realised()
        # The loader reads ahead of the loop: at least what the loop has.
        assert all(real[n].samples >= c for n, c in zip(NAMES, _counts(got), strict=True))
        assert ds.realised(batches_seen=len(got)) == {
            n: SourceRead(
                n,
                pytest.approx(WEIGHTS[i]),
                _counts(got)[i],
                pytest.approx(_counts(got)[i] / sum(_counts(got))),
                _counts(got)[i],
                SIZES[n],
                pytest.approx(_counts(got)[i] / SIZES[n]),
            )
            for i, n in enumerate(NAMES)
        }
    assert [ds.realised()[n].samples for n in NAMES] == _counts(got)  # the whole epoch
    read_tags(loader)  # epoch 1
    assert [ds.realised()[n].samples for n in NAMES] == ds.plan(1).read(len(ds)).tolist()


def test_realised_matches_the_counted_sources(files):
    ds = mix(files, stop="all_exhausted", seed=8)
    assert math.isnan(ds.realised()["h5"].fraction)
    it = iter(ds)
    got = []
    for k in range(1, len(ds) + 1):
        got.append(tags(next(it)))
        real = ds.realised()
        counts = _counts(got)
        assert [real[n].samples for n in NAMES] == counts
        assert [real[n].rank_samples for n in NAMES] == counts
        assert sum(r.fraction for r in real.values()) == pytest.approx(1)
        assert real == ds.realised(batches_seen=k)
    for n, r in ds.realised().items():
        assert isinstance(r, SourceRead)
        assert r.name == n
        assert r.num_samples == SIZES[n]
        assert r.passes == pytest.approx(r.samples / SIZES[n])
        assert r.passes >= 1
        assert r.weight == pytest.approx(WEIGHTS[NAMES.index(n)])
    # Ranks: all ranks' samples and this rank's.
    ranked = mix(files, stop="all_exhausted", seed=8, rank=1, world_size=3)
    got = read_tags(ranked)
    real = ranked.realised()
    assert [real[n].rank_samples for n in NAMES] == _counts(got)
    assert [real[n].samples for n in NAMES] == [3 * c for c in _counts(got)]


# --------------------------------------------------------------------------------------------
# 8. Bad input


@pytest.mark.parametrize(
    ("weights", "error", "phrase"),
    [
        ([-1, 1, 1], InvalidArgumentError, "weight of 'h5' is -1.0"),
        ([1, math.nan, 1], InvalidArgumentError, "weight of 'npy' is nan"),
        ([1, 1, math.inf], InvalidArgumentError, "finite"),
        ([0, 0, 0], InvalidArgumentError, "all zero"),
        ([1, 1], InvalidArgumentError, "2 weights for 3 sources"),
        ({"h5": 1, "npy": 1, "zip": 1, "tar": 1}, InvalidArgumentError, "unknown ['tar']"),
        ({"h5": 1, "npy": 1}, InvalidArgumentError, "missing ['zip']"),
        ([1, "2", 1], PackreadTypeError, "must be a number"),
        ("111", PackreadTypeError, "weights must be"),
        (lambda e: [0, 0, 0], InvalidArgumentError, "all zero"),
    ],
)
def test_bad_weights(files, weights, error, phrase):
    with pytest.raises(error) as info:
        mix(files, weights=weights)
    assert phrase in str(info.value)
    if not callable(weights):
        ds = mix(files)
        with pytest.raises(error) as info:
            ds.set_weights(weights)
        assert phrase in str(info.value)


def test_incompatible_schemas_in_sample_mode(files):
    sources = pack_sources(files)
    wide = PackDataset(files["h5"], 4, arrays="wide")
    with pytest.raises(InvalidArgumentError) as info:
        MixDataset({"h5": sources["h5"], "wide": wide}, [1, 1])
    msg = str(info.value)
    assert "'wide'" in msg
    assert "'h5'" in msg
    assert "(4,)" in msg
    assert "(3,)" in msg
    ints = PackDataset(files["h5"], 4, arrays="y")
    with pytest.raises(InvalidArgumentError) as info:
        MixDataset({"npy": sources["npy"], "ints": ints}, [1, 1])
    msg = str(info.value)
    assert "'ints'" in msg
    assert "'npy'" in msg
    assert "int32" in msg
    assert "float32" in msg
    keyed = PackDataset(files["h5"], 4, arrays=["x", "y"])
    with pytest.raises(InvalidArgumentError, match=r"'keyed'.*'x'.*'zip'"):
        MixDataset({"zip": sources["zip"], "keyed": keyed}, [1, 1])
    # Batch mode takes them.
    assert len(MixDataset({"h5": sources["h5"], "wide": wide}, [1, 1], mode="batch")) > 0


def test_states_of_another_mixture_are_refused(files):
    ds = mix(files)
    it = iter(ds)
    next(it), next(it)
    state = ds.state_dict()
    assert state["batches_seen"] == 2
    mix(files).load_state_dict(copy.deepcopy(state))  # its own kind: fine
    for other, phrase in [
        (mix(files, seed=1), "seed=0 (now 1)"),
        (mix(files, batch_size=5), "batch_size=4 (now 5)"),
        (mix(files, stop=30), "stop="),
        (mix(files, mode="batch"), "mode="),
        (mix(files, rank=0, world_size=2), "world_size=1 (now 2)"),
        (MixDataset(dict(reversed(pack_sources(files).items())), WEIGHTS), "sources="),
        (
            MixDataset(
                {**pack_sources(files), "npy": PackDataset(files["npy"], 4, seed=99)}, WEIGHTS
            ),
            "sources=",
        ),
    ]:
        with pytest.raises(InvalidArgumentError, match="another mixture") as info:
            other.load_state_dict(copy.deepcopy(state))
        assert phrase in str(info.value)
    tampered = copy.deepcopy(state)
    tampered["sources"][1]["samples_read"] += 1
    with pytest.raises(InvalidArgumentError, match="samples read per source"):
        mix(files).load_state_dict(tampered)
    beyond = copy.deepcopy(state)
    beyond["batches_seen"] = 10**6
    with pytest.raises(InvalidArgumentError, match="batches"):
        mix(files).load_state_dict(beyond)


@pytest.mark.parametrize(
    "state",
    [None, [1, 2], "state", {}, {"format": "packread.PackDataset/1"}, {"epoch": 0}],
    ids=["none", "list", "str", "empty", "other-format", "no-format"],
)
def test_not_a_mix_state(files, state):
    with pytest.raises(InvalidArgumentError, match="not a MixDataset state_dict"):
        mix(files).load_state_dict(state)


def test_a_pack_dataset_state_is_not_a_mix_state(files):
    pd = pack_sources(files)["h5"]
    with pytest.raises(InvalidArgumentError, match="not a MixDataset state_dict"):
        mix(files).load_state_dict(pd.state_dict())


@pytest.mark.parametrize("missing", ["seed", "weights", "epoch", "sources"])
def test_a_state_missing_a_key_is_a_clear_error(files, missing):
    state = mix(files).state_dict()
    del state[missing]
    # A state lacking a key is a packread error that names it, not a bare KeyError.
    with pytest.raises(PackreadError) as info:
        mix(files).load_state_dict(state)
    assert missing in str(info.value)


def test_a_state_missing_samples_read_is_a_clear_error(files):
    state = mix(files).state_dict()
    del state["sources"][0]["samples_read"]
    # The sources' settings are compared without samples_read; its absence is named.
    with pytest.raises(PackreadError, match="samples_read"):
        mix(files).load_state_dict(state)


def test_an_empty_source_with_a_weight(files):
    sources = pack_sources(files)
    empty = PackDataset(files["h5"], 4, arrays="empty")
    with pytest.raises(InvalidArgumentError, match="'e' has no samples but a weight"):
        MixDataset({**sources, "e": empty}, [1, 1, 1, 1])
    ds = MixDataset({**sources, "e": empty}, [1, 1, 1, 0])  # off: fine
    assert len(ds) > 0
    assert all(s != 3 for b in read_tags(ds) for s, _ in b)
    with pytest.raises(InvalidArgumentError, match="'e' has no samples but a weight"):
        ds.set_weights([1, 1, 1, 1])


def _empty_later(epoch: int) -> list[float]:
    return [1.0, 1.0, 1.0, float(epoch)]


@pytest.mark.parametrize("stop", [40, "all_exhausted"])
def test_a_weight_function_giving_an_empty_source_a_weight_later(files, stop):
    sources = pack_sources(files)
    empty = PackDataset(files["h5"], 4, arrays="empty")
    ds = MixDataset({**sources, "e": empty}, _empty_later, stop=stop)
    assert len(read_tags(ds)) > 0  # epoch 0: weight 0
    # Epoch 1 gives the empty source a weight: refused when that epoch's weights are made,
    # not a ZeroDivisionError while reading it.
    with pytest.raises(InvalidArgumentError, match="'e' has no samples"):
        read_tags(ds)


def test_batch_size_needed(files):
    with pytest.raises(InvalidArgumentError, match=r"give batch_size.*\['0', '1'\]"):
        MixDataset([files["npy"], packread.open(files["h5"], arrays="x")], [1, 1])
    sources = pack_sources(files)
    with pytest.raises(InvalidArgumentError, match=r"give batch_size.*\['path'\]"):
        MixDataset({"h5": sources["h5"], "path": files["npy"]}, [1, 1])
    ds = MixDataset({"h5": sources["h5"], "path": files["npy"]}, [1, 1], batch_size=3)
    assert ds.batch_size == 3
    assert next(iter(ds)).shape == (3, 3)
    assert mix(files).batch_size == 4  # the PackDatasets'


def test_pack_dataset_batch_sizes_differ(files):
    sources = pack_sources(files)
    sources["npy"] = PackDataset(files["npy"], 5)
    with pytest.raises(InvalidArgumentError, match="batch sizes differ") as info:
        MixDataset(sources, WEIGHTS)
    assert "'npy': 5" in str(info.value)
    assert "'h5': 4" in str(info.value)
    ds = MixDataset(sources, WEIGHTS, batch_size=6)
    assert {len(b) for b in read_tags(ds)} == {6}


def test_other_bad_arguments(files):
    sources = pack_sources(files)
    for kw, error, phrase in [
        ({"mode": "mixed"}, InvalidArgumentError, "mode must be one of"),
        ({"stop": "never"}, InvalidArgumentError, "stop must be one of"),
        ({"stop": 0}, InvalidArgumentError, "stop must be >= 1"),
        ({"batch_size": 0}, InvalidArgumentError, "batch_size"),
        ({"rank": 2, "world_size": 2}, InvalidArgumentError, "not in range"),
        ({"rank": 0}, InvalidArgumentError, "both rank and world_size"),
        ({"transform": 3}, PackreadTypeError, "callable"),
    ]:
        with pytest.raises(error, match=phrase):
            MixDataset(sources, WEIGHTS, **kw)
    with pytest.raises(InvalidArgumentError, match="at least one source"):
        MixDataset([], [])
    with pytest.raises(PackreadTypeError, match="sources must be"):
        MixDataset(files["npy"], [1])
    with pytest.raises(PackreadTypeError, match="TensorDataset"):
        MixDataset([torch.utils.data.TensorDataset(torch.zeros(3))], [1], batch_size=2)


# --------------------------------------------------------------------------------------------
# 9. Pickling, transforms


@pytest.mark.parametrize("mode", ["sample", "batch"])
def test_a_pickled_mixture_reads_the_same_epoch(files, mode):
    sources = pack_sources(files)
    want = read_tags(MixDataset(sources, WEIGHTS, mode=mode, stop=45, seed=9))
    ds = MixDataset(sources, WEIGHTS, mode=mode, stop=45, seed=9)
    copy_ = pickle.loads(pickle.dumps(ds))
    got = list(copy_)
    assert [tags(b) for b in got] == want
    if mode == "batch":
        assert all(isinstance(b, SourceBatch) for b in got)
    assert len(copy_) == len(ds)
    assert copy_.names == NAMES
    assert pickle.loads(pickle.dumps(ds)).plan(0).parts(1) == ds.plan(0).parts(1)


def keyed_to_array(batch):
    """h5 ``{"x", "y"}`` batches to the array schema of the others: x doubled."""
    return batch["x"] * 2


def plus_half(batch):
    return batch + 0.5


SEEN_ROWS: list[int] = []


def whole_batch(batch):
    SEEN_ROWS.append(len(batch))
    return {"x": batch, "rows": len(batch)}


def test_transforms_per_source_and_of_the_whole_batch(files):
    keyed = PackDataset(files["h5"], 4, arrays=["x", "y"], seed=1, transform=keyed_to_array)
    npy = PackDataset(files["npy"], 4, seed=2, transform=plus_half)
    zp = PackDataset(files["zip"], 4, dtype="<f4", shape=(3,), seed=3)
    sources = {"keyed": keyed, "npy": npy, "zip": zp}
    SEEN_ROWS.clear()
    ds = MixDataset(sources, WEIGHTS, stop=30, transform=whole_batch)
    plan = ds.plan(0)
    got = list(ds)
    assert SEEN_ROWS == [plan.rows(j) for j in range(plan.num_batches)] == [4] * 7 + [2]
    orders = Orders(sources)
    data = files["data"]
    for j, item in enumerate(got):
        assert item["rows"] == plan.rows(j)
        want = []
        for s, i in expected_rows(plan, j, orders):
            row = data[NAMES[s]][i]
            want.append(row * np.float32(2) if s == 0 else row + np.float32(0.5) if s == 1 else row)
        assert item["x"].numpy().tobytes() == np.stack(want).astype("<f4").tobytes(), j
    # The same through two workers.
    ds.set_epoch(0)
    workers = [b["x"].clone() for b in DataLoader(ds, batch_size=None, num_workers=2)]
    ds2 = MixDataset(sources, WEIGHTS, stop=30, transform=whole_batch)
    assert all(torch.equal(a, b["x"]) for a, b in zip(workers, list(ds2), strict=True))


def test_sample_mode_mixes_byte_orders(files, tmp_path):
    # A big-endian ZIP source with little-endian ones: same dtype by name, values right.
    be = str(tmp_path / "be.zip")
    with zipfile.ZipFile(be, "w") as z:
        for i, row in enumerate(files["data"]["zip"]):
            z.writestr(f"m{i:03d}.bin", row.astype(">f4").tobytes())
    sources = pack_sources(files)
    sources["zip"] = PackDataset(be, 4, dtype=">f4", shape=(3,), seed=SEEDS["zip"])
    ds = MixDataset(sources, WEIGHTS, stop="all_exhausted")
    plan, orders = ds.plan(0), Orders(sources)
    for j, b in enumerate(ds):
        want = _expected_batch(files, plan, j, orders)
        assert np.array_equal(b.numpy(), want), j


# --------------------------------------------------------------------------------------------
# One job a batch: packread's readers' pieces read together


def test_a_mixed_batch_is_one_read_of_every_source(files, monkeypatch):
    """packread's readers' pieces of a batch go to the pool as one job (read_together), and
    what it reads equals the sources' own reads."""
    import packread.torch._mixture as mixture

    calls = []
    real = mixture.read_together

    def counting(reads, value):
        calls.append(len(reads))
        return real(reads, value)

    monkeypatch.setattr(mixture, "read_together", counting)
    ds = mix(files, stop=40)
    got = [b.clone() for b in ds]
    assert len(calls) == len(got) == 10
    assert max(calls) == 3  # three sources in a batch, one job
    sources = pack_sources(files)
    assert [tags(b) for b in got] == expected_epoch(ds, 0, sources)


def test_image_sources_with_labels_in_one_job(tmp_path):
    """Images decoded to one size, with labels held in memory (taken as the batch starts),
    from a ZIP and an ImageFolder tree: each batch equals the sources' own reads."""
    from PIL import Image

    rng = np.random.default_rng(3)
    zp = tmp_path / "a.zip"
    with zipfile.ZipFile(zp, "w") as z:
        for i in range(10):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(buf, "PNG")
            z.writestr(f"{'ab'[i % 2]}/{i:02d}.png", buf.getvalue())
    for c in "xyz":
        (tmp_path / "tree" / c).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(
                tmp_path / "tree" / c / f"{i}.png"
            )
    decode = packread.ImageDecode(8)
    a = PackDataset(str(zp), 4, decode=decode, seed=1)
    b = PackDataset(str(tmp_path / "tree"), 4, decode=decode, seed=2)
    ds = MixDataset({"zip": a, "tree": b}, [0.5, 0.5], stop=24)
    plan = ds.plan(0)
    for j, batch in enumerate(ds):
        want = []
        for part in plan.parts(j):
            src = (a, b)[part.source]
            n = src.num_samples
            idx = [
                int(src.order(source_epoch(0, p // n))[p % n])
                for p in range(part.start, part.start + part.length)
            ]
            want.append(src.reader.batch(idx))
        assert torch.equal(
            batch["images"], torch.from_numpy(np.concatenate([w["images"] for w in want]))
        )
        assert batch["labels"].tolist() == np.concatenate([w["labels"] for w in want]).tolist()


def test_a_damaged_member_fails_the_mixed_batch(files, tmp_path):
    """A ZIP member whose bytes no longer match its CRC: the batch that reads it raises the
    ZIP reader's error through the mixture (one job, its first failure)."""
    with open(files["zip"], "rb") as f:
        data = bytearray(f.read())
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(files["zip"]) as z:
        info = z.getinfo("m000.bin")
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start] ^= 0xFF
    bad.write_bytes(bytes(data))
    sources = pack_sources(files)
    sources["zip"] = PackDataset(str(bad), 4, dtype="<f4", shape=(3,), seed=SEEDS["zip"])
    ds = MixDataset(sources, WEIGHTS, stop="all_exhausted")
    with pytest.raises(PackreadError, match="CRC"):
        for _ in ds:
            pass


def test_samples_that_do_not_decode_are_reported_per_source(tmp_path):
    """A damaged image in one source read with on_error="skip", in DataLoader workers: the
    mixture's errors name the source and the sample, and a warning in this process says so."""
    from PIL import Image

    rng = np.random.default_rng(4)
    zp = tmp_path / "imgs.zip"
    with zipfile.ZipFile(zp, "w") as z:
        for i in range(8):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (12, 12, 3), dtype=np.uint8)).save(buf, "PNG")
            data = buf.getvalue()
            if i == 5:
                data = data[:40]  # cut short: does not decode
            z.writestr(f"{'ab'[i % 2]}/{i:02d}.png", data)
    decode = packread.ImageDecode(8)
    good = PackDataset(str(zp), 4, decode=decode, on_error="skip", seed=1)
    other = PackDataset(str(zp), 4, decode=decode, on_error="skip", seed=2)
    bad = list(good.reader.names()).index("b/05.png")
    ds = MixDataset({"first": good, "second": other}, [1, 0], stop=8)
    with pytest.warns(RuntimeWarning, match="MixDataset source 'first'"):
        batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert sum(len(b["labels"]) for b in batches) == 8
    assert list(ds.errors) == ["first"]
    assert list(ds.errors["first"]) == [bad]
