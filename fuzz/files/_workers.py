"""Long-lived worker processes that read the fuzzer's inputs: one for packread, one for the
reference readers, so that a crash (a signal) or a hang (a timeout) is caught and pinned on
the input in flight, and the imports are paid once per worker rather than once per input.

A worker's stdout and stderr go to a log file that is emptied before each input; on a crash or
a hang its tail (the op in flight, faulthandler's traceback, a Rust panic message) comes back
with the verdict. Workers run under an address-space limit, so that an allocation sized by a
damaged header fails (``MemoryError``, or an abort) instead of exhausting the machine."""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import os
import resource
import signal
import sys
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

#: Address space a worker may add to what it holds after its imports.
HEADROOM_BYTES = 4 << 30
STARTUP_SECONDS = 180.0


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _worker_main(conn: Connection, role: str, log_path: str, here: str) -> None:
    """The worker's loop: ``(fmt, path, arg, timeout)`` in, a result (or a harness error) out."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the harness, which stops us
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    sys.path.insert(0, here)
    if role == "packread":
        import _read_packread as reader
    else:
        import _read_reference as reader  # type: ignore[no-redef]
        import h5py
        import hdf5plugin  # noqa: F401
        import tables

        h5py._errors.silence_errors()
        tables.silence_hdf5_messages(True)
    import numpy as np

    np.seterr(all="ignore")
    limit = _vm_size() + HEADROOM_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        fmt, path, arg, timeout = msg
        os.ftruncate(2, 0)
        faulthandler.dump_traceback_later(max(timeout - 2.0, 1.0), exit=False)
        try:
            result: Any = ("ok", reader.read(fmt, path, arg))
        except BaseException:
            result = ("harness-error", traceback.format_exc())
        finally:
            faulthandler.cancel_dump_traceback_later()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            conn.send(result)
        except Exception:  # an unpicklable value: a harness bug, reported as such
            conn.send(("harness-error", traceback.format_exc()))


class Worker:
    """One worker process of ``role`` (``packread`` or ``reference``), restarted after it dies
    or hangs."""

    def __init__(self, role: str, logdir: Path) -> None:
        self.role = role
        self.log_path = logdir / f"{role}-worker.log"
        self.proc: Any = None
        self.conn: Connection | None = None
        self.restarts = 0

    def start(self) -> None:
        """Starts the worker; tries three times, a minute apart (packread's module may be in
        the middle of being rebuilt)."""
        for attempt in range(3):
            try:
                return self._start()
            except RuntimeError as exc:
                if attempt == 2:
                    raise
                print(f"files: {exc}; trying again in a minute", file=sys.stderr)
                time.sleep(60)

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        here = str(Path(__file__).resolve().parent)
        self.proc = ctx.Process(
            target=_worker_main,
            args=(child, self.role, str(self.log_path), here),
            daemon=True,
            name=f"fuzz-files-{self.role}",
        )
        self.proc.start()
        child.close()
        self.conn = parent
        if not parent.poll(STARTUP_SECONDS):
            self.stop()
            raise RuntimeError(f"the {self.role} worker did not start: {self.log_tail()}")
        try:
            parent.recv()
        except EOFError:
            raise RuntimeError(f"the {self.role} worker died starting: {self.log_tail()}") from None

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.is_alive() and self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.proc.join(2)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        if self.conn is not None:
            self.conn.close()
        self.proc = None
        self.conn = None

    def log_tail(self, limit: int = 4000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-limit:]

    def call(self, fmt: str, path: str, arg: Any, timeout: float) -> tuple[str, Any]:
        """``("ok", result)``, ``("crash", detail)``, ``("hang", detail)`` or
        ``("harness-error", traceback)``."""
        if self.proc is None or not self.proc.is_alive():
            if self.proc is not None:
                self.stop()
            self.start()
        assert self.conn is not None
        start = time.monotonic()
        try:
            self.conn.send((fmt, path, arg, timeout))
            ready = self.conn.poll(timeout)
        except OSError:
            ready = True
        if not ready:
            self.proc.kill()
            self.proc.join(5)
            detail = {
                "seconds": round(time.monotonic() - start, 1),
                "log": self.log_tail(),
            }
            self.stop()
            self.restarts += 1
            return "hang", detail
        try:
            status, result = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(5)
            code = self.proc.exitcode
            sig = ""
            if code is not None and code < 0:
                sig = signal.Signals(-code).name
            detail = {"exitcode": code, "signal": sig, "log": self.log_tail()}
            self.stop()
            self.restarts += 1
            return "crash", detail
        return status, result
