"""Loader statistics across processes: DataLoader workers' totals carried with their batches
(PackDataset, PackMapDataset, MixDataset), ``reset_stats()`` with persistent workers, every
rank's statistics over a real gloo group, and the headspace tools (``replay``, ``headspace``,
``packread bench --headspace``).

Counts are asserted exactly (a gzip file of one sample per chunk inflates once per sample
read); times only where sleeps of known length make them (the headspace tests), with
generous tolerances."""

from __future__ import annotations

import itertools
import json
import os
import sys
import time

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from packread.cli import main
from packread.errors import InvalidArgumentError
from packread.torch import MixDataset, PackDataset, PackMapDataset, headspace, replay
from support.torchdata import join_gloo, report_rank, run_gloo_ranks

#: Samples, samples per batch: 20 batches per epoch.
SAMPLES, BATCH = 80, 4
BATCHES = SAMPLES // BATCH


def write_h5(path, n: int = SAMPLES, sign: float = 1.0) -> str:
    """``n`` samples of (4, 8) float32 in ``x`` (sample ``i`` holds ``32 i .. 32 i + 31``),
    gzip, one sample per chunk."""
    with h5py.File(path, "w") as f:
        x = sign * np.arange(n * 32, dtype="<f4").reshape(n, 4, 8)
        f.create_dataset("x", data=x, chunks=(1, 4, 8), compression="gzip")
    return str(path)


@pytest.fixture
def h5(tmp_path):
    return write_h5(tmp_path / "data.h5")


def rows_of(batch) -> int:
    return len(batch["x"]) if isinstance(batch, dict) else len(batch)


def sleep_20ms(batch):
    time.sleep(0.020)
    return batch


def sleep_5ms(batch):
    time.sleep(0.005)
    return batch


def sleep_10ms(batch) -> None:
    time.sleep(0.010)


# --------------------------------------------------------------------------------------------
# PackDataset with DataLoader workers


