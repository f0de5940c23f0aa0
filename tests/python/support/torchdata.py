"""Data and process entry points for the torch tests, in a module of their own so that spawned
processes (DataLoader workers, the ranks of a gloo group) can import them."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import h5py
import numpy as np
import pytest

try:
    from torchdata.stateful_dataloader import StatefulDataLoader
except ImportError:  # torchdata >= 0.8 has it, and needs torch >= 2.4 (packread takes >= 2.1)
    StatefulDataLoader = None

#: Skips a test of resuming under torchdata's StatefulDataLoader where there is none.
needs_stateful_dataloader = pytest.mark.skipif(
    StatefulDataLoader is None,
    reason="no torchdata.stateful_dataloader here (torchdata >= 0.8, torch >= 2.4)",
)


def write_ids(path: str, n: int, chunk: int = 1) -> str:
    """An HDF5 file whose dataset ``id`` holds ``0..n`` (so a batch says which samples it
    holds), next to ``x``, a sample of data per id; chunks of ``chunk`` samples."""
    with h5py.File(path, "w") as f:
        f.create_dataset("id", data=np.arange(n, dtype="<i8"), chunks=(chunk,))
        x = (np.arange(n * 6, dtype="<f4") * 0.5).reshape(n, 2, 3)
        f.create_dataset("x", data=x, chunks=(chunk, 2, 3), compression="gzip")
    return path


def times_two(batch):
    """A transform (module level, so that spawned workers can unpickle it): every array of the
    batch doubled, through dicts and the lists and tuples of a ragged batch (numpy arrays and
    tensors alike, so that it also makes the reference)."""
    if isinstance(batch, dict):
        return {k: times_two(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(times_two(v) for v in batch)
    return batch * 2


def run_gloo_ranks(target: Any, world: int, out_dir: str, *args: Any) -> list[dict]:
    """Runs ``target(rank, world, port, *args, out_dir, ...)`` (``args`` end with what it
    takes after the port) in ``world`` spawned processes forming a gloo group on a free
    loopback port; each must exit 0 and leave ``rank{r}.json`` in ``out_dir``, returned
    parsed, by rank."""
    import socket

    import torch.multiprocessing as tmp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = tmp.get_context("spawn")
    procs = [ctx.Process(target=target, args=(r, world, port, *args)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    ranks = []
    for r in range(world):
        with open(os.path.join(out_dir, f"rank{r}.json")) as f:
            ranks.append(json.load(f))
    return ranks


def read_epochs(loader: Any, epochs: int, world: int) -> list[dict]:
    """``epochs`` epochs of ``loader`` in one rank of a gloo group: the ids of each batch, and
    every rank's batch count (gathered: a rank with fewer batches would make the other wait)."""
    import torch.distributed as dist

    out = []
    for _ in range(epochs):
        batches = [b.tolist() for b in loader]
        counts = [None] * world
        dist.all_gather_object(counts, len(batches))
        out.append({"batches": batches, "all_counts": counts})
    return out


def join_gloo(out_dir: str, rank: int, world: int) -> None:
    """Joins this process, as ``rank``, to a gloo group of ``world`` ranks over loopback only,
    meeting in a file in ``out_dir``."""
    import torch.distributed as dist

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    dist.init_process_group(
        "gloo",
        init_method="file://" + os.path.join(out_dir, "rendezvous"),
        rank=rank,
        world_size=world,
    )


def report_rank(out_dir: str, rank: int, result: dict) -> None:
    """Writes one rank's ``result`` where :func:`run_gloo_ranks` reads it, then waits for the
    other ranks (none leaves the group before every one has written)."""
    import torch.distributed as dist

    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()


def rank_main(rank: int, world: int, port: int, path: str, out_dir: str, options: dict) -> None:
    """One rank of a 2-process gloo group: reads ``options["epochs"]`` epochs of ``path``
    through ``DataLoader(PackDataset(...), num_workers=2)`` and writes the ids it saw."""
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    from packread.torch import PackDataset

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        ds = PackDataset(
            path,
            options["batch_size"],
            datasets="id",
            seed=options["seed"],
            drop_last=options["drop_last"],
        )
        loader = DataLoader(ds, batch_size=None, num_workers=2)
        epochs = read_epochs(loader, options["epochs"], world)
        report_rank(out_dir, rank, {"len": len(ds), "rank": rank, "epochs": epochs})
    finally:
        dist.destroy_process_group()
        sys.stdout.flush()
