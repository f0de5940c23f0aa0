"""Recycled batch memory: the buffer pool and the shared slabs of DataLoader workers (a dropped
batch's memory is written again, a held one never), PackDataset over both (every start
method, persistent workers on and off, abandoned epochs, batches held past the slabs), and
pinned memory / device copies (skipped without a CUDA device)."""

from __future__ import annotations

import gc
import warnings

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from packread._packread import SLAB_HEADER, BufferPool, SharedSlab, slab_bytes
from packread.errors import InvalidArgumentError
from packread.torch import PackDataset, _buffers

N = 96
SAMPLE = (16, 64)
NO_CUDA = "no CUDA device here: pinned memory and device copies need one"


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> str:
    """96 samples of 16x64 uint8 (one a chunk) and their int64 labels."""
    path = str(tmp_path_factory.mktemp("buffers") / "images.h5")
    rng = np.random.default_rng(7)
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "images", data=rng.integers(0, 256, (N, *SAMPLE), dtype="u1"), chunks=(1, *SAMPLE)
        )
        f.create_dataset("labels", data=np.arange(N, dtype="<i8") * 3)
    return path


def reference(path: str) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        return {"images": f["images"][:], "labels": f["labels"][:]}


def check_epoch(batches: list, ds: PackDataset, epoch: int, ref: dict[str, np.ndarray]) -> None:
    """Every batch equals the reference rows of its place in the epoch."""
    idx = ds.rank_indices(epoch)
    b = ds.batch_size
    assert len(batches) == len(ds)
    for j, batch in enumerate(batches):
        rows = idx[j * b : (j + 1) * b]
        assert np.array_equal(batch["images"].numpy(), ref["images"][rows]), (epoch, j)
        assert np.array_equal(batch["labels"].numpy(), ref["labels"][rows]), (epoch, j)


# --------------------------------------------------------------------------------------------
# The pool


SPEC = [((16, 8), np.dtype("<f4"))]


def test_pool_reuses_a_dropped_buffer_never_a_held_one():
    pool = BufferPool(keep=2)
    (a,) = pool.arrays(SPEC)
    a[:] = 1
    ptr = a.ctypes.data
    view, tensor = a[3:5], torch.from_numpy(a)
    del a
    (b,) = pool.arrays(SPEC)  # a view and a tensor hold the first buffer
    assert b.ctypes.data != ptr
    del view
    (c,) = pool.arrays(SPEC)  # the tensor still does
    assert c.ctypes.data != ptr
    b[:] = 2
    c[:] = 3
    assert bool((tensor == 1).all())
    del tensor
    (d,) = pool.arrays(SPEC)
    assert d.ctypes.data == ptr
    assert pool.stats()["allocated"] == 3
    assert pool.stats()["reused"] == 1


def test_pool_keeps_at_most_keep_free_buffers():
    pool = BufferPool(keep=2)
    held = [pool.arrays(SPEC)[0] for _ in range(5)]
    assert pool.stats()["free"] == 0
    del held
    gc.collect()
    assert pool.stats()["free"] == 2
    pool.clear()
    assert pool.stats()["free"] == 0


def test_pool_carves_several_aligned_arrays_from_one_buffer():
    pool = BufferPool(keep=1)
    specs = [((3, 5), np.dtype("u1")), ((3,), np.dtype("<i8")), ((3, 2), np.dtype("<f8"))]
    arrays = pool.arrays(specs)
    assert [(a.shape, a.dtype) for a in arrays] == [(s, d) for s, d in specs]
    assert all(a.ctypes.data % 64 == 0 and a.flags.c_contiguous for a in arrays)
    for k, a in enumerate(arrays):
        a[...] = k + 1
    assert [int(a.ravel()[0]) for a in arrays] == [1, 2, 3]  # none overlaps another
    assert slab_bytes(specs) == 64 + 64 + 48


def test_pool_takes_memory_from_allocate_and_checks_it():
    made = []

    def allocate(n):
        made.append(np.zeros(n + 100, np.uint8))
        return made[-1]

    pool = BufferPool(keep=1, allocate=allocate)
    (a,) = pool.arrays(SPEC)
    assert a.ctypes.data == made[0].ctypes.data
    with pytest.raises(InvalidArgumentError, match="bytes"):
        BufferPool(1, allocate=lambda n: np.zeros(n - 1, np.uint8)).arrays(SPEC)
    readonly = np.zeros(4096, np.uint8)
    readonly.flags.writeable = False
    with pytest.raises(InvalidArgumentError, match="read-only"):
        BufferPool(1, allocate=lambda n: readonly).arrays(SPEC)


# --------------------------------------------------------------------------------------------
# Shared slabs: the state word two processes share


