"""Where :class:`PackDataset` writes its batches, so that no batch costs fresh pages:

- :class:`Recycled` (the process that iterates reads in it): every batch is carved from a
  :class:`packread._packread.BufferPool` buffer, which returns to the pool when the batch's
  arrays and tensors are all gone (numpy's and torch's own reference counting; a batch still
  held is never written again). Page-locked when pinning.
- :class:`WorkerSlabs` (a DataLoader worker): a few buffers in shared memory, made once per
  worker process and written again and again. The worker sends a small :class:`Ticket` naming
  the slab instead of the batch; the main process maps each slab once (the first ticket for it
  carries its memory), and gives the batch out as tensors over that mapping. When those
  tensors are gone the slab goes back to its worker (an atomic state word in the slab: no
  message). A worker whose slabs are all held by the consumer reads into a new shared block,
  as torch would.
- :class:`Device`: copies batches to a CUDA device on a side stream, one batch ahead.
"""

from __future__ import annotations

import collections
import os
import secrets
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .. import _packread

#: ``[(shape, dtype)]``: the arrays of one batch, in order.
Specs = list[tuple[tuple[int, ...], np.dtype[Any]]]


def torch_ready(dtype: np.dtype[Any]) -> bool:
    """Whether ``torch.from_numpy`` takes arrays of ``dtype`` as they are."""
    return dtype.kind in "biufc" and dtype.isnative and dtype != np.longdouble


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())


_PIN_WARNED = False


def want_pinned(pin_memory: bool) -> bool:
    """Whether to pin: asked for, and a CUDA device to pin for (else a warning, once, as
    ``DataLoader(pin_memory=True)`` warns without an accelerator)."""
    global _PIN_WARNED
    if not pin_memory:
        return False
    if cuda_available():
        return True
    if not _PIN_WARNED:
        _PIN_WARNED = True
        warnings.warn(
            "pin_memory=True but no CUDA device is available: batches are not pinned",
            stacklevel=3,
        )
    return False


def _pinned_bytes(nbytes: int) -> np.ndarray:
    """``nbytes`` of page-locked host memory (torch's pinned allocator), as a numpy array."""
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).numpy()


class Recycled:
    """Batches carved from recycled buffers in this process (``keep``: free buffers kept)."""

    def __init__(self, keep: int, pinned: bool = False) -> None:
        self.pool = _packread.BufferPool(keep, _pinned_bytes if pinned else None)

    def arrays(self, specs: Specs) -> list[np.ndarray]:
        return self.pool.arrays(specs)


class _Slab:
    """One shared slab of a worker: the shared storage (a uint8 tensor, which is what is sent)
    and its state word's handle."""

    __slots__ = ("memory", "nbytes", "shared")

    def __init__(self, nbytes: int) -> None:
        storage = torch.UntypedStorage._new_shared(nbytes)
        # torch's stubs want a stride too; without one the tensor is contiguous, as wanted.
        self.memory = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (nbytes,))  # type: ignore[call-overload]
        self.memory[: _packread.SLAB_HEADER].zero_()
        self.shared = _packread.SharedSlab(self.memory.numpy())
        self.nbytes = nbytes


class Claim:
    """A slab a worker is reading a batch into."""

    __slots__ = ("arrays", "k", "send_memory", "slab")

    def __init__(self, k: int, slab: _Slab, send_memory: bool, specs: Specs) -> None:
        self.k = k
        self.slab = slab
        self.send_memory = send_memory
        self.arrays: list[np.ndarray] = slab.shared.arrays(specs)