def test_two_workers_totals_add_up(h5):
    ds = PackDataset(h5, BATCH)
    rows = [rows_of(b) for b in ds.timed(DataLoader(ds, batch_size=None, num_workers=2))]
    assert len(rows) == BATCHES
    s = ds.stats()
    assert s.measured
    assert s.batches == BATCHES
    assert s.samples == sum(rows) == SAMPLES
    assert len(s.workers) == 2
    assert sorted(w.worker for w in s.workers) == [0, 1]
    assert len({w.pid for w in s.workers}) == 2
    assert os.getpid() not in {w.pid for w in s.workers}
    assert sum(w.batches for w in s.workers) == s.batches
    assert sum(w.samples for w in s.workers) == s.samples
    assert [w.batches for w in s.workers] == [BATCHES // 2] * 2  # dealt in turn
    # The reads were the workers': every chunk inflated once, one per sample.
    assert s.stages["inflate"].calls == SAMPLES
    assert s.stages["inflate"].bytes == SAMPLES * 4 * 8 * 4  # decoded bytes
    assert s.stages["read"].calls >= SAMPLES
    assert s.stages["plan"].calls == BATCHES
    assert s.reads == BATCHES
    assert s.processes == 2
    assert all(w.read_s > 0 for w in s.workers)
    assert s.handoff_s > 0  # the main process received each batch
    assert len(s.first_batch_s) == 1
    assert s.waiting_fraction is not None
    assert "waiting not measured" not in s.verdict()


def test_without_timed_waiting_is_not_measured(h5):
    ds = PackDataset(h5, BATCH)
    rows = [rows_of(b) for b in DataLoader(ds, batch_size=None, num_workers=2)]
    s = ds.stats()
    assert not s.measured
    assert s.waiting_fraction is None
    assert s.blocked_s == 0.0
    assert s.first_batch_s == []
    # Counted by the workers, sent with their batches.
    assert s.batches == len(rows) == BATCHES
    assert s.samples == sum(rows) == SAMPLES
    assert sum(w.batches for w in s.workers) == BATCHES
    assert s.stages["inflate"].calls == SAMPLES
    verdict = s.verdict()
    assert "not measured" in verdict
    assert "ds.timed" in verdict
    assert "% of read time" in verdict  # the dominant stage is still named
    assert s.to_dict()["workers"][0]["batches"] == BATCHES // 2


def test_reset_with_persistent_workers_counts_one_epoch(h5):
    ds = PackDataset(h5, BATCH)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    for _ in range(2):
        assert sum(1 for _ in ds.timed(loader)) == BATCHES
    s = ds.stats()
    assert (s.batches, s.samples) == (2 * BATCHES, 2 * SAMPLES)
    assert s.stages["inflate"].calls == 2 * SAMPLES
    pids = sorted(w.pid for w in s.workers)
    assert len(pids) == 2  # the same two processes both epochs
    ds.reset_stats()
    s = ds.stats()
    assert (s.batches, s.samples, s.stages["inflate"].calls) == (0, 0, 0)
    assert sum(w.batches for w in s.workers) == 0
    assert s.verdict().startswith("no batches yet")
    rows = [rows_of(b) for b in ds.timed(loader)]
    s = ds.stats()
    assert (s.batches, s.samples) == (BATCHES, SAMPLES) == (len(rows), sum(rows))
    assert sorted(w.pid for w in s.workers) == pids
    assert [w.batches for w in s.workers] == [BATCHES // 2] * 2
    assert sum(w.samples for w in s.workers) == SAMPLES
    assert s.stages["inflate"].calls == SAMPLES
    assert s.stages["plan"].calls == BATCHES
    assert len(s.first_batch_s) == 1  # this epoch's only


# --------------------------------------------------------------------------------------------
# PackMapDataset


def test_map_dataset_two_workers(h5):
    ds = PackMapDataset(h5)
    loader = DataLoader(ds, batch_size=8, collate_fn=ds.collate_fn, num_workers=2, shuffle=True)
    rows = [rows_of(b) for b in loader]
    assert len(rows) == len(loader) == SAMPLES // 8
    s = ds.stats()
    assert not s.measured
    assert len(s.workers) == 2
    assert s.batches == sum(w.batches for w in s.workers) == len(loader)
    assert s.samples == sum(w.samples for w in s.workers) == SAMPLES
    assert s.stages["inflate"].calls == SAMPLES
    # Measured too, through timed().
    ds.reset_stats()
    assert sum(1 for _ in ds.timed(loader)) == len(loader)
    s = ds.stats()
    assert s.measured
    assert s.batches == len(loader)
    assert s.samples == SAMPLES
    assert s.stages["inflate"].calls == SAMPLES


def test_map_dataset_in_the_main_process(h5):
    ds = PackMapDataset(h5)
    loader = DataLoader(ds, batch_size=8, collate_fn=ds.collate_fn, num_workers=0)
    batches = list(loader)
    s = ds.stats()
    assert s.measured
    assert s.workers == []
    assert s.batches == len(batches) == len(loader)
    assert s.samples == SAMPLES
    assert s.stages["inflate"].calls == SAMPLES
    assert len(s.first_batch_s) == 1
    # The batches are the file's, in order (the default sampler).
    sample_8 = torch.arange(8 * 32, 9 * 32, dtype=torch.float32).view(4, 8)
    assert torch.equal(batches[1]["x"][0], sample_8)


# --------------------------------------------------------------------------------------------
# MixDataset


@pytest.mark.parametrize("workers", [0, 2])
def test_mix_of_two_pack_datasets(tmp_path, workers):
    a = PackDataset(write_h5(tmp_path / "a.h5", 80), BATCH)
    b = PackDataset(write_h5(tmp_path / "b.h5", 48, sign=-1.0), BATCH)
    mix = MixDataset([a, b], [1, 1], batch_size=BATCH)
    loader = DataLoader(mix, batch_size=None, num_workers=workers)
    batches = list(mix.timed(loader))
    s = mix.stats()
    assert s.measured
    assert s.batches == len(batches) == len(mix)
    samples = sum(rows_of(x) for x in batches)
    assert s.samples == samples
    # first_exhausted, equal weights: the smaller source (48) read once, as many from the other.
    assert samples == 2 * 48
    negative = sum(int((x["x"].flatten(1) < 0).any(1).sum()) for x in batches)
    assert negative == 48  # every sample of b has negative values, none of a
    # Each sample read once: one inflate per sample (each source a chunk per sample).
    assert s.stages["inflate"].calls == samples
    assert s.stages["read"].calls >= samples
    assert len(s.workers) == workers
    if workers:
        assert sum(w.batches for w in s.workers) == s.batches
        assert sum(w.samples for w in s.workers) == samples
    # The sources' own statistics saw none of it: the mixture read.
    assert a.stats().batches == b.stats().batches == 0


# --------------------------------------------------------------------------------------------
# Every rank


def test_all_ranks_without_a_process_group(h5):
    assert not (torch.distributed.is_available() and torch.distributed.is_initialized())
    ds = PackDataset(h5, BATCH)
    assert sum(1 for _ in ds) == BATCHES
    s = ds.stats(all_ranks=True)
    assert s.ranks is not None
    assert len(s.ranks) == 1
    assert s.slowest_rank == 0
    assert s.ranks[0]["batches"] == BATCHES
    assert s.ranks[0]["samples"] == SAMPLES
    assert ds.stats().ranks is None  # only when asked


def slowed_rank(rank: int, world: int, port: int, path: str, out_dir: str) -> None:
    """One rank of a 2-process gloo group: reads its share of ``path`` with a 1 ms step; rank
    1's reads are slowed (no read-ahead, a transform sleeping 5 ms per batch), so it waits
    longer. Reports every rank's statistics as this rank gathered them."""
    import torch.distributed as dist

    join_gloo(out_dir, rank, world)
    try:
        if rank == 1:
            ds = PackDataset(path, BATCH, prefetch=0, transform=sleep_5ms)
        else:
            ds = PackDataset(path, BATCH)
        for _ in DataLoader(ds, batch_size=None, num_workers=0):
            time.sleep(0.001)
        s = ds.stats(all_ranks=True)
        result = {
            "rank": rank,
            "len": len(ds),
            "ranks": len(s.ranks),
            "slowest": s.slowest_rank,
            "batches": [r["batches"] for r in s.ranks],
            "samples": [r["samples"] for r in s.ranks],
            "blocked": [r["blocked_s"] for r in s.ranks],
            "transform": [r["transform_s"] for r in s.ranks],
            "measured": [r["measured"] for r in s.ranks],
        }
        report_rank(out_dir, rank, result)
    finally:
        dist.destroy_process_group()
        sys.stdout.flush()


def test_all_ranks_in_a_gloo_group_names_the_slowest(h5, tmp_path):
    ranks = run_gloo_ranks(slowed_rank, 2, str(tmp_path), h5, str(tmp_path))
    half = BATCHES // 2
    for r, got in enumerate(ranks):
        assert got["rank"] == r
        assert got["len"] == half
        assert got["ranks"] == 2
        assert got["slowest"] == 1
        assert got["measured"] == [True, True]
        assert got["batches"] == [half, half]
        assert got["samples"] == [SAMPLES // 2] * 2
    # Both ranks gathered the same snapshots.
    assert ranks[0]["blocked"] == ranks[1]["blocked"]
    blocked, transform = ranks[0]["blocked"], ranks[0]["transform"]
    assert transform[0] == 0.0
    assert transform[1] >= 0.005 * half * 0.9
    assert blocked[1] > blocked[0]


# --------------------------------------------------------------------------------------------
# replay()


def test_replay_cycles_through_copies():
    originals = [
        {"x": torch.full((2, 3), float(k)), "y": (torch.tensor([k]), torch.tensor([-k]))}
        for k in range(5)
    ]
    out = list(replay(originals, batches=3, steps=7))
    assert len(out) == 7
    for k, batch in enumerate(out):
        assert batch is out[k % 3]  # the same held batches, in turn
        src = originals[k % 3]
        assert torch.equal(batch["x"], src["x"])
        assert isinstance(batch["y"], tuple)
        assert torch.equal(batch["y"][0], src["y"][0])
        assert batch["x"].data_ptr() != src["x"].data_ptr()
        assert batch["y"][1].data_ptr() != src["y"][1].data_ptr()
    # Writing the originals' memory later changes nothing replayed.
    for src in originals:
        src["x"].fill_(-1.0)
        src["y"][0].zero_()
    assert [float(b["x"][0, 0]) for b in out] == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0]
    assert [int(b["y"][0]) for b in out] == [0, 1, 2, 0, 1, 2, 0]
    # steps default: len(loader), else batches.
    assert len(list(replay(originals, batches=2))) == len(originals)
    assert len(list(replay(iter(originals), batches=2))) == 2
    assert len(list(replay(originals, batches=2, steps=0))) == 0
    with pytest.raises(InvalidArgumentError):
        list(replay([], batches=2, steps=3))


def test_replay_of_a_pack_dataset_loader(h5):
    ds = PackDataset(h5, BATCH, shuffle=False, arrays="x")
    loader = DataLoader(ds, batch_size=None, num_workers=0)
    seen: list[torch.Tensor] = []

    def recorded():
        for b in loader:
            seen.append(b)
            yield b

    out = list(replay(recorded(), batches=3, steps=8))
    assert len(out) == 8
    assert 3 <= len(seen) <= 3 + ds.prefetch  # read the first batches only
    data = torch.arange(SAMPLES * 32, dtype=torch.float32).view(SAMPLES, 4, 8)
    for k, b in enumerate(out):
        j = k % 3
        assert torch.equal(b, data[j * BATCH : (j + 1) * BATCH])
        assert torch.equal(b, seen[j])
        assert b.data_ptr() != seen[j].data_ptr()
    for s in seen:
        s.fill_(-5.0)  # the loader's memory written again
    for k, b in enumerate(out):
        assert torch.equal(b, data[(k % 3) * BATCH : (k % 3 + 1) * BATCH])
    # The default: as many steps as the loader has batches.
    assert len(list(replay(loader, batches=3))) == len(loader) == BATCHES


# --------------------------------------------------------------------------------------------
# headspace()


def test_headspace_of_a_slow_loader(h5):
    # Each batch: 20 ms in the transform (no read-ahead), then a 10 ms step: 30 ms per step
    # with loading, 10 ms from memory.
    ds = PackDataset(h5, BATCH, prefetch=0, transform=sleep_20ms)
    loader = DataLoader(ds, batch_size=None, num_workers=0)
    h = headspace(loader, sleep_10ms, steps=20, keep=4)
    assert h.steps == 20
    assert h.replayed_s == pytest.approx(0.010, rel=0.3)
    assert h.loaded_s == pytest.approx(0.030, rel=0.3)
    assert h.speedup == pytest.approx(3.0, rel=0.15)
    assert h.stats.measured
    assert h.stats.waiting_fraction == pytest.approx(2 / 3, abs=0.1)
    assert h.stats.transform_s >= 20 * 0.020 * 0.9
    assert h.stats.verdict().startswith("data-bound")
    assert "the transform" in h.stats.verdict()
    assert "faster if loading were free" in str(h)
    assert h.to_dict()["stats"]["batches"] >= 21


def test_headspace_of_a_fast_loader(h5):
    ds = PackDataset(h5, BATCH)
    loader = DataLoader(ds, batch_size=None, num_workers=0)
    h = headspace(loader, sleep_10ms, steps=20, keep=4)
    assert 0 < h.speedup < 1.15
    assert h.replayed_s == pytest.approx(0.010, rel=0.3)


def test_headspace_stats_are_the_loaded_loops_only(h5):
    ds = PackDataset(h5, BATCH, prefetch=0)
    loader = DataLoader(ds, batch_size=None, num_workers=0)
    h = headspace(loader, lambda b: None, steps=5, keep=4)
    # One warm-up batch and 5 steps were loaded; replay's 4 batches are not the loaded loop's.
    assert h.stats.batches == 6


def test_headspace_arguments_checked(h5):
    loader = DataLoader(PackDataset(h5, BATCH), batch_size=None)
    with pytest.raises(InvalidArgumentError):
        headspace(loader, sleep_10ms, steps=0)
    with pytest.raises(InvalidArgumentError):
        headspace(loader, sleep_10ms, keep=0)


# --------------------------------------------------------------------------------------------
# packread bench --headspace


def test_cli_headspace_json(h5, capsys):
    argv = ["bench", h5, "--headspace", "--step-ms", "5", "--workers", "0", "--batches", "5"]
    assert main([*argv, "-b", "4", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 1
    row = rows[0]
    assert (row["batch_size"], row["workers"]) == (4, 0)
    assert row["speedup"] > 0
    assert row["speedup"] == pytest.approx(row["loaded_s"] / row["replayed_s"])
    assert row["replayed_s"] >= 0.005 * 0.9  # the 5 ms step
    assert isinstance(row["verdict"], str)
    assert row["verdict"]
    assert row["stats"]["measured"] is True
    assert row["stats"]["batches"] >= 6  # warm-up + 5 steps
    assert row["stats"]["stages"]["inflate"]["calls"] > 0
    # Without --json: a line per configuration, and its verdict.
    assert main([*argv, "-b", "4"]) == 0
    out = capsys.readouterr().out
    assert "batch 4, 0 workers:" in out
    assert "faster if loading were free" in out


STEP_MODULE = """
calls = []

def step(batch):
    calls.append(tuple(batch["x"].shape))
"""


def test_cli_headspace_step_from_a_module(h5, tmp_path, monkeypatch, capsys):
    name = "packread_headspace_step_counter"
    (tmp_path / f"{name}.py").write_text(STEP_MODULE)
    monkeypatch.chdir(tmp_path)  # MODULE is found in the current directory
    monkeypatch.setattr(sys, "path", list(sys.path))  # undo what the command adds
    try:
        argv = ["bench", h5, "--headspace", "--step", f"{name}:step", "-w", "0", "-b", "4"]
        assert main([*argv, "--batches", "5", "--json"]) == 0
        calls = sys.modules[name].calls
    finally:
        sys.modules.pop(name, None)
    # The warm-up batch, 5 steps, the replay's warm-up, 5 steps: each given a batch.
    assert len(calls) == 1 + 5 + 1 + 5
    assert set(calls) == {(4, 4, 8)}
    assert json.loads(capsys.readouterr().out)[0]["speedup"] > 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--headspace", "--step", "nocolon"], "--step takes MODULE:FUNCTION, not 'nocolon'"),
        (["--headspace", "--step", "no_such_module_xyz:f"], "--step no_such_module_xyz:f"),
        (["--headspace", "--step", "os:sep"], "is not callable"),
        (["--step-ms", "5"], "--step and --step-ms go with --headspace"),
        (["--step", "m:f"], "--step and --step-ms go with --headspace"),
    ],
)
def test_cli_headspace_bad_step(h5, capsys, extra, message):
    assert main(["bench", h5, "-w", "0", "--batches", "1", *extra]) == 1
    err = capsys.readouterr().err
    assert "packread bench: error:" in err
    assert message in err


def test_replay_takes_only_what_it_keeps():
    taken = []

    def source():
        for k in itertools.count():
            taken.append(k)
            yield torch.tensor([k])

    out = [int(b) for b in replay(source(), batches=2, steps=5)]
    assert out == [0, 1, 0, 1, 0]
    assert taken == [0, 1]