def test_shared_slab_claim_lease_evict():
    memory = np.zeros(SLAB_HEADER + 256, np.uint8)
    worker, main = SharedSlab(memory), SharedSlab(memory)  # two handles of the same bytes
    spec = [((4,), np.dtype("<i8"))]
    assert worker.claim() == 0  # free, not mapped by the main process
    assert worker.claim() == -1
    (out,) = worker.arrays(spec)
    out[:] = [1, 2, 3, 4]
    main.registered()
    (got,) = main.lease(spec)
    assert got.tolist() == [1, 2, 3, 4]
    assert not main.evict()  # still claimed: the worker may name it by id
    tensor = torch.from_numpy(got)
    del got
    assert worker.claim() == -1  # the tensor holds the lease
    del tensor
    assert worker.claim() == 1  # free again, and the main process has it mapped
    worker.unclaim()
    assert main.evict()
    assert worker.claim() == 0


def test_shared_slab_refuses_small_or_unaligned_memory():
    with pytest.raises(InvalidArgumentError, match="at least"):
        SharedSlab(np.zeros(SLAB_HEADER - 1, np.uint8))
    with pytest.raises(InvalidArgumentError, match="aligned"):
        SharedSlab(np.zeros(SLAB_HEADER + 129, np.uint8)[1:])
    with pytest.raises(InvalidArgumentError, match="cannot hold"):
        SharedSlab(np.zeros(SLAB_HEADER + 8, np.uint8)).arrays([((2,), np.dtype("<i8"))])


# --------------------------------------------------------------------------------------------
# PackDataset in one process


def test_in_process_batches_reuse_dropped_buffers(images):
    ref = reference(images)
    ds = PackDataset(images, 8, seed=1, prefetch=2)
    loader = DataLoader(ds, batch_size=None)
    addresses = set()
    for epoch in range(2):
        idx = ds.rank_indices(epoch)
        for j, batch in enumerate(loader):
            rows = idx[j * 8 : (j + 1) * 8]
            assert np.array_equal(batch["images"].numpy(), ref["images"][rows])
            assert np.array_equal(batch["labels"].numpy(), ref["labels"][rows])
            addresses.add(batch["images"].data_ptr())
    # 24 batches in at most prefetch + 3 buffers: the ones in flight, the one yielded, the
    # one the loop variable still held.
    assert len(addresses) <= ds.prefetch + 3
    assert ds._sink is not None
    assert ds._sink[1].pool.stats()["reused"] >= 20


def test_in_process_held_batches_are_never_overwritten(images):
    ref = reference(images)
    ds = PackDataset(images, 8, seed=2, prefetch=1)
    for epoch in range(2):
        ds.set_epoch(epoch)
        kept = list(DataLoader(ds, batch_size=None))
        assert len({b["images"].data_ptr() for b in kept}) == len(kept)
        check_epoch(kept, ds, epoch, ref)
        # A view outlives its batch: its memory is not handed out again.
        tail = kept[-1]["images"][1:3].clone()
        view = kept[-1]["images"][1:3]
        del kept
        gc.collect()
        list(DataLoader(ds, batch_size=None))
        assert torch.equal(view, tail)


def test_transform_gets_recycled_arrays_and_may_keep_them(images):
    ref = reference(images)
    seen = []

    def keep_images(batch):
        seen.append(batch["images"])  # kept past the batch: must not be overwritten
        return batch

    ds = PackDataset(images, 8, seed=3, transform=keep_images)
    batches = list(DataLoader(ds, batch_size=None))
    check_epoch(batches, ds, 0, ref)
    idx = ds.rank_indices(0)
    for j, arr in enumerate(seen):
        assert np.array_equal(arr, ref["images"][idx[j * 8 : (j + 1) * 8]])


# --------------------------------------------------------------------------------------------
# PackDataset with DataLoader workers: shared slabs


def _registry_covers(batch) -> bool:
    """Whether the batch's tensors are views of a worker slab the main process mapped."""
    spans = [
        (m.memory.data_ptr(), m.memory.data_ptr() + m.memory.numel())
        for m in _buffers.registry().slabs.values()
    ]
    return all(
        any(lo <= t.data_ptr() < hi for lo, hi in spans) for t in (batch["images"], batch["labels"])
    )


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_worker_batches_are_views_of_recycled_shared_slabs(images, method, persistent):
    ref = reference(images)
    ds = PackDataset(images, 8, seed=4, prefetch=1)
    loader = DataLoader(
        ds,
        batch_size=None,
        num_workers=2,
        multiprocessing_context=method,
        persistent_workers=persistent,
    )
    keep_per_worker = ds.prefetch + 6
    for epoch in range(3):
        batches = []
        for batch in loader:
            assert _registry_covers(batch), "a batch did not arrive in a worker's shared slab"
            batches.append({k: v.clone() for k, v in batch.items()})
        check_epoch(batches, ds, epoch, ref)
    # The main process keeps at most twice the workers' slabs mapped.
    assert 0 < len(_buffers.registry().slabs) <= 2 * 2 * keep_per_worker


