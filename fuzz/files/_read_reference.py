"""What the fuzzer's reference worker does with one input: the same file read by the library
that wrote it (h5py with hdf5plugin, PyTables, zipfile with numpy.load, numpy.load), row by row
where a whole read fails, so that every row packread returned can be checked against it.

Results are plain dicts of arrays, bytes and error tuples (type, False, message)."""

from __future__ import annotations

import io
import warnings
import zipfile
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

Err = tuple[str, bool, str]

#: As the packread side: rows read per dataset when packread did not say which, and bytes.
CAP_ROWS = 512
MAX_READ_BYTES = 32 << 20


def error_of(exc: BaseException) -> Err:
    kind = type(exc)
    text = str(exc)
    if "HDF5 error back trace" in text:  # PyTables: the innermost libhdf5 messages say why
        lines = [x.strip() for x in text.splitlines()]
        said = [x for x in lines if x and not x.startswith(("File ", "HDF5 error", "End of"))]
        text = " / ".join(said[-2:])
    return f"{kind.__module__}.{kind.__qualname__}", False, text[:600]


def _slice(obj: Any, a: int, b: int) -> Any:
    return obj[a:b]


def _read_rows(
    rows: list[int], block: Callable[[int, int], Any], vlen: bool
) -> tuple[dict[int, Any], dict[int, Err]]:
    """Rows ``rows`` of a dataset: one read of the span they cover where that is cheap and
    works, else row by row. Fixed-size rows come back as arrays of one row (shape (1, ...)),
    variable-length rows as the library gives an element (array or bytes)."""
    values: dict[int, Any] = {}
    errors: dict[int, Err] = {}
    wanted = sorted(set(rows))
    if not wanted:
        return values, errors

    def put(start: int, got: Any) -> None:
        for j in range(len(got)):
            values[start + j] = got[j] if vlen else np.array(got[j : j + 1], copy=True)

    lo, hi = wanted[0], wanted[-1]
    if hi - lo + 1 <= 4 * len(wanted) + 16:
        try:
            got = block(lo, hi + 1)
            if len(got) != hi + 1 - lo:
                raise IndexError(f"{len(got)} rows for [{lo}, {hi + 1})")
            put(lo, got)
            return {i: values[i] for i in wanted}, errors
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:
            values.clear()
    for i in wanted:
        try:
            got = block(i, i + 1)
            if len(got) != 1:
                raise IndexError(f"{len(got)} rows for row {i}")
            put(i, got)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            errors[i] = error_of(exc)
    return values, errors


