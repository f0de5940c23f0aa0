"""The epoch clock: which epoch each iteration of a :class:`~packread.torch.PackDataset` is,
agreed between the process that made the dataset and its DataLoader workers (torch-free)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import weakref
from collections.abc import Callable
from typing import Any

from .._epoch import resume_point


def _clock_dir() -> str:
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return tempfile.gettempdir()


def _remove_clock(path: str, owner: int) -> None:
    # Copies of the dataset in forked workers share this finalizer; only the owner removes.
    if os.getpid() == owner:
        with contextlib.suppress(OSError):
            os.unlink(path)


class _EpochClock:
    """Which epoch each iteration of a dataset is, agreed between the process that made the
    dataset and its DataLoader workers (which hold copies, and are new processes each epoch
    unless ``persistent_workers``): a small record in a file, updated under ``flock``.

    Each iteration starts a *generation*; the first of the K workers of a DataLoader iteration
    to start decides its epoch (a pending ``set_epoch``/``load_state_dict``, else the previous
    generation's epoch + 1), the others join it. Workers of one DataLoader iteration share the
    loader's base seed; a worker id seen twice means a new iteration.
    """

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="packread-epochs-", dir=_clock_dir())
        os.write(fd, b"{}")
        os.close(fd)
        weakref.finalize(self, _remove_clock, self.path, os.getpid())

    @classmethod
    def _attach(cls, path: str) -> _EpochClock:
        clock = cls.__new__(cls)
        clock.path = path
        return clock

    def __reduce__(self) -> tuple[Any, ...]:
        return (_EpochClock._attach, (self.path,))

    def _update(self, change: Callable[[dict[str, Any]], Any]) -> Any:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 1 << 20, 0)
            record = json.loads(raw) if raw else {}
            result = change(record)
            data = json.dumps(record).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            return result
        finally:
            os.close(fd)

    def peek(self) -> dict[str, Any]:
        return self._update(lambda record: json.loads(json.dumps(record)))

    def set_fixed(self, epoch: int) -> None:
        """Sets the epoch every read of a map-style dataset is in, from now on."""

        def change(record: dict[str, Any]) -> None:
            record["fixed"] = epoch

        self._update(change)

    def fixed(self) -> int:
        """The epoch :meth:`set_fixed` last set (0 before)."""
        return int(self.peek().get("fixed", 0))

    def set_pending(self, epoch: int, start: int) -> None:
        def change(record: dict[str, Any]) -> None:
            record["pending"] = {"epoch": epoch, "start": start}

        self._update(change)

    def claim(
        self,
        token: int | None,
        worker: int,
        workers: int,
        resume_epoch: int | None,
        batches: int | Callable[[int, Any], int],
    ) -> dict[str, Any]:
        """The generation (``"epoch"``, ``"start"``: its first batch, ``"id"``...) of the
        iteration this worker starts. A new one records the ``"settings"`` the record holds
        then (``MixDataset``'s weights), so that every worker of an iteration reads with the
        same ones, whatever changes while they start.

        ``resume_epoch``: this worker's copy was given a worker state (StatefulDataLoader).
        ``batches``: batches per epoch, or a function of the epoch and the recorded settings
        giving them (a pending position at the end means the next epoch).
        """
        pid = os.getpid()
        count = batches if callable(batches) else (lambda _epoch, _settings: batches)

        def change(record: dict[str, Any]) -> dict[str, Any]:
            gen = record.get("gen")
            pending = record.pop("pending", None)
            if (
                gen is not None
                and pending is None
                and token is not None
                and gen["token"] == token
                and gen["workers"] == workers
                and worker not in gen["claimed"]
            ):
                gen["claimed"].append(worker)
                gen["pids"].append(pid)
                if resume_epoch is not None:
                    gen["used"] = True
                return dict(gen)
            used = False
            if resume_epoch is not None:
                epoch, start, used = resume_epoch, 0, True
            elif pending is not None:
                # A state saved at the end of an epoch resumes at the start of the next.
                epoch, start = resume_point(
                    pending["epoch"],
                    pending["start"],
                    count(pending["epoch"], record.get("settings")),
                )
            elif gen is not None and not gen["used"]:
                # The last iteration never yielded a batch: it did not use up its epoch.
                epoch, start = gen["epoch"], gen["start"]
            elif gen is not None:
                epoch, start = gen["epoch"] + 1, 0
            else:
                epoch, start = 0, 0
            record["gen"] = {
                "id": (gen["id"] + 1) if gen is not None else 0,
                "epoch": epoch,
                "start": start,
                "token": token,
                "workers": workers,
                "claimed": [worker],
                "pids": [pid],
                "used": used,
                "settings": record.get("settings"),
            }
            return dict(record["gen"])

        return self._update(change)

    def set_settings(self, settings: Any) -> None:
        """Records settings (JSON) the next generation takes (see :meth:`claim`)."""

        def change(record: dict[str, Any]) -> None:
            record["settings"] = settings

        self._update(change)

    def mark_used(self, gen_id: int) -> None:
        """Records that iteration ``gen_id`` yielded a batch (so the next one is a new epoch)."""

        def change(record: dict[str, Any]) -> None:
            gen = record.get("gen")
            if gen is not None and gen["id"] == gen_id:
                gen["used"] = True

        self._update(change)
