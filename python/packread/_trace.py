"""Traces of loading in Chrome's trace event format, which Perfetto and ``chrome://tracing``
open: a span per batch on the thread that made it, the consumer's waits, and a span per stage
(plan, read, network, each codec, geometry, copy) on each of packread's threads, across
DataLoader worker processes.

Turned on by ``PACKREAD_TRACE=path`` in the environment (workers inherit it) or a dataset's
``trace=path``. Every process appends its events to ``path + ".parts/<pid>.jsonl"`` as it goes
(every :data:`FLUSH_EVERY` batches and when an iteration ends); the process that consumes
merges the parts into ``path``, one JSON object ``{"traceEvents": [...]}``, when its iteration
ends and when it exits. Timestamps are ``CLOCK_MONOTONIC``, the same clock in every process,
in microseconds.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
from typing import Any

from . import _packread

#: Batches between two writes of a process's events.
FLUSH_EVERY = 64
#: Rust threads' track ids start here (a thread's number in packread's counters added).
CORE_TID = 1_000_000

_TRACERS: dict[str, Tracer] = {}
_LOCK = threading.Lock()


def trace_path(explicit: str | os.PathLike[str] | None) -> str | None:
    """Where a dataset traces to: its ``trace=``, else ``PACKREAD_TRACE``, else nowhere."""
    path = os.fspath(explicit) if explicit is not None else os.environ.get("PACKREAD_TRACE")
    # Absolute: the file is written again at exit, whatever the working directory is then.
    return os.path.abspath(path) if path else None


def tracer(path: str | None) -> Tracer | None:
    """This process's tracer writing to ``path`` (``None``: not tracing)."""
    if path is None:
        return None
    with _LOCK:
        t = _TRACERS.get(path)
        if t is None or t.pid != os.getpid():
            t = _TRACERS[path] = Tracer(path)
        return t


class Tracer:
    """One process's events for one trace file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.parts = path + ".parts"
        self.pid = os.getpid()
        self.events: list[dict[str, Any]] = []
        self.named: set[int] = set()
        self.pending = 0
        os.makedirs(self.parts, exist_ok=True)
        _packread.set_tracing(True)
        self.meta("process_name", None, f"packread {_process_name()} (pid {self.pid})")
        atexit.register(self.close)

    def meta(self, what: str, tid: int | None, name: str) -> None:
        event: dict[str, Any] = {"ph": "M", "name": what, "pid": self.pid, "args": {"name": name}}
        if tid is not None:
            event["tid"] = tid
        self.events.append(event)

    def span(self, name: str, start: float, end: float, args: dict[str, Any] | None = None) -> None:
        """A span on the calling thread, ``start`` and ``end`` in seconds of
        ``CLOCK_MONOTONIC``."""
        tid = threading.get_native_id()
        if tid not in self.named:
            self.named.add(tid)
            self.meta("thread_name", tid, threading.current_thread().name)
        event = {
            "name": name,
            "cat": "packread",
            "ph": "X",
            "ts": start * 1e6,
            "dur": max(end - start, 0.0) * 1e6,
            "pid": self.pid,
            "tid": tid,
        }
        if args:
            event["args"] = args
        self.events.append(event)

    def counter(self, name: str, at: float, value: float) -> None:
        """A value over time (a counter track): ``name`` is ``value`` from ``at`` (seconds of
        ``CLOCK_MONOTONIC``) on."""
        self.events.append(
            {"name": name, "ph": "C", "ts": at * 1e6, "pid": self.pid, "args": {name: value}}
        )

    def batch_done(self) -> None:
        self.pending += 1
        if self.pending >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Appends this process's events so far, the core's spans included, to its part."""
        self.pending = 0
        for tid, stage, start, length in _packread.take_spans():
            track = CORE_TID + tid
            if track not in self.named:
                self.named.add(track)
                self.meta("thread_name", track, f"packread thread {tid}")
            self.events.append(
                {
                    "name": stage,
                    "cat": "stage",
                    "ph": "X",
                    "ts": start / 1e3,
                    "dur": length / 1e3,
                    "pid": self.pid,
                    "tid": track,
                }
            )
        if not self.events:
            return
        events, self.events = self.events, []
        with (
            contextlib.suppress(OSError),
            open(os.path.join(self.parts, f"{self.pid}.jsonl"), "a") as f,
        ):
            f.write("".join(json.dumps(e) + "\n" for e in events))

    def merge(self) -> None:
        """Writes the trace file from every process's part (this one's flushed first)."""
        self.flush()
        events: list[dict[str, Any]] = []
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(self.parts)):
                if name.endswith(".jsonl"):
                    with open(os.path.join(self.parts, name)) as f:
                        events.extend(json.loads(line) for line in f if line.strip())
        tmp = f"{self.path}.{self.pid}.tmp"
        with open(tmp, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
        os.replace(tmp, self.path)

    def close(self) -> None:
        if os.getpid() != self.pid:
            return
        with contextlib.suppress(OSError):
            if _worker() is not None:
                self.flush()
            else:
                self.merge()


def _worker() -> int | None:
    """This process's DataLoader worker id (``None``: not a worker, or no torch)."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:
        return None
    info = get_worker_info()
    return None if info is None else int(info.id)


def _process_name() -> str:
    worker = _worker()
    return "main" if worker is None else f"worker {worker}"
