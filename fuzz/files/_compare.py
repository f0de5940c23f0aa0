"""Judging one input: each packread op against what the reference read.

An op's verdict is one of

- ``ok``: packread and the reference read it, bit for bit the same (dtype, shape, bytes);
- ``both-refused``: packread raised a ``PackreadError`` and the reference failed too;
- ``packread-refused``: packread raised a ``PackreadError``, the reference read it (a
  *difference*: reported, not a failure);
- ``reference-refused``: packread read it, the reference failed (reported);
- ``reference-defect``: the values differ by a known behaviour of the reference: h5py cuts
  variable-length strings, and zipfile member names, at their first NUL; PyTables and h5py
  read a row differently (PyTables finds blosc2 chunks by iterating the chunk index, h5py and
  packread by libhdf5's lookup, which a damaged B-tree can send elsewhere) and packread
  agrees with h5py;
- ``FAIL:error``: packread raised something that is not a ``PackreadError``;
- ``FAIL:mismatch``: packread returned data different from what the reference read.

(Crashes and hangs are judged by the harness: they never reach here.)"""

from __future__ import annotations

from typing import Any

import numpy as np

Verdict = tuple[str, str]  # (verdict, detail)

OK = "ok"
BOTH = "both-refused"
PR_REFUSED = "packread-refused"
REF_REFUSED = "reference-refused"
REF_DEFECT = "reference-defect"
FAIL_ERROR = "FAIL:error"
FAIL_MISMATCH = "FAIL:mismatch"

#: The order in which an input's verdict is taken from its ops' verdicts (worst first).
SEVERITY = (FAIL_MISMATCH, FAIL_ERROR, PR_REFUSED, REF_DEFECT, REF_REFUSED, BOTH, OK)


def leaf_bytes(arr: np.ndarray) -> bytes:
    """The bytes of every field in C order, without the padding of structured dtypes (numpy
    leaves padding uninitialised)."""
    if arr.dtype.names is None:
        return np.ascontiguousarray(arr).tobytes()
    return b"".join(leaf_bytes(arr[name]) for name in arr.dtype.names)


def array_difference(got: Any, want: np.ndarray, layout: bool = False) -> str | None:
    """How ``got`` differs from ``want`` (dtype, shape, bytes; with ``layout`` also C/F
    contiguity), or None if it does not."""
    if not isinstance(got, np.ndarray):
        return f"a {type(got).__name__}, not an array"
    if got.dtype != want.dtype or got.dtype.str != want.dtype.str:
        return f"dtype {got.dtype.str} {got.dtype.descr} != {want.dtype.str} {want.dtype.descr}"
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if layout and got.ndim > 1 and got.flags.f_contiguous != want.flags.f_contiguous:
        return f"F-contiguous {got.flags.f_contiguous} != {want.flags.f_contiguous}"
    a, b = leaf_bytes(got), leaf_bytes(want)
    if a != b:
        at = next(i for i in range(min(len(a), len(b))) if a[i] != b[i]) if a and b else 0
        return f"bytes differ from byte {at} of {len(b)}: {a[at : at + 8]!r} != {b[at : at + 8]!r}"
    return None


def value_difference(got: Any, want: Any) -> tuple[str, str] | None:
    """For one variable-length element or member: ``(verdict, detail)`` if they differ."""
    if isinstance(want, np.ndarray):
        diff = array_difference(got, want)
        return None if diff is None else (FAIL_MISMATCH, diff)
    if type(got) is not type(want):
        return FAIL_MISMATCH, f"a {type(got).__name__}, not a {type(want).__name__}"
    if got == want:
        return None
    nul = b"\0" if isinstance(got, bytes) else "\0"
    if nul in got and want == got[: got.index(nul)]:  # type: ignore[operator,index]
        return REF_DEFECT, "h5py cuts a variable-length string at its first NUL"
    return FAIL_MISMATCH, f"{got[:40]!r} != {want[:40]!r}"


def _says(err: Any) -> str:
    """An error tuple as text: ``type: message``."""
    if isinstance(err, tuple) and len(err) == 3:
        return f"{err[0]}: {err[2]}"
    return str(err)


def _refused(err: tuple[str, bool, str], reference_ok: bool, why: str = "") -> Verdict:
    name, is_packread, message = err
    if not is_packread:
        return FAIL_ERROR, f"{name}: {message}"
    if reference_ok:
        return PR_REFUSED, f"{name}: {message}{why}"
    return BOTH, f"{name}: {message}"


