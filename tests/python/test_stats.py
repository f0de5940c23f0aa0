"""Loader statistics against what is known: the core's counters per stage and codec against the
work a batch must do, the consumer's waits against the test's own clock, and the verdict on
constructed pipelines (a slow codec, a slow network, too few threads, a slow transform, a fast
loader). Timing comparisons are of sleeps of known length; no test asserts a speed."""

from __future__ import annotations

import io
import json
import threading
import time
import zipfile

import h5py
import hdf5plugin
import numpy as np
import pytest
from PIL import Image

import packread
from packread import _stats
from packread.torch import PackDataset

SHAPE = (3, 32, 32)
N = 96


def delta(before: np.ndarray, name: str) -> int:
    return int(_stats.counters()[_stats.NAMES.index(name)] - before[_stats.NAMES.index(name)])


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    steps = rng.integers(-2, 3, (N, *SHAPE))
    return (np.cumsum(steps, axis=-1) % 256).astype(np.uint8)


@pytest.fixture(scope="module")
def files(tmp_path_factory, data):
    """One file per stage to count: HDF5 chunks with each codec (one sample a chunk), a ZIP
    of deflated members, JPEG and PNG images, an NPY file."""
    root = tmp_path_factory.mktemp("stats")
    codecs = {
        "inflate": {"compression": "gzip"},
        "lzf": {"compression": "lzf"},
        "shuffle": {"compression": "gzip", "shuffle": True},
        "checksum": {"fletcher32": True},
        "blosc": hdf5plugin.Blosc(cname="lz4"),
        "zstd": hdf5plugin.Zstd(),
        "lz4": hdf5plugin.LZ4(),
        "bitshuffle": hdf5plugin.Bitshuffle(),
    }
    for name, opts in codecs.items():
        with h5py.File(root / f"{name}.h5", "w") as f:
            # 2-byte elements: a byte shuffle of 1-byte ones is no shuffle (HDF5 skips it).
            x = data.astype("<u2") * 257 if name == "shuffle" else data
            f.create_dataset("x", data=x, chunks=(1, *SHAPE), **dict(opts))
    with h5py.File(root / "grouped.h5", "w") as f:
        f.create_dataset("x", data=data, chunks=(8, *SHAPE), compression="gzip")
    with zipfile.ZipFile(root / "deflated.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for i in range(N):
            z.writestr(f"{i:03d}.raw", data[i].tobytes())
    for fmt in ("JPEG", "PNG"):
        with zipfile.ZipFile(root / f"{fmt.lower()}.zip", "w") as z:
            for i in range(16):
                buf = io.BytesIO()
                Image.fromarray(data[i].transpose(1, 2, 0)).save(buf, fmt)
                z.writestr(f"{i:02d}.{fmt.lower()}", buf.getvalue())
    np.save(root / "x.npy", data)
    return root


IDX = np.array([5, 17, 3, 90, 44, 61, 8, 72, 29, 33])


@pytest.mark.parametrize(
    "name", ["inflate", "lzf", "blosc", "zstd", "lz4", "bitshuffle", "shuffle", "checksum"]
)
def test_each_hdf5_codec_counts_one_call_per_chunk_decoded(files, data, name):
    reader = packread.HDF5Reader(files / f"{name}.h5", "x", chunk_cache_bytes=0)
    x = data.astype("<u2") * 257 if name == "shuffle" else data
    before = _stats.counters()
    assert np.array_equal(reader.batch(IDX), x[IDX])
    assert delta(before, f"{name}_calls") == len(IDX)
    if name != "checksum":  # a check's bytes are the stored bytes it covers
        assert delta(before, f"{name}_bytes") == len(IDX) * x[0].nbytes
    assert delta(before, f"{name}_ns") > 0
    assert delta(before, "read_calls") == len(IDX)
    assert delta(before, "plan_calls") == 1
    assert delta(before, "batches") == 1


def test_a_zip_counts_its_inflates_and_crc_checks(files, data):
    reader = packread.ZipReader(files / "deflated.zip", dtype="uint8", shape=SHAPE)
    before = _stats.counters()
    assert np.array_equal(reader.batch(IDX), data[IDX])
    assert delta(before, "inflate_calls") == len(IDX)
    assert delta(before, "checksum_calls") == len(IDX)
    assert delta(before, "inflate_bytes") == len(IDX) * data[0].nbytes


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_images_count_their_decode_and_geometry_apart(files, fmt):
    reader = packread.ImageReader(files / f"{fmt}.zip", decode=packread.ImageDecode(24))
    before = _stats.counters()
    reader.batch(np.arange(16))
    assert delta(before, f"{fmt}_calls") == 16
    assert delta(before, "geometry_calls") == 16
    assert delta(before, "geometry_bytes") == 16 * 3 * 24 * 24
    # Geometry is the image step less its decode: both measured, neither swallows the other.
    assert delta(before, f"{fmt}_ns") > 0
    assert delta(before, "geometry_ns") > 0


def test_raw_reads_count_bytes_and_decode_nothing(files, data):
    reader = packread.NpyReader(files / "x.npy")
    before = _stats.counters()
    assert np.array_equal(reader.batch(IDX), data[IDX])
    assert delta(before, "read_bytes") == len(IDX) * data[0].nbytes
    assert sum(delta(before, f"{s}_calls") for s in _stats.DECODERS) == 0


def test_chunk_cache_lookups_and_hits_are_counted(files, data):
    """Chunks of 8 samples read in part are kept; the other samples of them then hit."""
    reader = packread.HDF5Reader(files / "grouped.h5", "x")
    before = _stats.counters()
    reader.batch([1, 9, 17])
    assert delta(before, "chunk_cache_lookups") == 3
    assert delta(before, "chunk_cache_hits") == 0
    before = _stats.counters()
    assert np.array_equal(reader.batch([2, 10, 18]), data[[2, 10, 18]])
    assert delta(before, "chunk_cache_lookups") == 3
    assert delta(before, "chunk_cache_hits") == 3
    assert delta(before, "inflate_calls") == 0


def test_counters_of_every_thread_are_merged(files, data):
    """Reads on several threads at once (packread's pool and Python threads) all count."""
    packread.set_num_threads(3)
    try:
        readers = [
            packread.HDF5Reader(files / "inflate.h5", "x", chunk_cache_bytes=0) for _ in range(3)
        ]
        before = _stats.counters()

        def run(r):
            for _ in range(5):
                r.batch(np.arange(N))

        threads = [threading.Thread(target=run, args=(r,)) for r in readers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert delta(before, "inflate_calls") == 3 * 5 * N
        assert delta(before, "batches") == 15
    finally:
        packread.set_num_threads(0)


def test_statistics_switched_off_count_nothing(files):
    reader = packread.HDF5Reader(files / "inflate.h5", "x", chunk_cache_bytes=0)
    ds = PackDataset(files / "inflate.h5", 16, arrays="x")
    packread.set_stats(False)
    try:
        assert not packread._packread.stats_enabled()
        before = _stats.counters()
        reader.batch(IDX)
        assert not (_stats.counters() - before).any()
        assert sum(1 for _ in ds) == N // 16
        assert ds.stats().batches == 0
    finally:
        packread.set_stats(True)
    assert sum(1 for _ in ds) == N // 16
    assert ds.stats().batches == N // 16


# -- the consumer, against the test's own clock ---------------------------------------------------


class SlowFile(io.RawIOBase):
    """A binary file object whose every read sleeps ``delay`` seconds, timing its reads."""

    def __init__(self, data: bytes, delay: float) -> None:
        self._f = io.BytesIO(data)
        self.delay = delay
        self.reading = 0.0
        self.reads = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def readinto(self, buf) -> int:
        t = time.perf_counter()
        time.sleep(self.delay)
        n = self._f.readinto(buf)
        self.reading += time.perf_counter() - t
        self.reads += 1
        return n


def run_loop(iterable, step: float) -> tuple[list[float], list[float]]:
    """Iterates, sleeping ``step`` per batch: each ``next()``'s wait and each batch's arrival,
    by the test's clock."""
    waits, arrivals = [], []
    it = iter(iterable)
    while True:
        t = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            return waits, arrivals
        arrivals.append(time.perf_counter())
        waits.append(arrivals[-1] - t)
        time.sleep(step)


def close(measured: float, known: float, rel: float = 0.05, points: float = 0.0) -> bool:
    return abs(measured - known) <= max(rel * abs(known), points)


@pytest.mark.parametrize(
    ("delay", "step", "prefetch"),
    [
        (0.030, 0.015, 0),  # read after each step: waits the whole read
        (0.025, 0.010, 1),  # read during the step: waits what the read takes longer
        (0.005, 0.020, 2),  # read well ahead: barely waits
    ],
)
def test_waits_match_the_known_read_and_step(files, data, delay, step, prefetch):
    """A reader slowed by a known amount (every read of its file object sleeps ``delay``),
    a step of known length: the blocked time and the waiting fraction ``stats()`` reports
    match the test's own measurement within 5 % (or 2 points), the known values too, and the
    dominant stage is the read."""
    raw = (files / "x.npy").read_bytes()
    f = SlowFile(raw, delay)
    ds = PackDataset(f, 8, shuffle=False, prefetch=prefetch)
    opened = (f.reads, f.reading)  # the reads that opened it (its header)
    waits, arrivals = run_loop(ds, step)
    stats = ds.stats()
    assert stats.batches == len(waits) == N // 8
    assert stats.samples == N
    # The first batch (start-up) is apart; the rest are the steady state.
    assert close(stats.first_batch_s[0], waits[0], points=0.002)
    blocked = sum(waits[1:])
    span = arrivals[-1] - arrivals[0]
    assert close(stats.blocked_s, blocked, points=0.002)
    assert close(stats.seconds, span)
    assert close(stats.waiting_fraction, blocked / span, points=0.02)
    # The known values: each batch is one read of `delay` (merged, one object: serialised).
    reads, reading = f.reads - opened[0], f.reading - opened[1]
    assert reads == N // 8
    read = reading / reads
    known_wait = read if prefetch == 0 else max(read - step, 0.0)
    known_fraction = (
        known_wait / (known_wait + step) if prefetch == 0 else known_wait / max(read, step)
    )
    assert close(stats.blocked_s / (len(waits) - 1), known_wait, points=0.002)
    assert close(stats.waiting_fraction, known_fraction, points=0.02)
    # The read stage is the object's reads, and dominates.
    assert close(stats.stages["read"].seconds, reading)
    assert next(iter(stats.shares())) == "read"
    if known_fraction < 0.05:
        assert stats.verdict().startswith("not data-bound")
    else:
        assert stats.verdict().startswith("data-bound")
        assert "read is" in stats.verdict()


def test_timed_measures_a_loader_and_leaves_the_dataset_loop_alone(files):
    from torch.utils.data import DataLoader

    ds = PackDataset(files / "inflate.h5", 16, arrays="x")
    loader = DataLoader(ds, batch_size=None)
    waits, _ = run_loop(ds.timed(loader), 0.0)
    stats = ds.stats()
    assert stats.batches == len(waits) == N // 16  # counted once, not by both
    assert close(stats.blocked_s, sum(waits[1:]), points=0.002)


def test_reset_starts_again_and_each_epoch_has_a_first_batch(files):
    ds = PackDataset(files / "inflate.h5", 16, arrays="x")
    for _ in range(2):
        for _ in ds:
            pass
    stats = ds.stats()
    assert stats.batches == 2 * (N // 16)
    assert len(stats.first_batch_s) == 2
    assert stats.stages["inflate"].calls == 2 * N
    ds.reset_stats()
    assert ds.stats().batches == 0
    assert ds.stats().stages["inflate"].calls == 0
    for _ in ds:
        pass
    assert ds.stats().stages["inflate"].calls == N


def test_a_snapshot_is_plain_data(files):
    ds = PackDataset(files / "inflate.h5", 16, arrays="x")
    for _ in ds:
        pass
    stats = ds.stats()
    d = json.loads(json.dumps(stats.to_dict()))
    assert d["batches"] == N // 16
    assert d["stages"]["inflate"]["calls"] == N
    assert set(d["stages"]) == set(_stats.STAGES)
    text = str(stats)
    assert stats.verdict() in text
    assert "inflate" in text


# -- the verdict on constructed slow pipelines --------------------------------------------------


@pytest.fixture(scope="module")
def heavy(tmp_path_factory):
    """Samples that take a while to inflate (gzip level 9; 3x384x384, so that a batch's
    inflate outweighs its Python many times over), and JPEG photos."""
    root = tmp_path_factory.mktemp("heavy")
    rng = np.random.default_rng(1)
    x = (np.cumsum(rng.integers(-3, 4, (64, 3, 128, 128)), axis=-1) % 256).astype(np.uint8)
    big = np.tile(x[:32], (1, 1, 3, 3))
    with h5py.File(root / "slow.h5", "w") as f:
        f.create_dataset(
            "x", data=big, chunks=(1, 3, 384, 384), compression="gzip", compression_opts=9
        )
    with h5py.File(root / "raw.h5", "w") as f:
        f.create_dataset("x", data=x[:, :, :16, :16])
    with zipfile.ZipFile(root / "photos.zip", "w") as z:
        for i in range(48):
            buf = io.BytesIO()
            Image.fromarray(x[i % 64].transpose(1, 2, 0)).resize((384, 384)).save(buf, "JPEG")
            z.writestr(f"{i:02d}.jpg", buf.getvalue())
    return root


def verdict_of(ds, step: float = 0.0, epochs: int = 2) -> str:
    for _ in range(epochs):
        run_loop(ds, step)
    return ds.stats().verdict()


def test_verdict_a_slow_codec(heavy):
    # Samples large enough, read far enough ahead, that the codec is all there is.
    ds = PackDataset(heavy / "slow.h5", 4, arrays="x", chunk_cache_bytes=0, prefetch=4)
    v = verdict_of(ds, epochs=3)
    assert v.startswith("data-bound"), v
    assert "inflate is" in v, v
    assert "faster codec" in v, v
    assert next(iter(ds.stats().shares())) == "inflate"


def test_verdict_too_few_threads(heavy):
    ds = PackDataset(
        heavy / "photos.zip", 8, decode=packread.ImageDecode(224), num_threads=1, prefetch=4
    )
    v = verdict_of(ds)
    stats = ds.stats()
    assert stats.threads == 1
    assert stats.utilisation > 0.8
    assert v.startswith("data-bound"), v
    assert "jpeg is" in v, v
    busy = stats.machine_busy if stats.machine_busy is not None else stats.cpu_share
    if busy < _stats.CPU_BOUND:  # a quiet machine: a CPU to spare
        assert "1 thread busy" in v, v
        assert "CPUs to spare: add threads" in v, v
    else:  # something else took the other CPU: the verdict says so
        assert "the machine's limit" in v, v


def test_verdict_a_slow_transform(heavy):
    ds = PackDataset(heavy / "raw.h5", 8, arrays="x", transform=lambda b: time.sleep(0.01) or b)
    v = verdict_of(ds)
    assert v.startswith("data-bound"), v
    assert "the transform takes" in v, v
    stats = ds.stats()
    assert close(stats.transform_s / stats.batches, 0.01, rel=0.3)


def test_verdict_a_fast_loader(heavy):
    v = verdict_of(PackDataset(heavy / "raw.h5", 8, arrays="x"), step=0.02)
    assert v.startswith("not data-bound"), v


def test_verdict_a_slow_network(tmp_path, heavy, monkeypatch):
    from support.objstore import FaultProxy, nginx_http

    monkeypatch.setenv("PACKREAD_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "slow.h5").write_bytes((heavy / "slow.h5").read_bytes())
    with nginx_http(tmp_path / "www") as http, FaultProxy(http.host, http.port) as proxy:
        ds = PackDataset(proxy.address + "/slow.h5", 8, arrays="x", prefetch=1)
        proxy.delay = 0.05
        v = verdict_of(ds, epochs=1)
        stats = ds.stats()
    assert v.startswith("data-bound"), v
    assert "object storage answers in" in v, v
    assert stats.network_requests >= 8
    # Each request waited at least the injected latency.
    assert stats.network_s / stats.network_requests >= 0.05


def made(**given) -> _stats.LoaderStats:
    """A snapshot with these values, the rest those of a loop that does not wait."""
    stages = {k: _stats.StageStats(0.0, 0, 0) for k in _stats.STAGES}
    for k, v in given.pop("stages", {}).items():
        stages[k] = _stats.StageStats(v, 100, 100 << 20)
    values = dict(
        batches=101,
        samples=6464,
        measured=True,
        blocked_s=0.0,
        blocked_p50_s=0.0,
        blocked_p90_s=0.0,
        blocked_p99_s=0.0,
        blocked_max_s=0.0,
        first_batch_s=[0.1],
        waiting_fraction=0.0,
        seconds=2.0,
        batches_per_s=50.0,
        samples_per_s=3200.0,
        stages=stages,
        network_requests=0,
        network_bytes=0,
        network_s=0.0,
        merged_reads=0,
        merged_extents=0,
        chunk_cache_hit_rate=None,
        data_cache_hit_rate=None,
        threads=2,
        processes=1,
        utilisation=0.5,
        cores=2,
        cpu_share=0.5,
        machine_busy=0.5,
        queue_depth={0: 100},
        queue_depth_mean=0.0,
        read_wait_s=0.0,
        transform_s=0.0,
        handoff_s=0.0,
        reads=101,
    )
    values.update(given)
    return _stats.LoaderStats(**values)


WAITING = dict(waiting_fraction=0.4, blocked_s=0.8, blocked_p50_s=0.008)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (dict(batches=0), ["no batches yet"]),
        (dict(waiting_fraction=0.02, blocked_s=0.04), ["not data-bound", "waiting 2.0 %"]),
        (
            dict(**WAITING, stages={"inflate": 1.6, "read": 0.1}, machine_busy=0.97),
            [
                "data-bound",
                "inflate is 94 %",
                "2 CPUs busy 97 %",
                "machine's limit",
                "faster codec",
            ],
        ),
        (
            dict(**WAITING, stages={"jpeg": 1.0, "geometry": 0.3}, threads=1, utilisation=0.96),
            ["jpeg is 77 %", "1 thread busy 96 % and CPUs to spare: add threads", "draft=True"],
        ),
        (
            dict(**WAITING, stages={"zstd": 1.0}, utilisation=0.3),
            ["zstd is 100 %", "busy only 30 %", "raise prefetch"],
        ),
        (
            dict(
                **WAITING,
                stages={"read": 1.0, "network": 5.0},
                network_requests=100,
                network_s=5.0,
            ),
            ["read is 100 %", "object storage answers in 50 ms per request", "cache_dir"],
        ),
        (
            dict(**WAITING, stages={"read": 1.0}, utilisation=0.9),
            ["read is 100 %", "storage reads at"],
        ),
        (dict(**WAITING, stages={"geometry": 1.0}, machine_busy=0.9), ["resize less"]),
        (
            dict(**WAITING, stages={"inflate": 0.1}, transform_s=1.0),
            ["the transform takes 9.9 ms per batch, more than the reads"],
        ),
        (
            dict(**WAITING, stages={"inflate": 0.1}, handoff_s=0.5),
            ["the worker hand-off takes", "larger batches"],
        ),
        (
            dict(
                **{**WAITING, "blocked_p50_s": 0.0003},
                stages={"inflate": 1.0},
                queue_depth={0: 2, 2: 98},
            ),
            ["98 % of batches were read ahead", "handing over each batch", "larger batches"],
        ),
        (dict(measured=False, stages={"lz4": 1.0}), ["waiting not measured", "ds.timed(loader)"]),
        (dict(waiting_fraction=None), ["only first batches seen"]),
    ],
)
def test_verdict_on_constructed_numbers(given, said):
    """Each kind of bottleneck, from numbers set by hand: the verdict names it and says what
    to change, with the numbers."""
    v = made(**given).verdict()
    for s in said:
        assert s in v, v
