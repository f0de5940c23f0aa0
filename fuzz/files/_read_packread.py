"""What the fuzzer's packread worker does with one input: the calls users make, each recorded
as an *op* with what it returned (or raised) and what the reference must read to check it.

An op is a dict: ``label``, ``kind``, ``needs`` (what of the reference it is checked against:
``("all",)`` for a call that reads the whole file, or per format ``("rows", {dataset: rows})``,
``("raw", k)``, ``("keys", [...], repeat)``...), and ``value`` or ``error`` (an :data:`Err`).
Only numpy and packread are imported here: no other HDF5 library shares the process."""

from __future__ import annotations

import io
import random
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import packread

#: (exception type, is a PackreadError, message)
Err = tuple[str, bool, str]
Op = dict[str, Any]

#: Rows read per dataset at most, and bytes per batch, so that a mutated shape claiming 10^12
#: rows makes the harness ask for a sane batch (what packread allocates for it is its own).
CAP_ROWS = 512
MAX_BATCH_BYTES = 32 << 20
MAX_MEMBERS = 64


def error_of(exc: BaseException) -> Err:
    kind = type(exc)
    name = f"{kind.__module__}.{kind.__qualname__}"
    return name, isinstance(exc, packread.PackreadError), str(exc)[:600]


def _attempt(ops: list[Op], label: str, kind: str, needs: Any, fn: Callable[[], Any]) -> Any:
    """Runs ``fn`` as op ``label``; returns its value, or None if it raised (recorded)."""
    print(f"op {label}", file=sys.stderr, flush=True)  # the worker's log: where a crash was
    op: Op = {"label": label, "kind": kind, "needs": needs}
    ops.append(op)
    start = time.perf_counter()
    try:
        value = fn()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # PanicException is a BaseException: a failure like others
        op["error"] = error_of(exc)
        return None
    finally:
        op["seconds"] = time.perf_counter() - start
    op["value"] = value
    return value


def _indices(rng: random.Random, n: int) -> list[int]:
    """A few random indices in ``[-n, n)`` with a duplicate, as a shuffled batch has."""
    if n <= 0:
        return []
    idx = [rng.randrange(-n, n) for _ in range(rng.randint(1, 12))]
    idx.append(rng.choice(idx))
    return idx


def _rows(idx: list[int], n: int) -> list[int]:
    return [i + n if i < 0 else i for i in idx]


# --------------------------------------------------------------------------------------------
# HDF5 (h5py and PyTables files)


def _row_bytes(ds: packread.HDF5Dataset) -> int:
    if ds.vlen is not None:
        return 64
    return int(np.prod(ds.shape[1:], dtype=object)) * ds.dtype.itemsize


def _as_dict(name: str | None, value: Any) -> dict[str, Any]:
    return value if name is None else {name: value}