def _worst(verdicts: list[Verdict]) -> Verdict:
    if not verdicts:
        return OK, ""
    return min(verdicts, key=lambda v: SEVERITY.index(v[0]))


# --------------------------------------------------------------------------------------------
# HDF5


def _h5_all_read(ref: dict[str, Any]) -> bool:
    """The reference opened the file and read every row of every dataset with rows."""
    if ref.get("open_error") or ref.get("walk_error"):
        return False
    datasets = [d for d in ref["datasets"].values() if "error" in d or d.get("shape")]
    return bool(datasets) and all("error" not in d and not d["errors"] for d in datasets)


def _h5_rows_read(ref: dict[str, Any], rows: dict[str, list[int]]) -> tuple[bool, str]:
    if ref.get("open_error"):
        return False, "open"
    for name, want in rows.items():
        d = ref["datasets"].get(name)
        if d is None or "error" in d:
            return False, f"dataset {name}"
        missing = [i for i in want if i not in d["values"]]
        if missing:
            return False, f"{name} row {missing[0]}"
    return True, ""


def _h5_value(value: Any, name: str, k: int, flat: bool) -> Any:
    """Row ``k`` of dataset ``name`` in an op's value: a one-row array for fixed-size data,
    the element for variable-length data (flat: the slice of values)."""
    got = value[name]
    if flat:
        values, offsets = got
        return values[int(offsets[k]) : int(offsets[k + 1])]
    if isinstance(got, list):
        return got[k]
    return got[k : k + 1]


def _h5_compare_row(got: Any, want: Any, flat: bool) -> tuple[str, str] | None:
    if flat and isinstance(want, (bytes, str)):
        raw = got.tobytes() if isinstance(got, np.ndarray) else got
        if isinstance(want, str):
            want = want.encode()
        return value_difference(raw, want)
    return value_difference(got, want)


def _as_h5py(ref: dict[str, Any], name: str, i: int, got: Any, flat: bool) -> bool:
    """Whether h5py's second opinion (PyTables inputs) read row ``i`` of ``name`` as ``got``,
    and differently from PyTables."""
    second = ref.get("h5py")
    if not second or second.get("open_error"):
        return False
    d = second["datasets"].get(name, {})
    if i not in d.get("values", {}):
        return False
    return _h5_compare_row(got, d["values"][i], flat) is None


def judge_hdf5(op: dict[str, Any], ref: dict[str, Any]) -> Verdict:
    needs = op["needs"]
    if needs[0] == "all":
        if "error" in op:
            return _refused(op["error"], _h5_all_read(ref))
        return OK, ""
    if needs[0] == "one":  # a dataset packread could not open by name
        d = ref.get("datasets", {}).get(needs[1], {})
        read = not ref.get("open_error") and "error" not in d and not d.get("errors", True)
        return _refused(op["error"], read and bool(d.get("values")))
    rows: dict[str, list[int]] = needs[1]
    ref_ok, why = _h5_rows_read(ref, rows)
    if "error" in op:
        return _refused(op["error"], ref_ok)
    value = op["value"]
    flat = op["kind"] == "flat"
    verdicts: list[Verdict] = []
    for name, want_rows in rows.items():
        d = ref["datasets"].get(name, {})
        if ref.get("open_error") or "values" not in d:
            reason = ref.get("open_error") or d.get("error") or "no such dataset"
            verdicts.append((REF_REFUSED, f"{name}: {_says(reason)}"))
            continue
        if flat:
            offsets = value[name][1]
            if len(offsets) != len(want_rows) + 1 or (len(offsets) and offsets[0] != 0):
                verdicts.append((FAIL_MISMATCH, f"{name}: offsets {offsets!r}"))
                continue
        for k, i in enumerate(want_rows):
            if i not in d["values"]:
                verdicts.append((REF_REFUSED, f"{name} row N: {_says(d['errors'].get(i))}"))
                continue
            got = _h5_value(value, name, k, flat)
            diff = _h5_compare_row(got, d["values"][i], flat)
            if diff is not None and diff[0] == FAIL_MISMATCH and _as_h5py(ref, name, i, got, flat):
                diff = (REF_DEFECT, f"PyTables and h5py differ; packread reads as h5py ({diff[1]})")
            if diff is not None:
                verdicts.append((diff[0], f"{name} row {i}: {diff[1]}"))
    if not ref_ok and not verdicts:
        verdicts.append((REF_REFUSED, why))
    return _worst(verdicts)