def _default_rows(shape: tuple[int, ...], itemsize: int) -> list[int]:
    if not shape:
        return []
    row = int(np.prod(shape[1:], dtype=object)) * max(itemsize, 1)
    return list(range(min(shape[0], CAP_ROWS, MAX_READ_BYTES // max(row, 1))))


def _dataset_result(
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    vlen: bool,
    rows: list[int] | None,
    block: Callable[[int, int], Any],
) -> dict[str, Any]:
    itemsize = 16 if vlen else dtype.itemsize

    def result(values: dict[int, Any], errors: dict[int, Err]) -> dict[str, Any]:
        return {
            "shape": shape,
            "dtype": dtype.str,
            "vlen": vlen,
            "values": values,
            "errors": errors,
        }

    if rows is None:
        rows = _default_rows(shape, itemsize)
    elif shape:
        row = int(np.prod(shape[1:], dtype=object)) * max(itemsize, 1)
        if row * len(set(rows)) > MAX_READ_BYTES:  # a mutated shape: not read, not trusted
            too_big: Err = ("harness.TooBig", False, f"rows of {row} bytes")
            return result({}, dict.fromkeys(rows, too_big))
    if not shape:
        scalar: Err = ("harness.Scalar", False, "a scalar dataset has no rows")
        return result({}, dict.fromkeys(rows, scalar))
    return result(*_read_rows(rows, block, vlen))


def read_h5py(path: str, request: dict[str, list[int]]) -> dict[str, Any]:
    import h5py
    import hdf5plugin  # noqa: F401 - registers the blosc, blosc2, bitshuffle, lz4, zstd filters

    out: dict[str, Any] = {"open_error": None, "walk_error": None, "datasets": {}}
    try:
        f = h5py.File(path, "r")
    except BaseException as exc:
        out["open_error"] = error_of(exc)
        return out
    with f:
        names: list[str] = []

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                names.append(name)

        try:
            f.visititems(visit)
        except BaseException as exc:
            out["walk_error"] = error_of(exc)
        for name in list(request):
            if name not in names:
                names.append(name)
        for name in names:
            try:
                d = f[name]
                shape, dtype = tuple(d.shape), d.dtype
                vlen = h5py.check_vlen_dtype(dtype) is not None or (
                    h5py.check_string_dtype(dtype) is not None
                    and h5py.check_string_dtype(dtype).length is None
                )
            except BaseException as exc:
                out["datasets"][name] = {"error": error_of(exc)}
                continue
            out["datasets"][name] = _dataset_result(
                shape, dtype, vlen, request.get(name), partial(_slice, d)
            )
    return out


def read_pytables(path: str, request: dict[str, list[int]]) -> dict[str, Any]:
    import tables

    out: dict[str, Any] = {"open_error": None, "walk_error": None, "datasets": {}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            f = tables.open_file(path, "r")
        except BaseException as exc:
            out["open_error"] = error_of(exc)
            return out
        try:
            leaves: dict[str, Any] = {}
            try:
                for node in f.walk_nodes("/", "Leaf"):
                    leaves[node._v_pathname.lstrip("/")] = node
            except BaseException as exc:
                out["walk_error"] = error_of(exc)
            for name in list(request):
                if name not in leaves:
                    try:
                        leaves[name] = f.get_node("/" + name)
                    except BaseException as exc:
                        out["datasets"][name] = {"error": error_of(exc)}
            for name, node in leaves.items():
                try:
                    vlen = isinstance(node, tables.VLArray)
                    shape = tuple(node.shape)
                    dtype = np.dtype(node.atom.dtype if vlen else node.dtype)
                    if vlen:
                        shape = (int(node.nrows),)
                except BaseException as exc:
                    out["datasets"][name] = {"error": error_of(exc)}
                    continue
                out["datasets"][name] = _dataset_result(
                    shape, dtype, vlen, request.get(name), partial(_slice, node)
                )
        finally:
            f.close()
    # A second opinion: PyTables reads blosc2 chunks directly (found by iterating the chunk
    # index), h5py through libhdf5's chunk lookup; on damaged B-trees they can disagree.
    out["h5py"] = read_h5py(path, request)
    return out


def _npy_load(raw: bytes) -> Any:
    return np.load(io.BytesIO(raw), allow_pickle=False)


def read_zipfile(path: str, request: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"open_error": None, "names": [], "infos": [], "raw": {}, "npy": {}}
    try:
        z = zipfile.ZipFile(path)
    except BaseException as exc:
        out["open_error"] = error_of(exc)
        return out
    with z:
        infos = z.infolist()
        out["names"] = [i.filename for i in infos]
        out["infos"] = [
            (i.filename, i.file_size, i.compress_size, i.compress_type, i.CRC) for i in infos
        ]
        for k, info in enumerate(infos[:64]):
            try:
                raw = z.read(info)
            except BaseException as exc:
                out["raw"][k] = error_of(exc)
                continue
            out["raw"][k] = raw
            if info.filename.endswith(".npy"):
                try:
                    out["npy"][k] = _npy_load(raw)
                except BaseException as exc:
                    out["npy"][k] = error_of(exc)
    return out


def read_numpy_npz(path: str, request: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"open_error": None, "keys": [], "values": {}}
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise TypeError(f"numpy.load gave a {type(npz).__name__}, not an NpzFile")
    except BaseException as exc:
        out["open_error"] = error_of(exc)
        return out
    with npz:
        out["keys"] = list(npz.files)
        for key in npz.files[:64]:
            try:
                out["values"][key] = npz[key]
            except BaseException as exc:
                out["values"][key] = error_of(exc)
    return out


def read_numpy_npy(path: str, request: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"open_error": None, "value": None}
    try:
        value = np.load(path, allow_pickle=False)
        if not isinstance(value, np.ndarray):
            raise TypeError(f"numpy.load gave a {type(value).__name__}, not an array")
        out["value"] = value
    except BaseException as exc:
        out["open_error"] = error_of(exc)
    return out


def _pil_rgb(path: str) -> Any:
    from PIL import Image

    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"))
    except BaseException as exc:  # PIL raises many kinds for damaged files
        return error_of(exc)


def read_pil(path: str, request: Any) -> dict[str, Any]:
    """PIL's ``Image.open(f).convert("RGB")`` of the damaged image and of the two good ones it
    is read between (in the folder the fuzzer wrote beside it)."""
    folder = f"{path}.d"
    return {
        "damaged": _pil_rgb(path),
        "goods": {0: _pil_rgb(f"{folder}/first.jpg"), 2: _pil_rgb(f"{folder}/second.jpg")},
    }


READERS: dict[str, Callable[[str, Any], dict[str, Any]]] = {
    "hdf5": read_h5py,
    "pytables": read_pytables,
    "zip": read_zipfile,
    "npz": read_numpy_npz,
    "npy": read_numpy_npy,
    "images": read_pil,
}


def read(fmt: str, path: str, request: Any) -> dict[str, Any]:
    return READERS[fmt](path, request)
