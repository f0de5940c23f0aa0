"""Traces of loading (``trace=path`` or ``PACKREAD_TRACE``): a trace of 2 DataLoader workers
over 20 batches is a valid Chrome trace event file (what Perfetto and ``chrome://tracing``
open), its spans nest and are ordered per thread, every batch has its span, and nothing is
written when tracing is not asked for."""

from __future__ import annotations

import atexit
import itertools
import json
import os
from collections import Counter, defaultdict

import h5py
import numpy as np
import pytest
from torch.utils.data import DataLoader

import packread._trace as trace_mod
from packread import _packread
from packread.torch import PackDataset, PackMapDataset

try:
    import jsonschema
except ImportError:  # the explicit validator below checks the same rules
    jsonschema = None

#: Samples, samples per batch: 20 batches per epoch.
SAMPLES, BATCH = 80, 4
BATCHES = SAMPLES // BATCH
#: Float rounding of the microsecond timestamps (seconds * 1e6, nanoseconds / 1e3).
TOL_US = 1.0
#: Stages of packread's core a gzip HDF5 read goes through.
CORE_STAGES = {"plan", "read", "inflate"}

# --------------------------------------------------------------------------------------------
# The Chrome trace event format, as far as packread writes it.

_X_EVENT = {
    "type": "object",
    "required": ["ph", "name", "ts", "dur", "pid", "tid"],
    "properties": {
        "ph": {"const": "X"},
        "name": {"type": "string"},
        "cat": {"type": "string"},
        "ts": {"type": "number", "minimum": 0},
        "dur": {"type": "number", "minimum": 0},
        "pid": {"type": "integer"},
        "tid": {"type": "integer"},
        "args": {"type": "object"},
    },
}
_M_EVENT = {
    "type": "object",
    "required": ["ph", "name", "pid", "args"],
    "properties": {
        "ph": {"const": "M"},
        "name": {"enum": ["process_name", "thread_name"]},
        "pid": {"type": "integer"},
        "tid": {"type": "integer"},
        "args": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}},
        },
    },
    # A thread's name says which thread: it has a tid.
    "if": {"properties": {"name": {"const": "thread_name"}}},
    "then": {"required": ["tid"]},
}
_C_EVENT = {
    "type": "object",
    "required": ["ph", "name", "ts", "pid", "args"],
    "properties": {
        "ph": {"const": "C"},
        "name": {"type": "string"},
        "ts": {"type": "number", "minimum": 0},
        "pid": {"type": "integer"},
        "args": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {"type": "number"},
        },
    },
}
TRACE_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"oneOf": [_X_EVENT, _M_EVENT, _C_EVENT]}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
    },
}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def explicit_errors(doc) -> list[str]:
    """The same rules as :data:`TRACE_SCHEMA`, checked by hand: what is wrong with ``doc``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["the top level is not an object with a traceEvents list"]
    if "displayTimeUnit" in doc and doc["displayTimeUnit"] not in ("ms", "ns"):
        return [f"displayTimeUnit {doc['displayTimeUnit']!r}"]
    errors = []
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict):
            errors.append(f"event {i} is not an object")
            continue
        ph = e.get("ph")
        if ph == "X":
            ok = (
                isinstance(e.get("name"), str)
                and _is_number(e.get("ts"))
                and e["ts"] >= 0
                and _is_number(e.get("dur"))
                and e["dur"] >= 0
                and _is_int(e.get("pid"))
                and _is_int(e.get("tid"))
                and isinstance(e.get("cat", ""), str)
                and isinstance(e.get("args", {}), dict)
            )
        elif ph == "M":
            args = e.get("args")
            ok = (
                e.get("name") in ("process_name", "thread_name")
                and _is_int(e.get("pid"))
                and (_is_int(e.get("tid")) if "tid" in e or e["name"] == "thread_name" else True)
                and isinstance(args, dict)
                and isinstance(args.get("name"), str)
            )
        elif ph == "C":
            args = e.get("args")
            ok = (
                isinstance(e.get("name"), str)
                and _is_number(e.get("ts"))
                and e["ts"] >= 0
                and _is_int(e.get("pid"))
                and isinstance(args, dict)
                and len(args) > 0
                and all(_is_number(v) for v in args.values())
            )
        else:
            ok = False
        if not ok:
            errors.append(f"event {i}: {e!r}")
    return errors


def schema_errors(doc) -> list[str]:
    """What :data:`TRACE_SCHEMA` finds wrong with ``doc`` (jsonschema, where installed)."""
    validator = jsonschema.Draft7Validator(TRACE_SCHEMA)
    return [e.message for e in validator.iter_errors(doc)]


VALIDATORS = [
    pytest.param(
        schema_errors,
        id="jsonschema",
        marks=pytest.mark.skipif(jsonschema is None, reason="jsonschema is not installed"),
    ),
    pytest.param(explicit_errors, id="explicit"),
]


def validate(doc) -> None:
    errors = schema_errors(doc) if jsonschema is not None else explicit_errors(doc)
    assert errors == [], errors[:5]


# --------------------------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture
def h5(tmp_path):
    """80 samples of (4, 8) float32, gzip, one sample per chunk: 20 batches of 4."""
    path = tmp_path / "data.h5"
    with h5py.File(path, "w") as f:
        x = np.arange(SAMPLES * 32, dtype="<f4").reshape(SAMPLES, 4, 8)
        f.create_dataset("x", data=x, chunks=(1, 4, 8), compression="gzip")
    return path


@pytest.fixture(autouse=True)
def no_tracing_after(tmp_path):
    """Tracing off before and after each test; the tracers of this test's files forgotten (and
    their merge at exit unregistered), so no other test traces or writes here."""

    def off():
        _packread.set_tracing(False)
        _packread.take_spans()  # spans recorded but never taken: dropped

    off()
    yield
    off()
    root = str(tmp_path)
    with trace_mod._LOCK:
        for path in [p for p in trace_mod._TRACERS if p.startswith(root)]:
            atexit.unregister(trace_mod._TRACERS.pop(path).close)


def spans(events: list[dict]) -> list[dict]:
    return [e for e in events if e["ph"] == "X"]


def end(e: dict) -> float:
    return e["ts"] + e["dur"]


def nesting_errors(events: list[dict]) -> list[str]:
    """Spans of one thread that overlap without one containing the other (within
    :data:`TOL_US`), after sorting each thread's spans by start (longest first at a tie)."""
    threads: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for e in spans(events):
        threads[(e["pid"], e["tid"])].append(e)
    errors = []
    for key, evs in threads.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict] = []
        for e in evs:
            while stack and end(stack[-1]) <= e["ts"] + TOL_US:
                stack.pop()  # ended before this one starts: disjoint
            if stack and end(e) > end(stack[-1]) + TOL_US:
                top = stack[-1]
                errors.append(
                    f"{key}: {e['name']} [{e['ts']}, {end(e)}] overlaps "
                    f"{top['name']} [{top['ts']}, {end(top)}]"
                )
            stack.append(e)
    return errors