def test_worker_batches_held_past_the_slabs_stay_intact(images):
    """A consumer holding every batch: once a worker's slabs are all held it reads into new
    shared blocks; nothing is overwritten."""
    ref = reference(images)
    ds = PackDataset(images, 4, seed=5, prefetch=0)  # 24 batches, 12 a worker; 6 slabs each
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    for epoch in range(2):
        kept = list(loader)
        assert len({b["images"].data_ptr() for b in kept}) == len(kept)
        check_epoch(kept, ds, epoch, ref)
        del kept
        gc.collect()


def test_abandoned_epochs_give_their_slabs_back(images):
    ref = reference(images)
    ds = PackDataset(images, 4, seed=6, prefetch=2)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    for _ in range(4):
        for k, _batch in enumerate(loader):
            if k == 2:
                break
    ds.set_epoch(9)
    batches = [{k: v.clone() for k, v in b.items()} for b in loader]
    check_epoch(batches, ds, 9, ref)
    # Slabs of the abandoned epochs came back: the workers still recycle.
    assert len(_buffers.registry().slabs) <= 2 * 2 * (ds.prefetch + 6)


def test_epochs_left_early_by_new_workers_leave_no_mapping_behind(tmp_path):
    """Non-persistent workers shut down with batches still queued (epochs left early): a slab
    the main process had mapped, claimed again for a batch it never receives, is never given
    back. Once its worker is gone the main process drops the mapping: a loader that asks to
    keep fewer mappings afterwards is not left holding the dead workers' ones."""
    path = str(tmp_path / "small.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(60 * 3, dtype=np.float32).reshape(60, 3))
    ds = PackDataset(path, 4, seed=7, prefetch=2)
    for k in [*range(1, 15)] * 2:  # epochs left at batch k, each with new workers
        loader = DataLoader(ds, batch_size=None, num_workers=2)
        for _ in range(2):  # a whole epoch, then one left at batch k
            for j, _batch in enumerate(loader):
                if j + 1 == k:
                    break
    del loader, _batch
    gc.collect()
    fewer = PackDataset(path, 4, seed=8, prefetch=1)  # keeps 2 workers x 2 x (1 + 6)
    for _batch in DataLoader(fewer, batch_size=None, num_workers=2):
        pass
    del _batch
    gc.collect()
    assert len(_buffers.registry().slabs) <= 2 * 2 * (fewer.prefetch + 6)


def test_worker_with_transform_sends_its_result(images):
    ref = reference(images)

    ds = PackDataset(images, 8, seed=7, transform=_plus_one)
    batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    idx = ds.rank_indices(0)
    for j, b in enumerate(batches):
        rows = idx[j * 8 : (j + 1) * 8]
        assert np.array_equal(b["images"].numpy(), ref["images"][rows] + 1)


def _plus_one(batch):
    return {"images": batch["images"] + 1, "labels": batch["labels"]}


# --------------------------------------------------------------------------------------------
# Pinned memory and device copies


def test_pin_memory_without_cuda_warns_and_reads(images):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    _buffers._PIN_WARNED = False
    ds = PackDataset(images, 8, seed=8, pin_memory=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = list(DataLoader(ds, batch_size=None))
    assert any("no CUDA device" in str(w.message) for w in caught)
    check_epoch(batches, ds, 0, reference(images))
    with pytest.raises(InvalidArgumentError, match="CUDA"):
        PackDataset(images, 8, device="cuda")
    with pytest.raises(InvalidArgumentError, match="CUDA device"):
        PackDataset(images, 8, device="cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.parametrize("workers", [0, 2])
def test_pinned_batches(images, workers):
    ref = reference(images)
    ds = PackDataset(images, 8, seed=9, pin_memory=True)
    batches = []
    for b in DataLoader(ds, batch_size=None, num_workers=workers):
        assert b["images"].is_pinned()
        assert b["labels"].is_pinned()
        batches.append({k: v.clone() for k, v in b.items()})
    check_epoch(batches, ds, 0, ref)


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.parametrize("workers", [0, 2])
def test_device_batches(images, workers):
    ref = reference(images)
    ds = PackDataset(images, 8, seed=10, device="cuda")
    batches = []
    for b in DataLoader(ds, batch_size=None, num_workers=workers):
        assert b["images"].device.type == "cuda"
        batches.append({k: v.cpu() for k, v in b.items()})
    check_epoch(batches, ds, 0, ref)