def read_hdf5(path: str, plan: dict[str, Any]) -> list[Op]:
    rng = random.Random(plan["rng"])
    via = plan.get("via", "path")
    ops: list[Op] = []

    def open_reader(names: str | list[str] | None = None, **kw: Any) -> packread.HDF5Reader:
        if via == "bytes":
            return packread.HDF5Reader(Path(path).read_bytes(), names, **kw)
        if via == "file object":  # the core's file-object source: seek/readinto under the GIL
            return packread.HDF5Reader(io.BytesIO(Path(path).read_bytes()), names, **kw)
        return packread.HDF5Reader(path, names, in_memory=via == "in_memory", **kw)

    r = _attempt(ops, f"HDF5Reader({via})", "open", ("all",), open_reader)
    if r is None:
        return ops
    ops[-1]["value"] = {
        "keys": r.keys(),
        "len": len(r),
        "skipped": r.skipped,
        "dtypes": {k: r[k].dtype.str for k in r.keys()},
    }
    n = len(r)
    names = r.keys()

    def read_one(name: str, idx: list[int]) -> dict[str, Any]:
        return {name: r[name].read(idx)}

    row_bytes = sum(_row_bytes(r[k]) for k in names)
    full = min(n, CAP_ROWS, MAX_BATCH_BYTES // max(row_bytes, 1))
    if names and full > 0:
        rows = list(range(full))
        needs = ("rows", dict.fromkeys(names, rows))
        _attempt(ops, f"batch(range({full}))", "batch", needs, lambda: r.batch(range(full)))
        for _ in range(2):
            idx = _indices(rng, n)
            needs = ("rows", dict.fromkeys(names, _rows(idx, n)))
            _attempt(ops, f"batch({idx})", "batch", needs, partial(r.batch, idx))
        for name in names:
            idx = _indices(rng, n)
            needs = ("rows", {name: _rows(idx, n)})
            _attempt(ops, f"[{name!r}].read({idx})", "read", needs, partial(read_one, name, idx))
        vlen = [k for k in names if r[k].vlen is not None]
        if vlen:
            idx = _indices(rng, n)
            needs = ("rows", dict.fromkeys(vlen, _rows(idx, n)))
            _attempt(
                ops,
                f"HDF5Reader({vlen}, ragged='flat').batch({idx})",
                "flat",
                needs,
                lambda: open_reader(vlen, ragged="flat").batch(idx),
            )
    # Datasets left out of datasets=None (another sample count, a type packread refuses): each
    # opened by name, as a user would.
    for name in sorted(r.skipped)[:8]:

        def one(name: str = name) -> dict[str, Any]:
            single = open_reader(name)
            m = len(single)
            k = min(m, CAP_ROWS, MAX_BATCH_BYTES // max(_row_bytes(single[name]), 1))
            return {"n": k, "value": single.batch(range(k))}

        got = _attempt(ops, f"HDF5Reader({name!r}).batch(...)", "one", ("one", name), one)
        if got is not None:
            ops[-1]["needs"] = ("rows", {name: list(range(got["n"]))})
            ops[-1]["value"] = {name: got["value"]}
    return ops


# --------------------------------------------------------------------------------------------
# ZIP


def read_zip(path: str, plan: dict[str, Any]) -> list[Op]:
    ops: list[Op] = []
    via = plan.get("via", "path")
    source: Any = io.BytesIO(Path(path).read_bytes()) if via == "file object" else path
    z = _attempt(ops, f"ZipReader({via})", "open", ("all",), lambda: packread.ZipReader(source))
    if z is None:
        return ops
    ops[-1]["value"] = None

    def names_infos() -> tuple[list[str], list[tuple[Any, ...]]]:
        names = z.keys()
        return names, [tuple(z.info(k)) for k in range(len(names))]

    def first(k: int) -> Any:
        return z.batch([k])[0]

    listing = _attempt(ops, "keys()/info()", "names", ("names",), names_infos)
    names = listing[0] if listing is not None else z.keys()
    for k, name in enumerate(names[:MAX_MEMBERS]):
        _attempt(ops, f"read({k})", "raw", ("raw", k), partial(z.read, k))
        if name.endswith(".npy"):
            _attempt(ops, f"batch([{k}])[0]", "npy", ("npy", k), partial(first, k))
    raw = [k for k, n in enumerate(names[:MAX_MEMBERS]) if not n.endswith(".npy")]
    npy = [k for k, n in enumerate(names[:MAX_MEMBERS]) if n.endswith(".npy")]
    for kind, members in (("raw-stack", raw), ("npy-stack", npy)):
        if len(members) > 1:
            _attempt(ops, f"batch({members})", kind, (kind, members), partial(z.batch, members))
    return ops


# --------------------------------------------------------------------------------------------
# NPZ


def _has_rows(arr: Any) -> bool:
    """Whether packread reads ``arr``'s rows: at least 1-d, and C order (or one dimension)."""
    return isinstance(arr, np.ndarray) and arr.ndim >= 1 and bool(arr.flags.c_contiguous)


def _rows_possible_npz(data: bytes) -> bool:
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            infos = [i for i in z.infolist() if i.filename.endswith(".npy")]
            if any(i.compress_type != zipfile.ZIP_STORED for i in infos) or not infos:
                return False
        loaded = packread.load_npz(data)
    except Exception:
        return True
    arrays = [v for k, v in loaded.items()]
    return all(_has_rows(a) for a in arrays) and len({len(a) for a in arrays}) == 1


def _whole_loads(
    ops: list[Op], name: str, load: Callable[[Any], Any], path: str, data: bytes, **views: Any
) -> None:
    """Ops ``name(path)``, ``name(bytes)``, ``name(<view>)`` for each of ``views`` (other
    buffers of the same bytes) and ``name(file object)``: ``load`` of the whole input, checked
    against the whole file."""
    for how, source in {"path": path, "bytes": data, **views}.items():
        _attempt(ops, f"{name}({how})", "load", ("all",), partial(load, source))
    _attempt(ops, f"{name}(file object)", "load", ("all",), lambda: load(io.BytesIO(data)))


def read_npz(path: str, plan: dict[str, Any]) -> list[Op]:
    ops: list[Op] = []
    data = Path(path).read_bytes()
    _whole_loads(ops, "load_npz", packread.load_npz, path, data)
    # The rows of the archive's stored arrays, through a file object: where every array can
    # have rows (stored, C order, at least 1-d; else packread refuses by design), or where
    # zipfile cannot tell (a damaged archive: whatever packread does is judged).
    if _rows_possible_npz(data):
        rows = _attempt(
            ops,
            "NpzReader(file object)",
            "open",
            ("all",),
            lambda: packread.NpzReader(io.BytesIO(data)),
        )
        if rows is not None:
            ops[-1]["value"] = None
            n = len(rows)
            idx = _indices(random.Random(plan["rng"]), min(n, CAP_ROWS))
            _attempt(
                ops,
                f"NpzReader(file object).batch({idx})",
                "rows",
                ("rows", rows.keys(), _rows(idx, n)),
                partial(rows.batch, idx),
            )
    reader = _attempt(
        ops, "NpzReader([path])", "open", ("all",), lambda: packread.NpzReader([path])
    )
    if reader is not None:
        keys = reader.keys()
        ops[-1]["value"] = None
        _attempt(
            ops,
            "NpzReader.batch([0, -1])",
            "stack",
            ("keys", keys, 2),
            lambda: reader.batch([0, -1]),
        )
    return ops


# --------------------------------------------------------------------------------------------
# NPY


def read_npy(path: str, plan: dict[str, Any]) -> list[Op]:
    ops: list[Op] = []
    data = Path(path).read_bytes()
    shifted = memoryview(bytearray(b"\0" + data))[1:]  # unaligned: copied, not viewed
    _whole_loads(ops, "load_npy", packread.load_npy, path, data, unaligned=shifted)

    def rows() -> Any:  # the array's rows, read through a file object
        reader = packread.NpyReader(io.BytesIO(data))
        n = len(reader)
        idx = _indices(random.Random(plan["rng"]), min(n, CAP_ROWS))
        return {"rows": _rows(idx, n), "value": reader.batch(idx)}

    try:
        whole = packread.load_npy(data)
    except Exception:
        whole = None
    if whole is None or _has_rows(whole):
        _attempt(ops, "NpyReader(file object).batch(...)", "rows", ("rows",), rows)
    _attempt(
        ops,
        "NpyReader([path]).batch([0, -1, 0])",
        "stack",
        ("stack", 3),
        lambda: packread.NpyReader([path]).batch([0, -1, 0]),
    )
    return ops


# --------------------------------------------------------------------------------------------
# Encoded images: the damaged one alone, then between two good ones on one thread, in a ZIP, an
# ImageFolder tree and an HDF5 dataset of rows (the folder `_seeds.write_image_containers`
# wrote beside the input), decoded whole and through an eval crop.

IMAGE_MODES = {"whole": {"size": None}, "eval": {"size": 24}}


def _first(reader: packread.ImageReader, i: int) -> np.ndarray:
    return reader.batch([i])[0]


def read_images(path: str, plan: dict[str, Any]) -> list[Op]:
    ops: list[Op] = []
    folder = f"{path}.d"
    sources = {
        "zip": (f"{folder}/between.zip", {}),
        "tree": (f"{folder}/tree", {}),
        "rows": (f"{folder}/rows.h5", {"dataset": "images"}),
        "zip file object": (f"{folder}/between.zip", {}),
    }
    for mode, options in IMAGE_MODES.items():
        kw = {"num_threads": 1, **options}
        alone = packread.ImageReader(f"{folder}/alone.zip", labels=False, **kw)
        _attempt(ops, f"{mode}: alone", "damaged", ("damaged", mode), partial(_first, alone, 0))
        goods = packread.ImageReader(f"{folder}/goods.zip", labels=False, **kw)
        for k in (0, 2):
            _attempt(
                ops,
                f"{mode}: good {k} alone",
                "good-alone",
                ("good", k, mode),
                partial(_first, goods, k),
            )
        for name, (src, extra) in sources.items():
            labels = {"arrays": "images"} if name == "tree" else {"labels": False}
            if name == "zip file object":
                src = io.BytesIO(Path(src).read_bytes())  # type: ignore[assignment]
            reader = _attempt(
                ops,
                f"{mode}: ImageReader({name})",
                "open",
                ("open",),
                partial(packread.ImageReader, src, **labels, **extra, **kw),
            )
            if reader is None:
                continue
            ops[-1]["value"] = None
            for step, k in enumerate((0, 1, 2, 0)):
                label = f"{mode}: {name} batch([{k}]) #{step}"
                needs = ("again", mode) if k == 1 else ("good", k, mode)
                _attempt(
                    ops, label, "again" if k == 1 else "good", needs, partial(_first, reader, k)
                )
            skipping = packread.ImageReader(src, **labels, **extra, **kw, on_error="skip")

            def skipped(r: packread.ImageReader = skipping) -> Any:
                import warnings

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    got = r.batch([0, 1, 2, 0])
                return {"slots": [got[0], got[2], got[3]], "errors": sorted(r.errors)}

            _attempt(ops, f"{mode}: {name} skip batch", "skip", ("skip", mode), skipped)
    return ops


READERS: dict[str, Callable[[str, dict[str, Any]], list[Op]]] = {
    "hdf5": read_hdf5,
    "pytables": read_hdf5,
    "zip": read_zip,
    "npz": read_npz,
    "npy": read_npy,
    "images": read_images,
}


def read(fmt: str, path: str, plan: dict[str, Any]) -> list[Op]:
    return READERS[fmt](path, plan)