# --------------------------------------------------------------------------------------------
# ZIP


def _zip_all_read(ref: dict[str, Any]) -> bool:
    if ref.get("open_error") or not ref["names"]:
        return False
    raw_ok = all(not isinstance(v, tuple) for v in ref["raw"].values())
    npy_ok = all(isinstance(v, np.ndarray) for v in ref["npy"].values())
    return raw_ok and npy_ok


def _zip_want(ref: dict[str, Any], kind: str, k: int) -> tuple[Any, str]:
    """The reference's member ``k`` (bytes, or the array of a .npy member), or None and why."""
    if ref.get("open_error"):
        return None, f"open: {_says(ref['open_error'])}"
    table = ref["raw" if kind == "raw" else "npy"]
    got = table.get(k)
    if got is None:
        return None, f"no member {k}"
    if isinstance(got, tuple):
        return None, _says(got)
    return got, ""


def _cut_at_nul(names: list[str]) -> list[str]:
    """Names as zipfile gives them: cut at the first NUL (on purpose: a name such as
    ``"x.npy\\0.txt"`` is a trick of malicious archives)."""
    return [n.split("\0", 1)[0] for n in names]


def judge_zip(op: dict[str, Any], ref: dict[str, Any], names_agree: bool) -> Verdict:
    needs = op["needs"]
    kind = needs[0]
    if kind == "all":
        if "error" in op:
            return _refused(op["error"], _zip_all_read(ref))
        return OK, ""
    if kind == "names":
        ref_ok = not ref.get("open_error")
        if "error" in op:
            return _refused(op["error"], ref_ok)
        if not ref_ok:
            return REF_REFUSED, f"open: {_says(ref['open_error'])}"
        names, infos = op["value"]
        if _cut_at_nul(names) != ref["names"]:
            return FAIL_MISMATCH, f"names {names[:6]} != {ref['names'][:6]}"
        for got, want in zip(infos, ref["infos"], strict=False):
            if (_cut_at_nul([got[0]])[0], *got[1:]) != tuple(want):
                return FAIL_MISMATCH, f"info {tuple(got)} != {tuple(want)}"
        if names != ref["names"]:
            return REF_DEFECT, "zipfile cuts a member name at its first NUL"
        return OK, ""
    if not names_agree and not ref.get("open_error"):
        # Positions mean different members: judged by the names op alone.
        return (REF_REFUSED, "names differ") if "error" not in op else _refused(op["error"], False)
    if kind in ("raw", "npy"):
        want, why = _zip_want(ref, kind, needs[1])
        if "error" in op:
            return _refused(op["error"], want is not None)
        if want is None:
            return REF_REFUSED, why
        got = op["value"]
        if kind == "raw":
            if got != want:
                return FAIL_MISMATCH, f"member {needs[1]}: {len(got)} bytes != {len(want)} bytes"
            return OK, ""
        diff = value_difference(got, want)
        return (OK, "") if diff is None else (diff[0], f"member {needs[1]}: {diff[1]}")
    # raw-stack / npy-stack: the members stacked, if the reference read them all alike.
    wants = [_zip_want(ref, "raw" if kind == "raw-stack" else "npy", k) for k in needs[1]]
    stacked = None
    why = next((w for v, w in wants if v is None), "")
    if not why:
        items = [np.frombuffer(v, np.uint8) if kind == "raw-stack" else v for v, _ in wants]
        if len({(x.dtype.str, x.shape) for x in items}) == 1:
            stacked = np.stack(items)
        else:
            why = "members of different sizes, dtypes or shapes"
    if "error" in op:
        return _refused(op["error"], stacked is not None)
    if stacked is None:
        return REF_REFUSED, why
    stack_diff = array_difference(op["value"], stacked)
    return (OK, "") if stack_diff is None else (FAIL_MISMATCH, stack_diff)


# --------------------------------------------------------------------------------------------
# NPZ / NPY


def _npz_all_read(ref: dict[str, Any]) -> bool:
    return not ref.get("open_error") and all(
        not isinstance(v, tuple) for v in ref["values"].values()
    )


