"""packread.ray: a Ray Data source on a local Ray cluster the tests start (2 CPUs, bound to
127.0.0.1, objects spilled to a temp folder, shut down after): every row of every column of
every case of the shared format matrix equals packread's own reader; segments follow the
storage's chunks; ``streaming_split`` gives every row once; ``select_columns`` reads only the
selected arrays; a read over the loopback S3 server equals the local one with the index
carried by the tasks; a task killed mid-read is retried and the result is still exact."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import tempfile
import threading
import time

import h5py
import numpy as np
import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported

import itertools

import psutil
import ray
import ray.data
from ray.data.block import BlockAccessor

import packread
import packread.ray
from packread import _stats
from packread._segments import balance, cut
from packread.errors import InvalidArgumentError, MissingKeyError, PackreadTypeError
from support.formats import CASE_NAMES, Case
from support.objstore import s3_fixture  # noqa: F401  (the module's moto server)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local Ray cluster of 2 CPUs on 127.0.0.1 only; no raylet outlives the module."""
    temp = tempfile.mkdtemp(prefix="prray", dir="/tmp")  # short: Ray's socket paths
    spill = tmp_path_factory.mktemp("spill")
    ray.init(
        address="local",  # a cluster of its own, never one another process left
        num_cpus=2,
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        _temp_dir=temp,
        object_store_memory=400 << 20,
        log_to_driver=False,
        _system_config={
            "object_spilling_config": json.dumps(
                {"type": "filesystem", "params": {"directory_path": str(spill)}}
            )
        },
    )
    try:
        assert ray.util.get_node_ip_address() == "127.0.0.1"
        assert [n["NodeManagerAddress"] for n in ray.nodes()] == ["127.0.0.1"]
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.execution_options.preserve_order = True
        yield temp
    finally:
        ray.shutdown()
        left = _ray_processes(temp)
        for p in left:
            p.kill()
        shutil.rmtree(temp, ignore_errors=True)
        assert not left, f"Ray processes left after shutdown: {left}"


def _ray_processes(temp: str) -> list[psutil.Process]:
    """This cluster's processes still running (raylet, GCS, workers): those naming its folder."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(temp in part for part in p.info["cmdline"] or []):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _rows(ds) -> dict[str, list]:
    """Every row of ``ds``, by column, in order: arrays, bytes, str."""
    out: dict[str, list] = {}
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for name, column in batch.items():
            out.setdefault(name, []).extend(list(column))
    return out


def _expected(reader, rows, epoch: int = 0) -> dict[str, list]:
    """What packread's own reader gives for ``rows``, by array, one value a row."""
    got = reader.batch(rows, epoch=epoch)
    if not isinstance(got, dict):
        got = {reader._chosen[0]: got}
    out = {}
    for name, value in got.items():
        if name in reader.ragged_keys and isinstance(value, tuple):  # ragged="flat"
            values, offsets = value[:2]
            bounds = np.asarray(offsets).tolist()
            value = [values[a:b] for a, b in itertools.pairwise(bounds)]
        out[name] = list(value)
    return out


def _same_value(got, want) -> bool:
    if isinstance(want, (bytes, str)):
        return type(got) is type(want) and got == want
    want = np.asarray(want)
    got = np.asarray(got)
    return (
        got.shape == want.shape
        and got.dtype == want.dtype.newbyteorder("=")
        and np.array_equal(got, want, equal_nan=want.dtype.kind in "fc")
    )


def _check_equal(got: dict[str, list], want: dict[str, list]) -> None:
    assert list(got) == list(want)
    for name in want:
        assert len(got[name]) == len(want[name]), name
        bad = [
            k
            for k, (g, w) in enumerate(zip(got[name], want[name], strict=False))
            if not _same_value(g, w)
        ]
        assert not bad, f"{name}: rows {bad[:5]} differ"


# -- the format matrix -------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASE_NAMES)
def test_every_row_of_every_case_equals_the_reader(cluster, cases, name):
    case: Case = cases[name]
    reader = case.open()
    ds = packread.ray.read(reader, rows_per_block=5)
    want = _expected(reader, range(len(reader)))
    _check_equal(_rows(ds), want)
    assert ds.count() == len(reader)
    # The reader given is the caller's: still open.
    assert not reader.closed


