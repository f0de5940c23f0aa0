"""The epoch arithmetic of packread.torch (packread._epoch) without torch: the permutation of
one (seed, epoch), the cut into ranks, batches and DataLoader workers, DistributedSampler's
padding and drop_last, and the positions a saved state resumes from. One test checks, in a
subprocess, that PackDataset computes its epochs exactly so; tests/python/test_torch.py runs them
through real DataLoaders."""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
import textwrap
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from packread._epoch import (
    SHUFFLE_MODES,
    STATE_FORMAT,
    Cursor,
    EpochPlan,
    check_position,
    default_window,
    epoch_order,
    resume_point,
    worker_batches,
)
from packread.errors import InvalidArgumentError, PackreadTypeError

#: The modes whose order does not depend on shards or workers (shard mode is tested in
#: test_torch_shards.py and in src/order.rs).
ROW_MODES = [m for m in SHUFFLE_MODES if m != "shard"]

# (num_samples, batch_size, world_size): lengths that divide evenly, and lengths that do not.
EVEN = [(24, 4, 1), (24, 4, 2), (24, 2, 3), (60, 5, 4), (12, 3, 4)]
UNEVEN = [(37, 4, 1), (37, 4, 2), (37, 4, 3), (5, 2, 8), (100, 7, 3), (1, 1, 1), (10, 16, 3)]


def plans(n: int, b: int, world: int, **kw) -> list[EpochPlan]:
    """The plans of every rank."""
    return [EpochPlan(n, b, rank=r, world_size=world, **kw) for r in range(world)]


def all_batches(plan: EpochPlan, epoch: int) -> list[list[int]]:
    """The rank's whole epoch, batch by batch, as one process reads it."""
    indices = plan.rank_indices(epoch)
    return [plan.batch(indices, j).tolist() for j in range(plan.num_batches)]


def loader_order(plan: EpochPlan, epoch: int, start: int, num_workers: int) -> list[list[int]]:
    """What a DataLoader yields from ``num_workers`` workers (0: read in the main process): it
    takes one batch from each worker in turn, skipping workers that have run out."""
    workers = max(num_workers, 1)
    per_worker = [plan.worker_epoch(epoch, start, k, workers) for k in range(workers)]
    turns = itertools.zip_longest(*per_worker)
    return [b.tolist() for turn in turns for b in turn if b is not None]


def flat(batches: list[list[int]]) -> list[int]:
    return [i for b in batches for i in b]


# --------------------------------------------------------------------------------------------
# No torch


