"""packread as a Ray Data source: :func:`read` gives a ``ray.data.Dataset`` whose read tasks run
packread's readers on the cluster's CPU nodes (``pip install packread[ray]``).

The reader is opened once, on the driver, through :func:`packread.open` (so with its options
and any source it takes). Its index decides the read tasks: the samples are cut into
*segments*, contiguous row ranges that begin and end on storage chunk boundaries (an HDF5
chunk, a ZIP or tar member, NPY rows; a segment may run on from one shard into the next) and
decode to at most Ray's target block size. A read task reads a run of segments, one block
each, with the GIL released and packread's own pool. Tasks carry the reader pickled (its
source, options and counted shard state, put once in Ray's object store) and, for objects in
object storage, the index entries opening them wrote (headers, directories, chunk indexes):
on a node that has never seen the object, the open replays them and makes no metadata request.

Columns are the reader's arrays (HDF5 datasets, NPZ keys, tar and ZIP fields, images and
labels): fixed-shape samples are Ray tensor columns (scalars plain Arrow columns); samples of
different sizes are variable-shaped tensor columns (images, arrays of their own shape), list
columns (variable-length 1-D arrays), binary (bytes) or string columns (text, and JSON as its
text). ``select_columns`` is pushed down: only the selected arrays are read.

Order: with ``shuffle=True`` the segments' order is drawn from ``(seed, epoch)``, and each
execution of the dataset (each epoch of ``iter_batches``, ``iter_torch_batches`` or a
``streaming_split``) draws the next epoch's; rows within a segment keep their order (use
``local_shuffle_buffer_size=`` to mix them). Random image crops draw from the same epoch.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

try:
    import pyarrow as pa
    import ray
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask
    from ray.data.extensions import ArrowTensorArray, ArrowVariableShapedTensorArray
except ImportError as e:  # pragma: no cover - said to whoever imports it without Ray
    raise ImportError(
        "packread.ray needs Ray Data: pip install 'packread[ray]' (ray[data] >= 2.60)"
    ) from e

from . import _packread, _remote
from ._epoch import check_int
from ._open import open as open_reader
from ._options import Remote
from ._reader import ArrayInfo, ArrayReader
from ._segments import Segment, balance, cut, rows_for
from .errors import DecodeError, InvalidArgumentError, MissingKeyError, PackreadTypeError

__all__ = ["TASKS_PER_CPU", "PackreadDatasource", "default_tasks", "read"]

#: Rows read on the driver to measure what a row of variable-size arrays decodes to.
SAMPLE_ROWS = 16


def read(
    source: Any,
    *,
    columns: str | Sequence[str] | None = None,
    shuffle: bool = False,
    seed: int = 0,
    epoch: int = 0,
    rows_per_block: int | None = None,
    override_num_blocks: int | None = None,
    concurrency: int | None = None,
    ray_remote_args: dict[str, Any] | None = None,
    **options: Any,
) -> ray.data.Dataset:
    """A ``ray.data.Dataset`` of ``source``'s samples, one row each, read by packread.

    ``source`` and ``options`` are what :func:`packread.open` takes (a path, URL, list or glob
    of files, bytes or a file object; ``format=``, ``remote=``, image options...), or a
    packread reader. ``columns`` names the arrays to read (default: all). ``shuffle`` draws
    the segments' order from ``(seed, epoch)``, the next epoch's at each execution.
    ``rows_per_block`` bounds a block's rows (default: what fits Ray's
    ``target_max_block_size``); ``override_num_blocks`` is the read tasks asked for (default:
    :func:`default_tasks`); ``concurrency`` and ``ray_remote_args`` are Ray's read options.

    >>> ds = packread.ray.read("train.h5")  # doctest: +SKIP
    >>> ds.select_columns(["labels"]).take(2)  # doctest: +SKIP
    [{'labels': 0}, {'labels': 1}]
    """
    datasource = PackreadDatasource(
        source,
        columns=columns,
        shuffle=shuffle,
        seed=seed,
        epoch=epoch,
        rows_per_block=rows_per_block,
        **options,
    )
    extra: dict[str, Any] = {}
    if concurrency is not None:
        extra["concurrency"] = concurrency
    if override_num_blocks is None:
        override_num_blocks = default_tasks(datasource)
    return ray.data.read_datasource(
        datasource,
        override_num_blocks=override_num_blocks,
        ray_remote_args=ray_remote_args,
        **extra,
    )


#: Read tasks asked for by default, per CPU of the cluster.
TASKS_PER_CPU = 2


def default_tasks(datasource: PackreadDatasource) -> int | None:
    """The read tasks :func:`read` asks for when not told: ``TASKS_PER_CPU`` per CPU of the
    cluster, and at least enough that no task's rows exceed Ray's target block size (Ray's
    own default, at least 200 tasks, makes tasks of a few rows on a small cluster, and Ray's
    cost per task then outweighs the decoding: measured in benches/RESULTS.md). ``None``
    (Ray decides) before Ray is started."""
    if not ray.is_initialized():
        return None
    cpus = int(ray.cluster_resources().get("CPU", 1))
    target = int(ray.data.DataContext.get_current().target_max_block_size or 128 << 20)
    by_size = -(-datasource.estimate_inmemory_data_size() // target)
    return max(1, TASKS_PER_CPU * cpus, by_size)


class PackreadDatasource(Datasource):
    """The ``ray.data.Datasource`` :func:`read` reads through (see the module): packread's
    index cut into read tasks, projection pushed down, the decoded size estimated.

    >>> source = packread.ray.PackreadDatasource("train.h5")
    >>> source.estimate_inmemory_data_size(), source.columns
    (197120, ['images', 'labels'])
    """

    def __init__(
        self,
        source: Any,
        *,
        columns: str | Sequence[str] | None = None,
        shuffle: bool = False,
        seed: int = 0,
        epoch: int = 0,
        rows_per_block: int | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        self._projection_map: dict[str, str] | None = None
        seed, epoch = check_int("seed", seed, 0), check_int("epoch", epoch, 0)
        if rows_per_block is not None:
            rows_per_block = check_int("rows_per_block", rows_per_block, 1)
        reader = open_reader(source, **options)
        ours = reader is not source  # a reader given is the caller's: left open
        if not isinstance(reader, ArrayReader):
            raise PackreadTypeError(
                f"packread.ray reads packread's readers, not {type(reader).__name__}"
            )
        infos = {n: reader._arrays[n] for n in reader._chosen}
        names = list(infos) if columns is None else _names(columns)
        for n in names:
            if n not in infos:
                raise MissingKeyError(
                    f"{reader._describe()}: no array {n!r} (arrays: {list(infos)})"
                )
        self._infos = {n: infos[n] for n in names}
        self._shuffle = bool(shuffle)
        self._seed = int(seed)
        # Shared by the copies Ray makes of this source (projection): executions in turn.
        self._epochs = [int(epoch)]
        self._rows_per_block = None if rows_per_block is None else int(rows_per_block)
        self._num_rows = len(reader)
        self._rows_per_chunk = max(1, int(reader.samples_per_chunk))
        shards = reader.shards
        self._lengths = [len(s.range) for s in shards]
        self._shard_paths = [os.fspath(s.path) for s in shards]
        first = _first_rows(reader, self._infos)
        self._schema = first.schema
        self._row_bytes = _row_bytes(self._infos, first)
        try:
            pickled = pickle.dumps(reader, protocol=pickle.HIGHEST_PROTOCOL)
        except (TypeError, AttributeError, pickle.PicklingError) as e:
            raise PackreadTypeError(
                f"packread.ray: read tasks run in other processes, and this source does not "
                f"pickle ({e}): pass a path, a URL, bytes or a BytesIO"
            ) from None
        self._key = hashlib.sha1(pickled).hexdigest()
        # What every task needs, put once in the object store: the reader, and the index cache
        # entries of its objects in object storage.
        self._payload = pickle.dumps((pickled, _index_entries(reader)))
        self._payload_ref: Any = None
        self._name = type(reader).__name__
        if ours:
            reader.close()

    # -- what Ray asks -------------------------------------------------------------------

    @property
    def columns(self) -> list[str]:
        """The columns a read gives: the arrays asked for, less what a projection left out."""
        if self._projection_map is None:
            return list(self._infos)
        return [n for n in self._infos if n in self._projection_map]

    def get_name(self) -> str:
        return "Packread"

    def supports_projection_pushdown(self) -> bool:
        return True

    def estimate_inmemory_data_size(self) -> int:
        """The decoded size of the columns read (not the bytes stored)."""
        return int(self._num_rows * sum(self._row_bytes[n] for n in self.columns))

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,
        data_context: Any = None,
    ) -> list[ReadTask]:
        """Read tasks for ``parallelism`` (at most that many), each a run of segments.

        Ray asks for tasks when it plans (``data_context`` not given) and once when it
        executes the dataset: each execution takes the next epoch's order."""
        if data_context is None:
            epoch = self._epochs[0]
        else:
            epoch = self._epochs[0]
            self._epochs[0] += 1
        context = data_context or ray.data.DataContext.get_current()
        names = self.columns
        if self._num_rows == 0:
            return []
        row_bytes = max(1, sum(self._row_bytes[n] for n in names))
        target = int(context.target_max_block_size or 128 << 20)
        rows = self._rows_per_block or rows_for(row_bytes, target, self._rows_per_chunk)
        parallelism = max(1, int(parallelism))
        # At least a segment for every task Ray asks for (fewer tasks, and Ray would split
        # their blocks), none larger than a block.
        rows = min(rows, max(1, self._num_rows // parallelism))
        segments = cut(self._lengths, self._rows_per_chunk, rows)
        if self._shuffle:
            order = _packread.epoch_order(len(segments), self._seed, epoch, 1, 1)
            segments = [segments[int(k)] for k in order]
        # Put once per Ray session (an object of a session shut down is gone).
        session = ray.get_runtime_context().get_job_id()
        if self._payload_ref is None or self._payload_ref[0] != session:
            self._payload_ref = (session, ray.put(self._payload))
        schema = pa.schema([self._schema.field(n) for n in names])
        tasks = []
        for group in balance(segments, parallelism):
            count = sum(b - a for a, b in group)
            meta = BlockMetadata(
                num_rows=count,
                size_bytes=int(count * sum(self._row_bytes[n] for n in names)),
                input_files=tuple(self._files_of(group)),
                exec_stats=None,
            )
            job = _Job(self._key, self._payload_ref[1], group, names, epoch, per_task_row_limit)
            tasks.append(ReadTask(job, meta, schema=schema, per_task_row_limit=per_task_row_limit))
        return tasks

    def _files_of(self, group: list[Segment]) -> list[str]:
        starts = np.cumsum([0, *self._lengths])
        files: list[str] = []
        for a, b in group:
            first = int(np.searchsorted(starts, a, side="right")) - 1
            last = int(np.searchsorted(starts, b - 1, side="right")) - 1
            for k in range(first, last + 1):
                if self._shard_paths[k] not in files:
                    files.append(self._shard_paths[k])
        return files

    def __repr__(self) -> str:
        return f"PackreadDatasource({self._name}, {self._num_rows} rows, columns={self.columns})"


# --------------------------------------------------------------------------------------------
# On the driver


def _names(columns: str | Sequence[str]) -> list[str]:
    names = [columns] if isinstance(columns, str) else list(columns)
    if not names or any(not isinstance(n, str) for n in names):
        raise PackreadTypeError("columns must be a name or a non-empty list of names")
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"columns are named more than once: {names}")
    return names


def _first_rows(reader: ArrayReader, infos: dict[str, ArrayInfo]) -> pa.Table:
    """A block of the first rows (up to ``SAMPLE_ROWS``), read as a read task reads them: the
    blocks' schema, and what a row of variable size decodes to."""
    if not len(reader):
        return pa.table({n: pa.array([], pa.null()) for n in infos})
    return _block(_read_rows(reader, 0, min(len(reader), SAMPLE_ROWS), list(infos), 0), infos)


def _row_bytes(infos: dict[str, ArrayInfo], first: pa.Table) -> dict[str, int]:
    """What one row of each array decodes to: exact for fixed-size arrays, measured on the
    ``first`` rows for the others."""
    out = {}
    for n, info in infos.items():
        if info.ragged is None:
            out[n] = int(np.prod(info.shape, dtype=np.int64)) * info.dtype.itemsize
        else:
            out[n] = max(1, first.column(n).nbytes // max(1, first.num_rows))
    return out


def _index_entries(reader: ArrayReader) -> list[tuple[str, str, bytes]]:
    """``(cache folder, entry name, bytes)`` of the index cache entry of every object in
    object storage the reader opened (its headers, directories and chunk indexes): a read
    task puts them where its open looks, so that it makes no metadata request."""
    objects: list[tuple[str, Any, Any]] = []  # (url, stamp, folder)

    def walk(value: Any) -> None:
        if _remote.is_remote(value):
            objects.append((value.url, _remote.stamp_of(value), value.cache_dir))
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)

    walk(reader._source)
    state = reader._state()
    if state is not None:
        folder = Remote._of(reader._kwargs.get("remote"))._binding()["index_cache"]
        for path, stamp in zip(reader.paths, state.get("stamps") or [], strict=False):
            if stamp is not None and _remote.is_url(path):
                objects.append((path, list(stamp), folder))
    out = []
    for url, (size, etag, modified), folder in objects:
        if folder is None or (etag is None and modified is None):
            continue
        path = _packread.index_entry_path(folder, url, size, etag, modified)
        try:
            with open(path, "rb") as f:
                out.append((os.fspath(folder), path.name, f.read()))
        except OSError:
            continue  # not written (a cache turned off, a folder not writable)
    return out


# --------------------------------------------------------------------------------------------
# In a read task


class _Job:
    """What one read task runs: open the reader (once per worker process), then read each
    segment as one block. A class, not a closure: it pickles small (the reader travels as an
    object reference)."""

    def __init__(
        self,
        key: str,
        payload: Any,
        segments: list[Segment],
        names: list[str],
        epoch: int,
        limit: int | None = None,
    ) -> None:
        self.key, self.payload = key, payload
        self.segments, self.names, self.epoch, self.limit = segments, names, epoch, limit

    def __call__(self) -> Iterator[pa.Table]:
        reader = _opened(self.key, self.payload)
        infos = {n: reader._arrays[n] for n in self.names}
        left = self.limit
        for a, b in self.segments:
            if left is not None:  # Ray's per-task row limit (a `limit()` pushed down): no more read
                if left <= 0:
                    return
                b = min(b, a + left)
                left -= b - a
            yield _block(_read_rows(reader, a, b, self.names, self.epoch), infos)


#: Readers opened in this process, by their pickle's hash: a worker's later tasks reuse them.
_OPENED: OrderedDict[str, ArrayReader] = OrderedDict()
_OPENED_LOCK = threading.Lock()
_KEEP_OPEN = 4


def _opened(key: str, payload: Any) -> ArrayReader:
    """The reader of ``payload`` (an object reference, or its bytes), opened once in this
    process: its objects' index entries put in place first."""
    with _OPENED_LOCK:
        reader = _OPENED.get(key)
        if reader is not None:
            _OPENED.move_to_end(key)
            return reader
    raw = ray.get(payload) if isinstance(payload, ray.ObjectRef) else payload
    pickled, index = pickle.loads(raw)
    for folder, name, data in index:
        _put_entry(folder, name, data)
    reader = pickle.loads(pickled)
    with _OPENED_LOCK:
        _OPENED[key] = reader
        while len(_OPENED) > _KEEP_OPEN:
            _OPENED.popitem(last=False)[1].close()
    return reader


def _put_entry(folder: str, name: str, data: bytes) -> None:
    """Writes an index cache entry where an open looks for it, unless one is there (whole,
    through a temporary file renamed into place; a folder not writable is left alone: the
    open then reads the metadata itself)."""
    path = os.path.join(folder, "index", name)
    if os.path.exists(path):
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        return


def _read_rows(reader: ArrayReader, a: int, b: int, names: list[str], epoch: int) -> dict[str, Any]:
    """Rows ``a`` to ``b`` of the arrays ``names``, as one batch (variable-size arrays as
    flat buffers, whatever ``reader``'s own ``ragged=``: the mode is taken when a read
    starts)."""
    mode, reader._ragged = reader._ragged, "flat"
    try:
        if names == reader._chosen:  # the reader's own batch (a ZIP's members of other kinds)
            pending = reader.batch_async(range(a, b), epoch=epoch)
        else:
            pending = reader._start(range(a, b), None, epoch, names, False)
    finally:
        reader._ragged = mode
    got = pending.result()
    return dict(got) if isinstance(got, dict) else {names[0]: got}


def _block(values: dict[str, Any], infos: dict[str, ArrayInfo]) -> pa.Table:
    """A batch as an Arrow table: one column per array."""
    return pa.table({n: _column(infos[n], values[n]) for n in infos})


def _column(info: ArrayInfo, value: Any) -> pa.Array:
    kind = info.ragged
    if kind is None:
        if not value.dtype.isnative:  # Arrow holds native byte order, as h5py gives it
            value = value.astype(value.dtype.newbyteorder("="))
        if value.ndim == 1:
            return pa.array(value)
        return ArrowTensorArray.from_numpy(value, column_name=info.name)
    if not isinstance(value, tuple):  # a reader that gives lists whatever the mode
        return _listed(info, value)
    if kind in ("images", "arrays"):
        values, offsets, shapes = value
        bounds = np.asarray(offsets).tolist()
        items = [
            values[bounds[k] : bounds[k + 1]].reshape(tuple(shape))
            for k, shape in enumerate(np.asarray(shapes).tolist() if kind == "images" else shapes)
        ]
        return ArrowVariableShapedTensorArray.from_numpy(items)
    values, offsets = value[0], np.asarray(value[1], dtype=np.int64)
    n = len(offsets) - 1
    if kind in ("bytes", "text", "json"):
        raw = np.ascontiguousarray(values).view(np.uint8)
        arrow_type = pa.large_binary() if kind == "bytes" else pa.large_string()
        array = pa.Array.from_buffers(
            arrow_type, n, [None, pa.py_buffer(offsets), pa.py_buffer(raw)]
        )
        if kind != "bytes":
            try:
                array.validate(full=True)
            except pa.ArrowInvalid as e:
                raise DecodeError(f"{info.name!r}: text that is not UTF-8 ({e})") from None
        return array
    if kind == "unicode":
        text = np.ascontiguousarray(values).astype("<u4", copy=False)
        bounds = offsets.tolist()
        items = [text[bounds[k] : bounds[k + 1]].tobytes().decode("utf-32-le") for k in range(n)]
        return pa.array(items, pa.large_string())
    # Variable-length arrays: a list column (elements of their own shape: flattened tensors).
    if values.ndim == 1:
        return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))
    bounds = offsets.tolist()
    return ArrowVariableShapedTensorArray.from_numpy(
        [values[bounds[k] : bounds[k + 1]] for k in range(n)]
    )


def _listed(info: ArrayInfo, items: list[Any]) -> pa.Array:
    if info.ragged == "bytes":
        return pa.array(items, pa.large_binary())
    if info.ragged in ("text", "unicode"):
        return pa.array(items, pa.large_string())
    return ArrowVariableShapedTensorArray.from_numpy(list(items))