def test_sources_as_a_user_gives_them(cluster, cases, tmp_path):
    """Paths, a glob of shards, bytes and options go through packread.open."""
    h5 = cases["h5"]
    ds = packread.ray.read(h5.source, arrays=h5.datasets)
    _check_equal(_rows(ds), _expected(h5.open(), range(h5.open().__len__())))
    shards = cases["h5_shards"]
    _check_equal(
        _rows(packread.ray.read(shards.source, arrays=shards.datasets)),
        _expected(shards.open(), range(len(shards.open()))),
    )
    with open(cases["zip_raw"].source, "rb") as f:
        data = f.read()
    z = cases["zip_raw"]
    _check_equal(
        _rows(packread.ray.read(data, format="zip", **z.options)),
        _expected(z.open(), range(len(z.open()))),
    )


def test_images_are_decoded_and_cropped_in_the_task_each_epoch_its_own(cluster, cases):
    """Random crops draw from the execution's epoch: each execution is the next epoch."""
    src = cases["img_zip"].source
    decode = packread.ImageDecode(12, crop="random", flip=True)
    reader = packread.open(src, decode=decode)
    ds = packread.ray.read(src, decode=decode, rows_per_block=8)
    first, second = _rows(ds), _rows(ds)
    _check_equal(first, _expected(reader, range(len(reader)), epoch=0))
    _check_equal(second, _expected(reader, range(len(reader)), epoch=1))
    assert not all(
        np.array_equal(a, b) for a, b in zip(first["images"], second["images"], strict=False)
    )
    # Starting at a given epoch.
    _check_equal(
        _rows(packread.ray.read(src, decode=decode, epoch=5)),
        _expected(reader, range(len(reader)), epoch=5),
    )


def test_columns_are_tensors_lists_and_strings(cluster, cases):
    schema = packread.ray.read(cases["h5"].source).schema()
    types = dict(zip(schema.names, schema.types, strict=False))
    assert "Tensor" in repr(types["images"]) or "tensor" in repr(types["images"]).lower()
    ragged = packread.ray.read(cases["h5_ragged"].source).schema()
    assert "list" in repr(ragged.types[ragged.names.index("seqs")]).lower()
    tar = packread.ray.read(cases["tar_one"].open()).schema()
    assert tar.names == cases["tar_one"].open().keys()


# -- planning ------------------------------------------------------------------------------------