def read_trace(path) -> dict:
    with open(path) as f:
        return json.load(f)


# --------------------------------------------------------------------------------------------
# The validators themselves reject what Perfetto would not read


@pytest.mark.parametrize("errors_of", VALIDATORS)
def test_the_validator_rejects_malformed_traces(errors_of):
    good_x = {"ph": "X", "name": "batch", "ts": 1.5, "dur": 2.0, "pid": 1, "tid": 2}
    good_m = {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "t"}}
    assert errors_of({"traceEvents": [good_x, good_m], "displayTimeUnit": "ms"}) == []
    bad = [
        [],  # not an object
        {"events": []},  # no traceEvents
        {"traceEvents": {}},  # not a list
        {"traceEvents": [{**good_x, "ph": "B"}]},
        {"traceEvents": [{**good_x, "ts": -1}]},
        {"traceEvents": [{**good_x, "dur": -0.5}]},
        {"traceEvents": [{**good_x, "dur": "2"}]},
        {"traceEvents": [{**good_x, "pid": 1.5}]},
        {"traceEvents": [{**good_x, "name": 3}]},
        {"traceEvents": [{k: v for k, v in good_x.items() if k != "tid"}]},
        {"traceEvents": [{**good_m, "name": "process_labels"}]},
        {"traceEvents": [{**good_m, "args": {"name": 5}}]},
        {"traceEvents": [{**good_m, "args": {}}]},
        {"traceEvents": [{k: v for k, v in good_m.items() if k != "tid"}]},
    ]
    for doc in bad:
        assert errors_of(doc), doc