class WorkerSlabs:
    """A DataLoader worker's shared slabs: at most ``keep``, made as needed."""

    def __init__(self, keep: int, num_workers: int, pin: bool, device: str | None) -> None:
        self.keep = keep
        #: What the main process does with the batches: page-lock the slabs; copy to a GPU.
        self.handling = (bool(pin), device)
        # The main process keeps the mappings of this many slabs (twice the workers' working
        # set: a new set of workers each epoch, while the last ones' batches are still held).
        self.main_keeps = 2 * keep * max(num_workers, 1)
        self.token = (os.getpid(), secrets.randbits(62))
        self.slabs: list[_Slab] = []

    def claim(self, specs: Specs) -> Claim | None:
        """A free slab that fits ``specs`` (made if there is room), claimed; ``None`` when every
        slab is held (by the consumer, or in flight)."""
        need = _packread.SLAB_HEADER + _packread.slab_bytes(specs)
        for k, slab in enumerate(self.slabs):
            if slab.nbytes >= need:
                got = slab.shared.claim()
                if got >= 0:
                    return Claim(k, slab, got == 0, specs)
        if len(self.slabs) >= self.keep:
            return None
        slab = _Slab(need)
        self.slabs.append(slab)
        if slab.shared.claim() < 0:  # a slab nobody has seen yet is free
            raise RuntimeError("packread: a new shared slab was busy")
        return Claim(len(self.slabs) - 1, slab, True, specs)

    def ticket(self, claim: Claim, specs: Specs, keys: list[str] | None, extra: Any) -> Ticket:
        return Ticket(
            self.token,
            claim.k,
            claim.slab.memory if claim.send_memory else None,
            specs,
            keys,
            extra,
            self.main_keeps,
            self.handling,
        )


class Ticket:
    """A batch a worker read into one of its shared slabs. Pickled to the main process, it
    becomes the batch there: tensors over the main process's mapping of the slab."""

    __slots__ = ("extra", "handling", "k", "keys", "main_keeps", "memory", "specs", "token")

    def __init__(
        self,
        token: tuple[int, int],
        k: int,
        memory: torch.Tensor | None,
        specs: Specs,
        keys: list[str] | None,
        extra: dict[str, np.ndarray] | None,
        main_keeps: int,
        handling: tuple[bool, str | None],
    ) -> None:
        self.token = token
        self.k = k
        self.memory = memory
        self.specs = specs
        self.keys = keys
        self.extra = extra
        self.main_keeps = main_keeps
        self.handling = handling

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return (
            receive,
            (
                self.token,
                self.k,
                self.memory,
                self.specs,
                self.keys,
                self.extra,
                self.main_keeps,
                self.handling,
            ),
        )


class _Mapped:
    """The main process's mapping of one worker slab."""

    __slots__ = ("memory", "pinned", "shared")

    def __init__(self, memory: torch.Tensor, pin: bool) -> None:
        self.memory = memory
        self.shared = _packread.SharedSlab(memory.numpy())
        self.pinned = False
        if pin:
            _host_register(memory)
            self.pinned = True

    def drop(self) -> None:
        if self.pinned:
            _host_unregister(self.memory)
            self.pinned = False


def _host_register(memory: torch.Tensor) -> None:
    """Page-locks ``memory`` where it is (CUDA's ``cudaHostRegister``)."""
    err = torch.cuda.cudart().cudaHostRegister(memory.data_ptr(), memory.numel(), 0)
    if int(err) != 0:
        raise RuntimeError(f"cudaHostRegister failed ({err})")


def _host_unregister(memory: torch.Tensor) -> None:
    torch.cuda.cudart().cudaHostUnregister(memory.data_ptr())


class _Registry:
    """The main process's mappings of worker slabs, most recently used last. Mappings beyond
    what the tickets ask to keep are dropped, oldest first, if no worker has claimed them
    (``SharedSlab.evict``): a worker then sends the slab's memory again with its next ticket."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.slabs: collections.OrderedDict[tuple[Any, ...], _Mapped] = collections.OrderedDict()
        #: The ``Device`` copying batches to each device asked for.
        self.devices: dict[str, Device] = {}

    def device(self, name: str) -> Device:
        with self.lock:
            if name not in self.devices:
                self.devices[name] = Device(name)
            return self.devices[name]

    def get(
        self, key: tuple[Any, ...], memory: torch.Tensor | None, keeps: int, pin: bool
    ) -> _Mapped:
        with self.lock:
            if memory is None:
                mapped = self.slabs.get(key)
                if mapped is None:
                    raise RuntimeError(
                        f"packread: a worker named shared slab {key} that this process never mapped"
                    )
                self.slabs.move_to_end(key)
                return mapped
            old = self.slabs.pop(key, None)
            if old is not None:
                old.drop()
            mapped = _Mapped(memory, pin)
            mapped.shared.registered()
            self.slabs[key] = mapped
            for other in list(self.slabs)[:-1]:
                if len(self.slabs) <= keeps:
                    break
                # A slab stays claimed forever if its worker is gone: a loader shut down with
                # batches still queued (an epoch left early) never receives them.
                if self.slabs[other].shared.evict() or not _alive(other[0][0]):
                    self.slabs.pop(other).drop()
            return mapped


def _alive(pid: int) -> bool:
    """Whether process ``pid`` (a worker that owns slabs) still exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        return True
    return True