def test_segments_fall_on_chunk_and_shard_boundaries():
    assert cut([10, 10], 4, 6) == [(0, 4), (4, 10), (10, 14), (14, 20)]
    assert cut([3, 3, 3], 1, 5) == [(0, 5), (5, 9)]
    assert cut([0, 5, 0], 2, 100) == [(0, 5)]
    rng = np.random.default_rng(3)
    for _ in range(300):
        lengths = rng.integers(0, 30, rng.integers(1, 6)).tolist()
        chunk, rows = int(rng.integers(1, 9)), int(rng.integers(1, 40))
        segs = cut(lengths, chunk, rows)
        starts = np.cumsum([0, *lengths])
        bounds = {
            int(s) + k * chunk
            for s, n in zip(starts, lengths, strict=False)
            for k in range(n // chunk + 1)
        }
        bounds |= {int(s) for s in starts}
        total = int(starts[-1])
        assert [a for a, _ in segs] == ([0, *[b for _, b in segs[:-1]]] if segs else [])
        assert (segs[-1][1] if segs else 0) == total
        for a, b in segs:
            assert a < b
            assert b in bounds
            # Longer than asked only where one chunk is.
            assert b - a <= rows or not any(a < x < b for x in bounds)
    groups = balance([(0, 2), (2, 4), (4, 6), (6, 7)], 2)
    assert groups == [[(0, 2), (2, 4)], [(4, 6), (6, 7)]]


def test_read_tasks_follow_the_chunks_and_the_block_size(tmp_path):
    path = str(tmp_path / "chunked.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "x", data=np.arange(1000 * 64, dtype=np.float32).reshape(1000, 64), chunks=(7, 64)
        )
    source = packread.ray.PackreadDatasource(path)
    assert source.estimate_inmemory_data_size() == 1000 * 64 * 4
    ctx = ray.data.DataContext.get_current()
    old = ctx.target_max_block_size
    ctx.target_max_block_size = 64 * 4 * 50  # 50 rows a block
    try:
        tasks = source.get_read_tasks(4)
    finally:
        ctx.target_max_block_size = old
    assert len(tasks) == 4
    segments = [s for t in tasks for s in t.read_fn.segments]
    assert segments == sorted(segments)
    assert sum(b - a for a, b in segments) == 1000
    for a, b in segments:
        assert a % 7 == 0
        assert b % 7 == 0 or b == 1000
        assert b - a <= 50
    # A task yields a block a segment.
    assert all(len(t.read_fn.segments) > 1 for t in tasks)
    assert sum(t.metadata.num_rows for t in tasks) == 1000
    assert sum(t.metadata.size_bytes for t in tasks) == 1000 * 64 * 4


def test_estimate_is_the_decoded_size_not_the_stored_one(cases, tmp_path):
    src = cases["img_zip"].source
    decode = packread.ImageDecode(20)
    source = packread.ray.PackreadDatasource(src, decode=decode)
    n = len(packread.open(src, decode=decode))
    assert source.estimate_inmemory_data_size() == n * (20 * 20 * 3 + 8)
    path = str(tmp_path / "zeros.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "x", data=np.zeros((500, 1000), np.uint8), chunks=(10, 1000), compression="gzip"
        )
    assert os.path.getsize(path) < 100_000
    assert packread.ray.PackreadDatasource(path).estimate_inmemory_data_size() == 500_000


def test_per_task_row_limit_reads_no_further(tmp_path):
    path = str(tmp_path / "rows.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "x", data=np.arange(400 * 256, dtype=np.int32).reshape(400, 256), chunks=(8, 256)
        )
    source = packread.ray.PackreadDatasource(path, rows_per_block=16)
    (task,) = source.get_read_tasks(1, per_task_row_limit=20)
    before = _stats.counters()
    blocks = list(task())
    read = (_stats.counters() - before)[_stats._AT["read_bytes"]]
    assert sum(b.num_rows for b in blocks) == 20
    x = np.concatenate([BlockAccessor.for_block(b).to_batch_format("numpy")["x"] for b in blocks])
    assert np.array_equal(x, np.arange(20 * 256, dtype=np.int32).reshape(20, 256))
    assert read <= 24 * 256 * 4  # the chunks of the first 20 rows, no more


def test_limit_through_ray(cluster, tmp_path):
    path = str(tmp_path / "ids.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("ids", data=np.arange(300), chunks=(10,))
    got = packread.ray.read(path, rows_per_block=25).limit(37).take_all()
    assert [r["ids"] for r in got] == list(range(37))


def test_bad_arguments_are_refused(cases):
    src = cases["h5"].source
    with pytest.raises(MissingKeyError):
        packread.ray.PackreadDatasource(src, columns=["nope"])
    with pytest.raises(InvalidArgumentError):
        packread.ray.PackreadDatasource(src, rows_per_block=0)
    with pytest.raises(InvalidArgumentError):
        packread.ray.PackreadDatasource(src, seed=-1)
    with pytest.raises(InvalidArgumentError):
        packread.ray.PackreadDatasource(src, columns=["images", "images"])


# -- epochs and splits ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ids_h5(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ids") / "ids.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("ids", data=np.arange(1000, dtype=np.int64), chunks=(10,))
        f.create_dataset(
            "x", data=np.arange(1000 * 16, dtype=np.int16).reshape(1000, 16), chunks=(10, 16)
        )
    return path


def test_streaming_split_gives_every_row_exactly_once(cluster, ids_h5):
    ds = packread.ray.read(ids_h5, shuffle=True, seed=4, rows_per_block=40)
    splits = ds.streaming_split(2, equal=True)
    epochs: list[list[list[int]]] = [[], []]

    def consume(k: int) -> None:
        for _ in range(2):  # two epochs, every consumer in each
            ids: list[int] = []
            for batch in splits[k].iter_batches(batch_size=32, batch_format="numpy"):
                assert np.array_equal(batch["x"][:, 0], batch["ids"] * 16)
                ids.extend(batch["ids"].tolist())
            epochs[k].append(ids)

    threads = [threading.Thread(target=consume, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert all(len(e) == 2 for e in epochs)
    orders = []
    for epoch in range(2):
        a, b = epochs[0][epoch], epochs[1][epoch]
        assert len(a) == len(b) == 500
        assert sorted(a + b) == list(range(1000))
        orders.append(a + b)
    assert orders[0] != orders[1]  # the next epoch's segment order


def test_shuffle_orders_segments_from_the_seed(cluster, ids_h5):
    def order(seed: int, epoch: int) -> list[int]:
        ds = packread.ray.read(ids_h5, shuffle=True, seed=seed, epoch=epoch, rows_per_block=50)
        return [int(v) for v in _rows(ds)["ids"]]

    a = order(7, 0)
    assert sorted(a) == list(range(1000))
    assert a != list(range(1000))
    assert a == order(7, 0)
    assert a != order(7, 1)
    assert a != order(8, 0)
    # Whole segments, each in order.
    runs = [a[k : k + 50] for k in range(0, 1000, 50)]
    assert all(r == list(range(r[0], r[0] + 50)) and r[0] % 50 == 0 for r in runs)
    assert [int(v) for v in _rows(packread.ray.read(ids_h5))["ids"]] == list(range(1000))


# -- projection ----------------------------------------------------------------------------------


def test_select_columns_reads_only_those_arrays(cluster, tmp_path):
    path = str(tmp_path / "two.h5")
    big = np.random.default_rng(1).integers(0, 255, (200, 64, 64), dtype=np.uint8)
    with h5py.File(path, "w") as f:
        f.create_dataset("big", data=big, chunks=(1, 64, 64))
        f.create_dataset("ids", data=np.arange(200), chunks=(50,))
    ds = packread.ray.read(path)
    narrow = ds.select_columns(["ids"])
    assert narrow.schema().names == ["ids"]
    assert [r["ids"] for r in narrow.take_all()] == list(range(200))
    # Ray pushed the projection into the source: its read tasks read "ids" alone.
    from ray.data._internal.logical.optimizers import LogicalOptimizer

    plan = LogicalOptimizer().optimize(narrow._logical_plan)
    reads = [op for op in plan.dag.post_order_iter() if hasattr(op, "datasource")]
    assert len(reads) == 1
    assert reads[0].datasource.columns == ["ids"]
    assert type(plan.dag).__name__ != "Project"

    def bytes_read(source) -> int:
        before = _stats.counters()
        for task in source.get_read_tasks(2):
            for _ in task():
                pass
        return int((_stats.counters() - before)[_stats._AT["read_bytes"]])

    source = packread.ray.PackreadDatasource(path)
    everything = bytes_read(source)
    only_ids = bytes_read(reads[0].datasource)
    assert everything >= big.nbytes
    assert only_ids <= 200 * 8 * 2 < big.nbytes


# -- object storage ------------------------------------------------------------------------------


def _carried(source) -> list:
    """The index cache entries ``source``'s tasks carry."""
    return pickle.loads(source._payload)[1]


def test_s3_read_equals_the_local_one_and_tasks_carry_the_index(
    cluster, s3, cases, tmp_path, monkeypatch
):
    bucket = s3.bucket("ray")
    h5 = cases["h5_lzf"]
    url = s3.put(bucket, "data.h5", h5.source)
    storage = {
        "endpoint": s3.endpoint,
        "access_key_id": s3.access_key_id,
        "secret_access_key": s3.secret_access_key,
        "region": s3.region,
        "allow_http": True,
    }
    cache = tmp_path / "index"
    remote = packread.Remote(storage, index_cache=cache)
    local = _rows(packread.ray.read(h5.source, arrays=h5.datasets))
    _check_equal(_rows(packread.ray.read(url, arrays=h5.datasets, remote=remote)), local)
    # Shards in object storage.
    shards = [s3.put(bucket, f"s{k}.h5", p) for k, p in enumerate(cases["h5_shards"].source)]
    sh = cases["h5_shards"]
    _check_equal(
        _rows(packread.ray.read(shards, arrays=sh.datasets, remote=remote)),
        _rows(packread.ray.read(sh.source, arrays=sh.datasets)),
    )
    sharded = packread.ray.PackreadDatasource(shards, arrays=sh.datasets, remote=remote)
    assert len(_carried(sharded)) == len(shards)  # every shard's entry travels
    # Images in object storage, decoded in the tasks.
    img = cases["img_zip"]
    img_url = s3.put(bucket, "images.zip", img.source)
    decode = packread.ImageDecode(12, crop="random")
    _check_equal(
        _rows(packread.ray.read(img_url, decode=decode, remote=remote)),
        _expected(packread.open(img.source, decode=decode), range(len(img.open()))),
    )

    # The tasks carry what opening the object read: on a node whose cache has no entry
    # (removed here), a task's open replays it and asks the server for data only.
    source = packread.ray.PackreadDatasource(url, arrays=h5.datasets, remote=remote)
    (entry,) = _carried(source)
    assert entry[1].endswith(".pridx")
    assert (cache / "index" / entry[1]).read_bytes() == entry[2]

    def run(src) -> tuple[int, bool]:
        packread.ray._OPENED.clear()
        shutil.rmtree(cache / "index", ignore_errors=True)
        before = _stats.counters()
        for task in src.get_read_tasks(1):
            for _ in task():
                pass
        requests = int((_stats.counters() - before)[_stats._AT["network_calls"]])
        (reader,) = packread.ray._OPENED.values()
        return requests, reader._source.index_hit

    with_index, hit = run(source)
    assert hit
    monkeypatch.setattr(packread.ray, "_index_entries", lambda reader: [])
    bare = packread.ray.PackreadDatasource(url, arrays=h5.datasets, remote=remote)
    assert _carried(bare) == []
    without, missed = run(bare)
    assert not missed
    assert with_index < without


# -- faults ------------------------------------------------------------------------------------


def test_a_task_killed_mid_read_is_retried_and_the_result_exact(cluster, tmp_path):
    path = str(tmp_path / "slow.h5")
    n = 3000
    rng = np.random.default_rng(2)
    data = (rng.integers(0, 255, (n, 3, 64, 64), dtype=np.uint8) & 0xF0).astype(np.uint8)
    data[:, 0, 0, :2] = np.stack([np.arange(n) % 256, np.arange(n) // 256], axis=1)
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "x", data=data, chunks=(1, 3, 64, 64), compression="gzip", compression_opts=9
        )
    killed: list[int] = []
    stop = threading.Event()

    def killer() -> None:
        while not stop.is_set() and not killed:
            for p in psutil.process_iter(["cmdline", "name"]):
                try:
                    title = " ".join(p.info["cmdline"] or []) + (p.info["name"] or "")
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                if "ReadPackread" in title:
                    time.sleep(0.05)  # into its reads
                    try:
                        p.kill()
                        killed.append(p.pid)
                    except psutil.NoSuchProcess:
                        continue
                    return
            time.sleep(0.01)

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        ds = packread.ray.read(path, rows_per_block=100, ray_remote_args={"max_retries": 5})
        got = np.concatenate(
            [b["x"] for b in ds.iter_batches(batch_size=None, batch_format="numpy")]
        )
    finally:
        stop.set()
        thread.join()
    assert killed, "no read task was seen running"
    assert got.shape == data.shape
    assert np.array_equal(got, data)


def test_default_tasks_are_two_per_cpu_or_what_the_block_size_needs(cluster, ids_h5):
    source = packread.ray.PackreadDatasource(ids_h5)
    assert packread.ray.default_tasks(source) == 2 * 2  # the cluster's 2 CPUs
    ctx = ray.data.DataContext.get_current()
    old = ctx.target_max_block_size
    ctx.target_max_block_size = source.estimate_inmemory_data_size() // 9
    try:
        assert packread.ray.default_tasks(source) == 10
    finally:
        ctx.target_max_block_size = old
    ds = packread.ray.read(ids_h5)
    assert [int(v) for v in _rows(ds)["ids"]] == list(range(1000))
    assert "4 tasks executed" in ds.stats()


def test_a_source_that_does_not_pickle_is_refused_and_bytes_io_travels(cluster, cases):
    path = cases["h5"].source
    with open(path, "rb") as f, pytest.raises(PackreadTypeError, match="does not pickle"):
        packread.ray.PackreadDatasource(f)
    with open(path, "rb") as f:
        data = io.BytesIO(f.read())
    h5 = cases["h5"]
    _check_equal(
        _rows(packread.ray.read(data, arrays=h5.datasets)),
        _expected(h5.open(), range(len(h5.open()))),
    )


def test_a_dataset_outlives_a_restarted_session(cluster, ids_h5):
    """The reader is put in the object store once a session: a new session puts it again."""
    source = packread.ray.PackreadDatasource(ids_h5)
    source.get_read_tasks(2)
    first = source._payload_ref
    source._payload_ref = ("a session shut down", first[1])
    (task,) = source.get_read_tasks(1)
    assert source._payload_ref[0] == first[0]
    assert sum(b.num_rows for b in task()) == 1000