def test_importing_the_epoch_module_imports_no_torch():
    code = (
        "import sys\n"
        "import packread._epoch as e\n"
        "e.EpochPlan(10, 3, world_size=2, rank=1).worker_epoch(0, 0, 1, 2)\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------------------------
# The permutation


def test_order_is_a_permutation_fixed_by_seed_and_epoch():
    for mode in SHUFFLE_MODES:
        a = epoch_order(1000, 5, 3, mode, samples_per_chunk=8, chunk_window=4)
        assert sorted(a.tolist()) == list(range(1000))
        assert a.dtype == np.int64
        assert np.array_equal(a, epoch_order(1000, 5, 3, mode, 8, 4))
    sample = [epoch_order(1000, 5, e).tolist() for e in range(4)]
    assert len({tuple(o) for o in sample}) == 4  # each epoch a new order
    assert epoch_order(1000, 6, 0).tolist() != sample[0]  # and each seed
    assert epoch_order(1000, 5, 1 + 2**64).tolist() == sample[1]  # epochs are taken mod 2**64
    assert epoch_order(7, 5, 3, "none").tolist() == list(range(7))
    assert epoch_order(0, 5, 3).tolist() == []
    # Chunk mode over chunks of one sample is sample mode.
    assert np.array_equal(epoch_order(50, 5, 2, "chunk", 1, 3), epoch_order(50, 5, 2, "sample"))


def test_orders_are_pinned():
    """The orders PackDataset read before the epoch arithmetic moved here (a resumed run must
    visit exactly the samples it had not visited, across versions)."""
    plan = EpochPlan(10, 3, seed=7)
    assert plan.order(0).tolist() == [4, 1, 9, 2, 5, 8, 0, 7, 3, 6]
    assert plan.order(1).tolist() == [7, 3, 2, 5, 6, 9, 8, 0, 1, 4]
    assert plan.order(3).tolist() == [7, 1, 0, 4, 3, 9, 5, 2, 8, 6]
    chunked = EpochPlan(12, 2, seed=3, shuffle_mode="chunk", samples_per_chunk=3, chunk_window=2)
    assert chunked.order(0).tolist() == [11, 7, 10, 8, 9, 6, 3, 1, 4, 2, 0, 5]
    assert chunked.order(1).tolist() == [0, 11, 10, 9, 1, 2, 3, 7, 6, 4, 5, 8]


@pytest.mark.parametrize(("n", "b", "world"), EVEN + UNEVEN)
def test_every_rank_cuts_the_same_permutation(n, b, world):
    for epoch in (0, 1):
        ranks = plans(n, b, world, seed=9)
        for plan in ranks:
            assert np.array_equal(plan.order(epoch), ranks[0].order(epoch))
        blocks = np.concatenate([p.rank_indices(epoch) for p in ranks])
        order = ranks[0].order(epoch)
        # The ranks' blocks, one after the other, are the permutation (padded from its start).
        assert blocks.tolist() == (order.tolist() * (len(blocks) // max(n, 1) + 1))[: len(blocks)]
    epochs = [flat(all_batches(EpochPlan(n, b, seed=9), e)) for e in range(3)]
    if n > 3:
        assert len({tuple(e) for e in epochs}) == 3


def windows_of_chunks(order: list[int], chunk: int, window: int) -> list[list[int]]:
    """``order`` cut into windows of ``window`` whole chunks (the last window may hold fewer),
    as chunk ids in reading order; fails if ``order`` is not such a sequence."""
    n = len(order)
    size = {c: min(chunk, n - c * chunk) for c in range(-(-n // chunk))}
    windows, current = [], Counter()
    for i in order:
        current[i // chunk] += 1
        assert len(current) <= window, "a chunk of the next window began before this one ended"
        if len(current) == window and all(current[c] == size[c] for c in current):
            windows.append(list(current))
            current = Counter()
    if current:
        assert all(current[c] == size[c] for c in current), "a chunk left unfinished"
        windows.append(list(current))
    return windows


@pytest.mark.parametrize("window", [1, 2, 3])
@pytest.mark.parametrize(("n", "chunk"), [(48, 4), (50, 4), (37, 5), (9, 3)])
def test_chunk_mode_keeps_windows_of_chunks_together(n, chunk, window):
    chunks = -(-n // chunk)
    mixed = False
    for epoch in range(4):
        order = epoch_order(n, 2, epoch, "chunk", samples_per_chunk=chunk, chunk_window=window)
        assert sorted(order.tolist()) == list(range(n))
        windows = windows_of_chunks(order.tolist(), chunk, window)
        assert [len(w) for w in windows] == [window] * (chunks // window) + (
            [chunks % window] if chunks % window else []
        )
        # Within a window the samples of its chunks are shuffled together.
        runs = [c for c, _ in itertools.groupby(i // chunk for i in order.tolist())]
        mixed |= len(runs) > chunks
        if window == 1:
            assert len(runs) == chunks  # each chunk's samples one after the other
    assert mixed == (window > 1)
    # Whole chunks are shuffled, not left in file order.
    firsts = [
        list(dict.fromkeys(i // chunk for i in epoch_order(n, s, 0, "chunk", chunk, 1).tolist()))
        for s in range(4)
    ]
    assert any(f != sorted(f) for f in firsts)


# --------------------------------------------------------------------------------------------
# Ranks, batches and workers


@pytest.mark.parametrize(("n", "b", "world"), EVEN)
@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_every_index_once_per_epoch_when_it_divides(n, b, world, num_workers):
    for drop_last in (False, True) if n % (world * b) == 0 else (False,):
        for epoch in (0, 4):
            seen = []
            for plan in plans(n, b, world, seed=1, drop_last=drop_last):
                for worker in range(num_workers):
                    for batch in plan.worker_epoch(epoch, 0, worker, num_workers):
                        seen += batch.tolist()
            assert sorted(seen) == list(range(n)), (drop_last, epoch)


@pytest.mark.parametrize(("n", "b", "world"), UNEVEN)
def test_padding_repeats_indices_so_every_rank_has_the_same_batches(n, b, world):
    ranks = plans(n, b, world, seed=4)
    per_rank = -(-n // world)
    order = ranks[0].order(0).tolist()
    seen = []
    shapes = []
    for plan in ranks:
        assert plan.per_rank == per_rank
        assert plan.num_batches == -(-per_rank // b)
        batches = all_batches(plan, 0)
        assert len(batches) == plan.num_batches
        assert all(len(x) == b for x in batches[:-1])
        shapes.append([len(x) for x in batches])
        seen += flat(batches)
    assert all(s == shapes[0] for s in shapes)  # the same batches, of the same sizes, on every rank
    assert set(seen) == set(range(n))
    # DistributedSampler's padding: the permutation repeated from its start.
    assert Counter(seen) == Counter((order * (world + 1))[: per_rank * world])


@pytest.mark.parametrize(("n", "b", "world"), UNEVEN + EVEN)
def test_drop_last_drops_instead(n, b, world):
    ranks = plans(n, b, world, seed=4, drop_last=True)
    per_rank = (n // (world * b)) * b
    seen = []
    for plan in ranks:
        assert plan.per_rank == per_rank
        assert plan.num_batches == per_rank // b == n // (world * b)
        batches = all_batches(plan, 0)
        assert all(len(x) == b for x in batches)
        seen += flat(batches)
    assert len(set(seen)) == len(seen)  # nothing repeated
    assert seen == ranks[0].order(0).tolist()[: per_rank * world]  # the permutation's tail dropped


@pytest.mark.parametrize(("n", "b", "world"), UNEVEN + EVEN)
@pytest.mark.parametrize("drop_last", [False, True])
def test_lengths_are_distributed_samplers(n, b, world, drop_last):
    """``DistributedSampler`` + a batch sampler: ``ceil(N / W)`` samples per rank, or
    ``floor(N / W)``, then batches of ``B`` (the last one dropped when short)."""
    per_rank = n // world if drop_last else -(-n // world)
    want = per_rank // b if drop_last else -(-per_rank // b)
    for plan in plans(n, b, world, drop_last=drop_last):
        assert plan.num_batches == want


def test_workers_take_every_kth_batch():
    assert list(worker_batches(10, 0, 0, 3)) == [0, 3, 6, 9]
    assert list(worker_batches(10, 0, 2, 3)) == [2, 5, 8]
    assert list(worker_batches(10, 4, 1, 3)) == [5, 8]
    assert list(worker_batches(10, 10, 0, 2)) == []
    # Taken one from each worker in turn, the workers' batches are the epoch in order.
    for n, b, world in UNEVEN + EVEN:
        plan = EpochPlan(n, b, seed=3, rank=world - 1, world_size=world)
        whole = all_batches(plan, 2)
        for workers in (0, 1, 2, 3, 5):
            assert loader_order(plan, 2, 0, workers) == whole


# --------------------------------------------------------------------------------------------
# Resuming


@pytest.mark.parametrize(("n", "b", "world"), [(37, 4, 1), (37, 4, 2), (24, 2, 3), (10, 16, 3)])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("mode", ROW_MODES)
def test_resume_at_every_batch_boundary_yields_the_rest(n, b, world, drop_last, mode):
    """A state saved after ``s`` batches (``PackDataset.state_dict(batches_seen=s)``) holds a
    position in the rank's epoch, not in one worker's share, so it resumes with any number of
    workers."""
    settings = dict(
        seed=2**63 + 5,
        shuffle_mode=mode,
        samples_per_chunk=3,
        chunk_window=2,
        world_size=world,
        drop_last=drop_last,
    )
    for rank in range(world):
        plan = EpochPlan(n, b, rank=rank, **settings)
        m = plan.num_batches
        whole, following = all_batches(plan, 6), all_batches(plan, 7)
        for workers in (0, 2, 3):
            assert loader_order(plan, 6, 0, workers) == whole
        for s in range(m + 1):
            state = plan.state(6, check_position(s, m))
            assert state["format"] == STATE_FORMAT
            assert (state["epoch"], state["batches_seen"]) == (6, s)
            state = json.loads(json.dumps(state))  # saved to disk and read back
            fresh = EpochPlan(n, b, rank=rank, **{**settings, "seed": 0})
            assert fresh.mismatches(state) == []
            fresh = EpochPlan(n, b, rank=rank, **{**settings, "seed": state["seed"]})
            epoch, start = resume_point(state["epoch"], state["batches_seen"], m)
            for workers in (0, 1, 2, 3):
                rest = loader_order(fresh, epoch, start, workers)
                if s < m:
                    assert (epoch, start) == (6, s)
                    assert whole[:s] + rest == whole, (rank, s, workers)
                else:  # saved at the end of the epoch: the next one, whole
                    assert (epoch, start) == (7, 0)
                    assert rest == following


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_resume_from_the_workers_own_positions(workers):
    """torchdata's StatefulDataLoader saves each worker's next batch (``Cursor.next``) and
    which worker is next; the same number of workers resumes from there."""
    plan = EpochPlan(37, 4, seed=8, world_size=2, rank=1)
    m = plan.num_batches
    whole = all_batches(plan, 0)
    indices = plan.rank_indices(0)
    for s in range(m + 1):
        cursors = [Cursor(0, k, workers, k) for k in range(workers)]
        streams = [iter(c.positions(m)) for c in cursors]
        seen = []
        for step in range(s):  # the loader takes one batch from each worker in turn
            k = step % workers
            j = next(streams[k])
            seen.append(plan.batch(indices, j).tolist())
            cursors[k].advance(j)
        assert seen == whole[:s]
        saved = [c.next for c in cursors]
        resumed = [Cursor(0, nxt, workers, k).positions(m) for k, nxt in enumerate(saved)]
        turn = s % workers
        rest = []
        for rnd in itertools.zip_longest(*(resumed[turn:] + resumed[:turn])):
            rest += [plan.batch(indices, j).tolist() for j in rnd if j is not None]
        assert seen + rest == whole, s


def test_positions_are_checked_and_the_end_is_the_next_epoch():
    assert check_position(0, 10) == 0
    assert check_position(np.int64(10), 10) == 10
    with pytest.raises(InvalidArgumentError, match="more than the 10 batches"):
        check_position(11, 10)
    with pytest.raises(InvalidArgumentError):
        check_position(-1, 10)
    with pytest.raises(PackreadTypeError):
        check_position(True, 10)
    assert resume_point(3, 4, 10) == (3, 4)
    assert resume_point(3, 10, 10) == (4, 0)
    assert resume_point(3, 0, 0) == (4, 0)  # an epoch without batches is always over


def test_states_refuse_other_settings():
    plan = EpochPlan(37, 4, seed=1, shuffle_mode="sample", samples_per_chunk=3, chunk_window=2)
    state = plan.state(5, 2)
    assert plan.mismatches(state) == []
    # The seed, the epoch and the position come with the state.
    assert EpochPlan(37, 4, seed=99).mismatches(state) == []
    # Only chunk mode's order depends on the chunking.
    assert EpochPlan(37, 4, samples_per_chunk=5, chunk_window=7).mismatches(state) == []
    for other, name in [
        (EpochPlan(37, 5), "batch_size"),
        (EpochPlan(38, 4), "num_samples"),
        (EpochPlan(37, 4, rank=0, world_size=2), "world_size"),
        (EpochPlan(37, 4, drop_last=True), "drop_last"),
        (EpochPlan(37, 4, shuffle_mode="none"), "shuffle_mode"),
    ]:
        differ = other.mismatches(state)
        assert len(differ) == 1
        assert differ[0].startswith(f"{name}=")
    chunked = EpochPlan(37, 4, shuffle_mode="chunk", samples_per_chunk=3, chunk_window=2)
    state = chunked.state(0, 0)
    assert state["samples_per_chunk"] == 3
    assert state["chunk_window"] == 2
    assert EpochPlan(37, 4, shuffle_mode="chunk", samples_per_chunk=3, chunk_window=3).mismatches(
        state
    ) == ["chunk_window=2 (now 3)"]


# --------------------------------------------------------------------------------------------
# Settings


def test_default_window_is_what_the_chunk_cache_holds():
    one = SimpleNamespace(shape=(2, 3), dtype=np.dtype("<f4"), cache_bytes=24 * 4 * 10)
    assert default_window(one, 4) == 10  # 24-byte samples, 4 per chunk: 10 chunks
    assert default_window(one, 1) == 1
    several = SimpleNamespace(
        shape={"x": (2, 3), "y": ()},
        dtype={"x": np.dtype("<f4"), "y": np.dtype("<i8")},
        cache_bytes=32 * 4 * 10 + 5,
    )
    assert default_window(several, 4) == 10
    assert default_window(SimpleNamespace(shape=(8,), dtype=np.dtype("u1")), 4) == 1  # no cache
    assert default_window(SimpleNamespace(shape=(0,), dtype=np.dtype("u1"), cache_bytes=9), 4) == 9


def test_plans_are_checked():
    for bad in [
        dict(batch_size=0),
        dict(num_samples=-1),
        dict(world_size=0),
        dict(rank=2, world_size=2),
        dict(rank=-1, world_size=2),
        dict(shuffle_mode="random"),
        dict(samples_per_chunk=0),
        dict(chunk_window=0),
    ]:
        with pytest.raises(InvalidArgumentError):
            EpochPlan(**{"num_samples": 10, "batch_size": 2, **bad})
    with pytest.raises(PackreadTypeError):
        EpochPlan(10, 2.0)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        EpochPlan(10, 2).seed = 3  # type: ignore[misc]


# --------------------------------------------------------------------------------------------
# PackDataset computes its epochs so


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_pack_dataset_reads_these_epochs(tmp_path):
    """PackDataset (in a subprocess, this one stays torch-free): its length, order, rank
    indices, states and the batches of an in-process epoch, resumed at every batch, are the
    plan's."""
    h5py = pytest.importorskip("h5py")
    path = str(tmp_path / "ids.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("id", data=np.arange(37, dtype="<i8"), chunks=(3,))
    configs = [
        dict(batch_size=4, seed=5),
        dict(batch_size=4, seed=-1, rank=1, world_size=3),
        dict(batch_size=5, seed=2, rank=0, world_size=2, drop_last=True),
        dict(batch_size=3, seed=7, shuffle_mode="chunk", chunk_window=2),
        dict(batch_size=3, seed=7, shuffle_mode="chunk", rank=1, world_size=2),
        dict(batch_size=6, shuffle=False),
    ]
    script = textwrap.dedent(
        """
        import json, sys
        from packread.torch import PackDataset

        path, configs = sys.argv[1], json.loads(sys.argv[2])
        out = []
        for config in configs:
            ds = PackDataset(path, datasets="id", **config)
            m = len(ds)
            resumed = []
            for s in range(m + 1):
                state = ds.state_dict(batches_seen=s)
                fresh = PackDataset(path, datasets="id", **config)
                fresh.load_state_dict(state)
                resumed.append([state, [b.tolist() for b in fresh]])
            out.append(
                {
                    "len": m,
                    "seed": ds.seed,
                    "samples_per_chunk": ds.samples_per_chunk,
                    "chunk_window": ds.chunk_window,
                    "shuffle_mode": ds.shuffle_mode,
                    "orders": [ds.order(e).tolist() for e in (0, 3)],
                    "ranks": [ds.rank_indices(e).tolist() for e in (0, 3)],
                    "epochs": [[b.tolist() for b in ds] for _ in range(2)],
                    "resumed": resumed,
                }
            )
        print(json.dumps(out))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, path, json.dumps(configs)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    for config, got in zip(configs, json.loads(done.stdout.splitlines()[-1]), strict=True):
        plan = EpochPlan(
            37,
            config["batch_size"],
            seed=got["seed"],
            shuffle_mode=got["shuffle_mode"],
            samples_per_chunk=got["samples_per_chunk"],
            chunk_window=got["chunk_window"],
            rank=config.get("rank", 0),
            world_size=config.get("world_size", 1),
            drop_last=config.get("drop_last", False),
        )
        assert got["samples_per_chunk"] == 3
        assert got["seed"] == config.get("seed", 0) % 2**64
        assert got["len"] == plan.num_batches
        assert got["orders"] == [plan.order(e).tolist() for e in (0, 3)]
        assert got["ranks"] == [plan.rank_indices(e).tolist() for e in (0, 3)]
        assert got["epochs"] == [all_batches(plan, e) for e in (0, 1)]
        whole = all_batches(plan, 0)
        for s, (state, rest) in enumerate(got["resumed"]):
            assert state == plan.state(0, s)
            assert rest == (whole[s:] if s < plan.num_batches else all_batches(plan, 1))