def _npz_why(ref: dict[str, Any]) -> str:
    if ref.get("open_error"):
        return f"open: {_says(ref['open_error'])}"
    for key, v in ref["values"].items():
        if isinstance(v, tuple):
            return f"{key}: {_says(v)}"
    return "a member is not an array"


def judge_npz(op: dict[str, Any], ref: dict[str, Any]) -> Verdict:
    needs = op["needs"]
    if needs[0] == "all":
        ref_ok = _npz_all_read(ref)
        if op["kind"] == "open":  # NpzReader needs arrays: an archive of none is no sample
            ref_ok = ref_ok and any(isinstance(v, np.ndarray) for v in ref["values"].values())
        if "error" in op:
            return _refused(op["error"], ref_ok)
        if op["value"] is None:  # a reader's construction: judged by its batch
            return OK, ""
        if not ref_ok:
            return REF_REFUSED, _npz_why(ref)
        got: dict[str, Any] = op["value"]
        if set(got) != set(ref["keys"]):
            return FAIL_MISMATCH, f"keys {sorted(got)} != {sorted(ref['keys'])}"
        verdicts = []
        for key, want in ref["values"].items():
            diff = value_difference(got[key], want)
            if diff is not None:
                verdicts.append((diff[0], f"{key}: {diff[1]}"))
        return _worst(verdicts)
    if needs[0] == "rows":  # rows of the archive's arrays: each key's rows, numpy-indexed
        keys, rows = needs[1], needs[2]
        arrays = {k: ref.get("values", {}).get(k) for k in keys}
        ref_ok = not ref.get("open_error") and all(
            isinstance(v, np.ndarray) and v.ndim >= 1 for v in arrays.values()
        )
        if "error" in op:
            return _refused(op["error"], ref_ok)
        if not ref_ok:
            return REF_REFUSED, _npz_why(ref)
        verdicts = []
        for key, want in arrays.items():
            key_diff = array_difference(op["value"].get(key), np.ascontiguousarray(want[rows]))
            if key_diff is not None:
                verdicts.append((FAIL_MISMATCH, f"{key}: {key_diff}"))
        return _worst(verdicts)
    keys, repeat = needs[1], needs[2]
    wants = {k: ref.get("values", {}).get(k) for k in keys}
    ref_ok = not ref.get("open_error") and all(isinstance(v, np.ndarray) for v in wants.values())
    if "error" in op:
        return _refused(op["error"], ref_ok)
    if not ref_ok:
        return REF_REFUSED, _npz_why(ref)
    verdicts = []
    for key, want in wants.items():
        key_diff = array_difference(op["value"].get(key), np.stack([want] * repeat))
        if key_diff is not None:
            verdicts.append((FAIL_MISMATCH, f"{key}: {key_diff}"))
    return _worst(verdicts)


def judge_npy(op: dict[str, Any], ref: dict[str, Any]) -> Verdict:
    want = ref.get("value")
    if "error" in op:
        return _refused(op["error"], not ref.get("open_error") and isinstance(want, np.ndarray))
    if ref.get("open_error") or not isinstance(want, np.ndarray):
        return REF_REFUSED, _says(ref.get("open_error"))
    if op["needs"][0] == "rows":  # rows of the array, numpy-indexed
        got = op["value"]
        diff = array_difference(got["value"], np.ascontiguousarray(want[got["rows"]]))
    elif op["needs"][0] == "stack":
        diff = array_difference(op["value"], np.stack([want] * op["needs"][1]))
    else:
        diff = array_difference(op["value"], want, layout=True)
    return (OK, "") if diff is None else (FAIL_MISMATCH, diff)


# --------------------------------------------------------------------------------------------
# Encoded images


def _same_outcome(op: dict[str, Any], other: dict[str, Any]) -> str | None:
    """How two decodes of one image differ (both failing is the same outcome)."""
    if "error" in op or "error" in other:
        if "error" in op and "error" in other:
            return None
        return f"{_says(op.get('error', 'pixels'))} != {_says(other.get('error', 'pixels'))}"
    return array_difference(op["value"], other["value"])


