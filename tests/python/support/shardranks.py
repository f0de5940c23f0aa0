"""HDF5 shards of sample ids and a gloo rank entry point for the shard-mode torch tests, in a
module of their own so that spawned processes (the ranks of a gloo group) can import them."""

from __future__ import annotations

import json
import os
import sys

import h5py
import numpy as np

from .torchdata import read_epochs


def write_id_shards(folder: str, sizes, chunk: int = 4, prefix: str = "ids") -> list[str]:
    """One HDF5 file per entry of ``sizes``, ``folder/<prefix>_<k>.h5``, whose dataset ``id``
    holds the global index of each of its samples (so a batch says which samples it holds);
    chunks of ``chunk`` samples (an empty shard too). Returns the paths, in order."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    start = 0
    for k, n in enumerate(sizes):
        path = os.path.join(folder, f"{prefix}_{k:03d}.h5")
        with h5py.File(path, "w") as f:
            f.create_dataset(
                "id",
                data=np.arange(start, start + n, dtype="<i8"),
                chunks=(chunk,),
                maxshape=(None,),
            )
        paths.append(path)
        start += n
    return paths


def shard_rank_main(
    rank: int, world: int, port: int, paths: list[str], out_dir: str, options: dict
) -> None:
    """One rank of a gloo group: for each of ``options["runs"]`` (``drop_last``, and the
    DataLoader workers' start method ``context`` and ``persistent``), reads
    ``options["epochs"]`` epochs of ``PackDataset(paths, shuffle_mode="shard")`` through a
    ``DataLoader`` of ``options["workers"]`` workers and writes the ids it saw, with the batch
    counts of every rank. (A spawned rank spawns its workers too unless told otherwise, each
    importing torch anew: ``persistent`` keeps that to once.)"""
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    from packread.torch import PackDataset

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        runs = []
        for run in options["runs"]:
            drop_last = run["drop_last"]
            ds = PackDataset(
                paths,
                options["batch_size"],
                datasets="id",
                seed=options["seed"],
                drop_last=drop_last,
                shuffle_mode="shard",
                shard_window=options["shard_window"],
            )
            loader = DataLoader(
                ds,
                batch_size=None,
                num_workers=options["workers"],
                multiprocessing_context=run["context"],
                persistent_workers=run["persistent"],
            )
            epochs = read_epochs(loader, options["epochs"], world)
            runs.append({**run, "len": len(ds), "epochs": epochs})
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump({"rank": rank, "runs": runs}, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()
        sys.stdout.flush()