def test_nesting_check_finds_crossed_spans():
    a = {"ph": "X", "name": "a", "ts": 0.0, "dur": 10.0, "pid": 1, "tid": 1}
    inside = {**a, "name": "in", "ts": 2.0, "dur": 3.0}
    crossed = {**a, "name": "x", "ts": 5.0, "dur": 10.0}
    other_thread = {**crossed, "tid": 2}
    assert nesting_errors([a, inside, other_thread]) == []
    assert nesting_errors([a, {**inside, "ts": 9.5, "dur": 1.4}]) == []  # within 1 us
    assert len(nesting_errors([a, inside, crossed])) == 1


# --------------------------------------------------------------------------------------------
# A trace of 2 workers over 20 batches


def test_two_workers_trace_is_valid_and_nested(h5, tmp_path):
    path = tmp_path / "t.json"
    ds = PackDataset(str(h5), BATCH, trace=str(path))
    assert len(ds) == BATCHES
    got = [b["x"].shape for b in ds.timed(DataLoader(ds, batch_size=None, num_workers=2))]
    assert got == [(BATCH, 4, 8)] * BATCHES
    doc = read_trace(path)
    validate(doc)
    events = doc["traceEvents"]
    xs = spans(events)

    # Processes: the main one and two workers, each named.
    main_pid = os.getpid()
    pids = {e["pid"] for e in events}
    assert len(pids) >= 3
    assert main_pid in pids
    workers = pids - {main_pid}
    assert len(workers) == 2
    process_names = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert set(process_names) == pids
    assert process_names[main_pid].startswith("packread main")
    assert sorted(process_names[p].split(" (")[0] for p in workers) == [
        "packread worker 0",
        "packread worker 1",
    ]
    # Every thread that has spans is named, once.
    thread_names = Counter(
        (e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"
    )
    assert set(thread_names) == {(e["pid"], e["tid"]) for e in xs}
    assert set(thread_names.values()) == {1}

    by_name = Counter((e["pid"] in workers, e["name"]) for e in xs)
    # One "batch" span per batch, all in the workers, 10 each (batches dealt in turn).
    batch_spans = [e for e in xs if e["name"] == "batch"]
    assert len(batch_spans) == BATCHES
    assert {e["pid"] for e in batch_spans} == workers
    assert Counter(e["pid"] for e in batch_spans) == {p: BATCHES // 2 for p in workers}
    assert sorted(e["args"]["batch"] for e in batch_spans) == list(range(BATCHES))
    # The read-ahead queue over time: one counter value per batch, in its worker, at its start.
    counters = [e for e in events if e["ph"] == "C"]
    assert len(counters) == BATCHES
    assert {e["name"] for e in counters} == {"read ahead"}
    assert {e["pid"] for e in counters} == workers
    assert all(0 <= e["args"]["read ahead"] <= 2 for e in counters)  # prefetch=2
    starts = {(e["pid"], e["ts"]) for e in batch_spans}
    assert {(e["pid"], e["ts"]) for e in counters} == starts
    assert all(e["args"]["rows"] == BATCH for e in batch_spans)
    assert by_name[(True, "wait for read")] == BATCHES
    # The consumer's waits, one per batch, in the main process only.
    nexts = sorted((e for e in xs if e["name"] == "next (waiting on data)"), key=lambda e: e["ts"])
    assert len(nexts) == BATCHES
    assert {e["pid"] for e in nexts} == {main_pid}
    assert by_name[(False, "batch")] == 0
    # The core's stages, on the core's tracks of the workers; one inflate per sample (a chunk).
    core = [e for e in xs if e["tid"] >= trace_mod.CORE_TID]
    assert {e["pid"] for e in core} == workers
    assert {e["name"] for e in core} >= CORE_STAGES
    assert by_name[(True, "inflate")] == SAMPLES
    assert all(e["name"] not in CORE_STAGES for e in xs if e["tid"] < trace_mod.CORE_TID)
    assert all(e["tid"] >= trace_mod.CORE_TID for e in xs if e["name"] in CORE_STAGES)
    core_tracks = {(e["pid"], e["tid"]) for e in core}
    core_names = [
        e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name" and (e["pid"], e["tid"]) in core_tracks
    ]
    assert len(core_names) == len(core_tracks)
    assert all(n.startswith("packread thread ") for n in core_names)

    # Spans nest per thread (disjoint or contained), each thread's in order of time.
    assert nesting_errors(events) == []
    # Every wait for a read is inside the batch span of the same thread (it is its start).
    for w in (e for e in xs if e["name"] == "wait for read"):
        outer = [
            b
            for b in batch_spans
            if (b["pid"], b["tid"]) == (w["pid"], w["tid"])
            and b["ts"] - TOL_US <= w["ts"]
            and end(w) <= end(b) + TOL_US
        ]
        assert len(outer) == 1, w
        assert outer[0]["args"]["batch"] == w["args"]["batch"]
    # Each worker made its batches in order, one after the other.
    for pid in workers:
        mine = sorted((e for e in batch_spans if e["pid"] == pid), key=lambda e: e["ts"])
        order = [e["args"]["batch"] for e in mine]
        assert order == sorted(order)
        assert all(end(a) <= b["ts"] + TOL_US for a, b in itertools.pairwise(mine))
    # One clock across processes: batch j is made before the consumer's j-th wait ends (the
    # loader hands the workers' batches over in turn), and the core's spans (nanoseconds in
    # Rust) end before their worker's last batch did.
    made = {e["args"]["batch"]: e for e in batch_spans}
    for j, n in enumerate(nexts):
        assert end(made[j]) <= end(n) + TOL_US, j
    for pid in workers:
        last = max(end(e) for e in batch_spans if e["pid"] == pid)
        first = min(e["ts"] for e in core if e["pid"] == pid)
        assert all(end(e) <= last + TOL_US for e in core if e["pid"] == pid)
        assert last - first < 60e6  # the same unit: within a minute of each other
    assert min(e["ts"] for e in core) > nexts[0]["ts"] - 60e6


def test_trace_env_var_without_workers_written_when_iteration_ends(h5, tmp_path, monkeypatch):
    path = tmp_path / "env.json"
    monkeypatch.setenv("PACKREAD_TRACE", str(path))
    ds = PackDataset(str(h5), BATCH)
    assert ds.trace is None  # no trace= given: the environment's
    it = iter(DataLoader(ds, batch_size=None, num_workers=0))
    next(it)
    # Merged when the iteration ends, not before.
    assert not path.exists()
    assert (tmp_path / "env.json.parts").is_dir()
    rest = sum(1 for _ in it)
    assert rest == BATCHES - 1
    assert path.exists()
    doc = read_trace(path)
    validate(doc)
    events = doc["traceEvents"]
    xs = spans(events)
    assert {e["pid"] for e in events} == {os.getpid()}
    names = Counter(e["name"] for e in xs)
    assert names["batch"] == BATCHES
    assert names["wait for read"] == BATCHES
    assert names["inflate"] == SAMPLES
    assert set(names) >= CORE_STAGES
    assert sorted(e["args"]["batch"] for e in xs if e["name"] == "batch") == list(range(BATCHES))
    assert nesting_errors(events) == []


def test_trace_written_when_the_consumer_leaves_early(h5, tmp_path):
    path = tmp_path / "early.json"
    ds = PackDataset(str(h5), BATCH, trace=str(path))
    it = iter(ds)
    for _ in range(3):
        next(it)
    assert not path.exists()
    it.close()  # the loop left: the iteration ended
    xs = spans(read_trace(path)["traceEvents"])
    assert sum(e["name"] == "batch" for e in xs) == 3


def test_no_trace_when_not_asked(h5, tmp_path, monkeypatch):
    monkeypatch.delenv("PACKREAD_TRACE", raising=False)
    before = set(trace_mod._TRACERS)
    ds = PackDataset(str(h5), BATCH)
    assert ds.trace is None
    assert sum(1 for _ in ds) == BATCHES
    # The core recorded no spans: tracing stayed off.
    assert list(_packread.take_spans()) == []
    assert sum(1 for _ in ds.timed(DataLoader(ds, batch_size=None, num_workers=2))) == BATCHES
    assert ds.stats().batches == 2 * BATCHES  # measured all the same
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.h5"]
    assert not any(p.name.endswith(".parts") for p in tmp_path.rglob("*"))
    assert set(trace_mod._TRACERS) == before


def test_map_dataset_workers_spans_reach_the_trace(h5, tmp_path):
    path = tmp_path / "map.json"
    ds = PackMapDataset(str(h5), trace=str(path))
    loader = DataLoader(ds, batch_size=8, collate_fn=ds.collate_fn, num_workers=2)
    assert sum(1 for _ in ds.timed(loader)) == len(loader)
    xs = spans(read_trace(path)["traceEvents"])
    assert sum(e["name"] == "next (waiting on data)" for e in xs) == len(loader)
    assert sum(e["name"] == "batch" for e in xs) == len(loader)