def judge_images(ops: list[dict[str, Any]], ref: dict[str, Any]) -> list[Verdict]:
    """The good images must decode, read between the damaged one and others, bit for bit as
    they do alone (whole: as PIL decodes them); the damaged one must decode as PIL decodes it
    (both refusing, or the same pixels), and the same after a good one as alone."""
    alone = {op["needs"][1]: op for op in ops if op["kind"] == "damaged"}
    goods = {op["needs"][1:]: op for op in ops if op["kind"] == "good-alone"}
    damaged = ref.get("damaged")
    verdicts: list[Verdict] = []
    for op in ops:
        kind, needs = op["kind"], op["needs"]
        if kind == "open":
            verdicts.append(_refused(op["error"], True) if "error" in op else (OK, ""))
        elif kind == "damaged":
            ref_ok = isinstance(damaged, np.ndarray)
            if "error" in op:
                verdicts.append(_refused(op["error"], ref_ok))
            elif not ref_ok:
                verdicts.append((REF_REFUSED, _says(damaged)))
            elif needs[1] == "whole":
                diff = array_difference(op["value"], damaged)
                verdicts.append((OK, "") if diff is None else (FAIL_MISMATCH, f"vs PIL: {diff}"))
            else:
                verdicts.append((OK, ""))
        elif kind == "good-alone":
            if "error" in op:
                verdicts.append((FAIL_ERROR, f"a good image: {_says(op['error'])}"))
            elif needs[2] == "whole":
                diff = array_difference(op["value"], ref["goods"][needs[1]])
                verdicts.append((OK, "") if diff is None else (FAIL_MISMATCH, f"vs PIL: {diff}"))
            else:
                verdicts.append((OK, ""))
        elif kind == "good":
            diff = _same_outcome(op, goods[(needs[1], needs[2])])
            verdicts.append(
                (OK, "") if diff is None else (FAIL_MISMATCH, f"a good image read after: {diff}")
            )
        elif kind == "again":
            diff = _same_outcome(op, alone[needs[1]])
            verdicts.append(
                (OK, "")
                if diff is None
                else (FAIL_MISMATCH, f"the damaged image after a good one: {diff}")
            )
        elif kind == "skip":
            if "error" in op:
                verdicts.append(_refused(op["error"], True))
                continue
            mode = needs[1]
            want = [goods[(k, mode)].get("value") for k in (0, 2, 0)]
            bad = [
                k
                for k, (got, w) in enumerate(zip(op["value"]["slots"], want, strict=True))
                if w is None or array_difference(got, w) is not None
            ]
            errors = op["value"]["errors"]
            expected = [1] if "error" in alone[mode] else []
            if bad:
                verdicts.append((FAIL_MISMATCH, f"skipping: good slots {bad} differ"))
            elif errors != expected:
                verdicts.append((FAIL_MISMATCH, f"skipping: errors at {errors}, not {expected}"))
            else:
                verdicts.append((OK, ""))
    return verdicts


def judge(fmt: str, ops: list[dict[str, Any]], ref: dict[str, Any]) -> list[Verdict]:
    """One verdict per op."""
    if fmt == "images":
        return judge_images(ops, ref)
    if fmt in ("hdf5", "pytables"):
        return [judge_hdf5(op, ref) for op in ops]
    if fmt == "zip":
        names_op = next((op for op in ops if op["kind"] == "names" and "value" in op), None)
        agree = names_op is None or _cut_at_nul(names_op["value"][0]) == ref.get("names")
        return [judge_zip(op, ref, agree) for op in ops]
    if fmt == "npz":
        return [judge_npz(op, ref) for op in ops]
    return [judge_npy(op, ref) for op in ops]


def overall(verdicts: list[Verdict]) -> Verdict:
    return _worst(verdicts)


def reference_read_all(fmt: str, ref: dict[str, Any]) -> bool:
    """Whether the reference read the whole input without error."""
    if fmt == "images":
        return isinstance(ref.get("damaged"), np.ndarray)
    if fmt in ("hdf5", "pytables"):
        return _h5_all_read(ref)
    if fmt == "zip":
        return _zip_all_read(ref)
    if fmt == "npz":
        return _npz_all_read(ref)
    return not ref.get("open_error") and isinstance(ref.get("value"), np.ndarray)


def hdf5_request(ops: list[dict[str, Any]]) -> dict[str, list[int]]:
    """The rows of each dataset the reference must read to check packread's ops."""
    rows: dict[str, set[int]] = {}
    for op in ops:
        if op["needs"][0] == "rows":
            for name, want in op["needs"][1].items():
                rows.setdefault(name, set()).update(want)
    return {name: sorted(r) for name, r in rows.items()}