_REGISTRY = _Registry()


def registry() -> _Registry:
    """This process's registry of worker slabs (a forked child starts its own)."""
    global _REGISTRY
    if _REGISTRY.pid != os.getpid():
        _REGISTRY = _Registry()
    return _REGISTRY


def receive(
    token: tuple[int, int],
    k: int,
    memory: torch.Tensor | None,
    specs: Specs,
    keys: list[str] | None,
    extra: dict[str, np.ndarray] | None,
    main_keeps: int,
    handling: tuple[bool, str | None],
) -> Any:
    """A :class:`Ticket` unpickled in the main process: the batch, as tensors over the slab
    (page-locked, or copied to the device, as the dataset asked)."""
    reg = registry()
    pin, device = handling
    locked = (pin or device is not None) and cuda_available()
    mapped = reg.get((token, k), memory, main_keeps, locked)
    tensors = [torch.from_numpy(a) for a in mapped.shared.lease(specs)]
    batch: Any = tensors[0] if keys is None else dict(zip(keys, tensors, strict=True))
    if extra:
        batch.update({name: torch.from_numpy(value) for name, value in extra.items()})
    if device is not None:
        batch = reg.device(device).now(batch)
    return batch


def _to(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_to(v, device) for v in value)
    return value


class Device:
    """Copies batches to ``device`` on a side stream: ``start(batch)`` queues a copy,
    ``finish()`` gives the oldest batch started on the device, the current stream waiting for
    its copy on the GPU (the host does not wait). A batch's host memory is held until its copy
    has ended."""

    def __init__(self, device: str | torch.device) -> None:
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"device must be a CUDA device, not {device!r}")
        self.stream = torch.cuda.Stream(device=self.device)
        #: (host batch, device batch, event) of copies started, oldest first.
        self.copies: collections.deque[tuple[Any, Any, Any]] = collections.deque()

    def start(self, batch: Any) -> None:
        """Starts copying ``batch`` (host memory) to the device, on the side stream."""
        current = torch.cuda.current_stream(self.device)
        # The side stream must not overwrite device memory the step still reads.
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            moved = _to(batch, self.device)
            event = torch.cuda.Event()
            event.record(self.stream)
        self.copies.append((batch, moved, event))

    def finish(self) -> Any:
        """The oldest batch started, on the device: the current stream waits for its copy (on
        the GPU; the host goes on)."""
        host, moved, event = self.copies.popleft()
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)
        _record(moved, current)
        # The host batch's memory may be recycled once the copy has ended.
        _release_after(host, event)
        return moved

    def now(self, batch: Any) -> Any:
        """``batch`` on the device, its copy queued on the side stream."""
        self.start(batch)
        return self.finish()


def _record(value: Any, stream: Any) -> None:
    """Tells torch's CUDA allocator that ``stream`` uses ``value``'s memory (allocated on the
    side stream)."""
    if isinstance(value, torch.Tensor):
        value.record_stream(stream)
    elif isinstance(value, dict):
        for v in value.values():
            _record(v, stream)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _record(v, stream)


_HELD: collections.deque[tuple[Any, Any]] = collections.deque()


def _release_after(host: Any, event: Any) -> None:
    """Holds ``host`` until ``event`` has happened (checked whenever another is added)."""
    _HELD.append((host, event))
    while _HELD and _HELD[0][1].query():
        _HELD.popleft()
    while len(_HELD) > 64:
        _HELD[0][1].synchronize()
        _HELD.popleft()
