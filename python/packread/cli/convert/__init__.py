"""``packread convert``: rewrite data into the layout training reads want.

* HDF5 -> HDF5: every dataset of samples rechunked to ``k`` samples per chunk (by default one
  sample, or enough small samples to fill :data:`~packread.cli.inspect.MIN_CHUNK_BYTES`) with
  a codec packread decodes natively; other datasets, groups and attributes copied as they are.
* A folder of ``.npy`` or ``.npz`` files -> one HDF5 file (one dataset per array) or one
  uncompressed ZIP (``.npy`` files as they are; NPZ arrays as ``KEY/NAME.npy`` members).
* ZIP -> HDF5: ``.npy`` members (or raw members with ``dtype``/``shape``) as one dataset.
* An ``ImageFolder`` tree (``root/<class>/<file>``) -> one uncompressed ZIP: each image file as
  it is, named ``<class>/<file>``, in ``torchvision.datasets.ImageFolder``'s sample order, and
  a ``dataset.json`` member ``{"labels": {member: label}, "classes": [...]}``, so that
  :class:`packread.ImageReader` gives the tree's images with the labels ImageFolder gives.
  (A ZIP of images is read by :class:`~packread.ImageReader` as it is: nothing to convert.)
* A compressed tar (``.tar.gz``, ``.tgz``, bzip2, xz) -> an uncompressed ``.tar`` or a stored
  ZIP (:mod:`.tars`): its regular members in order, names kept, so that
  :class:`packread.TarReader` (or ``ZipReader(fields=)``) reads its samples at random.

The source is only read. Samples stream through in blocks of about ``memory_bytes``; the
output is written to ``DST.partial`` and renamed to ``DST`` at the end, so ``DST`` never
exists half-written. After each checkpoint ``DST.partial.json`` records how far the copy got,
and ``resume=True`` (``--resume``) continues from there after a crash or an interrupt; it
starts over (and says why) when the run stopped before recording any sample, and does nothing
(and says so) when ``DST`` is already complete.
HDF5 output needs h5py (and hdf5plugin for zstd, lz4, blosc and bitshuffle).

>>> result = convert("data/train/", "train-packed.h5", progress=False)
>>> result.samples
64

The modules: :mod:`.sources` (what is read), :mod:`.sinks` (the HDF5 and ZIP writers),
:mod:`.codecs` (``--codec``), :mod:`.journal` (the files of an unfinished run, and resuming
it), :mod:`.complete` (a resumed run that finds DST complete) and :mod:`.progress` (the bar).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from inspect import signature
from typing import Any

import numpy as np

from ..._deprecated import unknown, warn
from ..._hdf5 import HDF5Reader
from ..._image import LABELS_MEMBER, ImageReader
from ..._open import resolve
from ..._zip import ZipReader
from ...errors import InvalidArgumentError, PackreadError, UnsupportedError
from .. import _images
from .codecs import CODECS as CODECS
from .codecs import codec_options as codec_options
from .complete import _complete_datasets, _unlike_output
from .journal import (
    _clear,
    _directory_copies,
    _finished_before,
    _partial_paths,
    _remove,
    _resume_point,
    _save_state,
)
from .progress import _progress
from .sinks import MAX_CHUNK_BYTES as MAX_CHUNK_BYTES
from .sinks import _chunk_rows, _H5Sink, _output_kind, _Sink, _ZipSink
from .sources import _block_rows, _ImageTreeSource, _open_source, _Source
from .tars import convert_tar, is_compressed_tar

__all__ = [
    "CODECS",
    "DEFAULT_CHECKPOINT_SECONDS",
    "DEFAULT_MEMORY_BYTES",
    "MAX_CHUNK_BYTES",
    "PAIRS",
    "ConvertResult",
    "MismatchError",
    "codec_options",
    "convert",
    "verify_conversion",
]

#: What is converted into what.
PAIRS = (
    ("hdf5", "hdf5"),
    ("npy", "hdf5"),
    ("npy", "zip"),
    ("npz", "hdf5"),
    ("npz", "zip"),
    ("zip", "hdf5"),
    ("image-folder", "zip"),
)
#: Memory for one block of samples in flight.
DEFAULT_MEMORY_BYTES = 256 << 20
#: Seconds between checkpoints (each flushes the output and records progress).
DEFAULT_CHECKPOINT_SECONDS = 10.0


class MismatchError(PackreadError, ValueError):
    """A converted sample differs from its source (raised by :func:`verify_conversion`)."""


@dataclass
class ConvertResult:
    """What :func:`convert` wrote.

    >>> convert("data/train/", "samples.zip", progress=False).datasets
    {'data': {'dtype': 'float32', 'sample_shape': [4, 8], 'chunks': None, 'members': '*.npy'}}
    """

    src: str
    dst: str
    #: Samples written (of a compressed tar: members copied).
    samples: int
    #: Per converted array: dtype, sample shape, chunk shape and codec (HDF5) of the output.
    datasets: dict[str, dict[str, Any]]
    #: HDF5 datasets copied as they are (no sample axis shared with the others).
    copied: list[str] = field(default_factory=list)
    #: Samples already converted when a resumed run started (0 for a fresh run).
    resumed_from: int = 0
    #: Why a resumed run started over (nothing usable was recorded), or None.
    restarted: str | None = None
    #: A resumed run found DST already complete and wrote nothing.
    already_complete: bool = False
    seconds: float = 0.0
    dst_bytes: int = 0
    #: Attributes that could not be copied, and why.
    warnings: list[str] = field(default_factory=list)


def convert(
    source: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    codec: str = "none",
    samples_per_chunk: int | None = None,
    shuffle: str = "auto",
    arrays: list[str] | None = None,
    members: str | None = None,
    dtype: Any = None,
    shape: tuple[int, ...] | None = None,
    name: str = "data",
    force: bool = False,
    resume: bool = False,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS,
    verify: bool = False,
    progress: bool = True,
    on_checkpoint: Callable[[int], None] | None = None,
    **deprecated: Any,
) -> ConvertResult:
    """Converts ``source`` into ``dst`` (see the module's description for the pairs).

    ``samples_per_chunk`` is ``k`` for every HDF5 output dataset (default: per dataset, one
    sample or enough to fill 4 KiB); ``codec`` one of :data:`CODECS` (``"gzip:6"``,
    ``"blosc:lz4:5"``...); ``shuffle`` ``"auto"`` (byte shuffle for items wider than a byte),
    ``"none"``, ``"byte"`` or ``"bit"`` (blosc only). ``arrays`` picks HDF5 datasets,
    ``members`` (a glob), ``dtype`` and ``shape`` the members of a ZIP source, ``name`` the
    dataset made from an NPY folder or a ZIP. An ``ImageFolder`` tree is packed into a ZIP
    outside the tree. ``dst`` must not exist unless ``force``.
    ``resume`` continues an interrupted run from its last checkpoint: from the start when no
    sample was recorded yet (``DST.partial`` without a progress record, or one at sample 0),
    and not at all when ``dst`` exists with no ``DST.partial`` and holds what this conversion
    writes (a finished run: ``already_complete``). ``on_checkpoint(samples_done)`` runs after
    every checkpoint. ``verify`` reads ``dst`` back and compares every sample with ``source``.
    ``datasets=``, the name of earlier releases for ``arrays``, still works with a
    ``DeprecationWarning``.

    >>> convert("train.h5", "train-1.h5", samples_per_chunk=1, codec="lz4", progress=False).samples
    64
    """
    started = time.perf_counter()
    arrays = _datasets(deprecated, arrays)
    src, dst = os.fspath(source), os.fspath(dst)
    if not os.path.exists(src):
        raise FileNotFoundError(f"{src}: no such file or folder")
    if os.path.isfile(src) and is_compressed_tar(src):
        copied = convert_tar(src, dst, force=force, progress=progress)
        return ConvertResult(
            src,
            dst,
            copied,
            {},
            dst_bytes=os.path.getsize(dst),
            seconds=time.perf_counter() - started,
        )
    out_kind = _output_kind(dst)
    partial, journal = _partial_paths(dst)
    finished_before = _finished_before(src, dst, partial, resume, force)
    in_kind = _input_kind(src, members, dtype, shape)
    if in_kind == "image-zip":
        raise UnsupportedError(
            f"{src}: a ZIP of images, which packread.ImageReader reads as it is (labelled by "
            f"its {LABELS_MEMBER} or its class folders): nothing to convert; convert packs an "
            "ImageFolder tree (a folder of class folders) into such a ZIP"
        )
    if in_kind == "image-folder":
        _outside(src, dst)
    if (in_kind, out_kind) not in PAIRS:
        pairs = ", ".join(f"{a} -> {b}" for a, b in PAIRS)
        raise UnsupportedError(f"cannot convert {in_kind} into {out_kind} (supported: {pairs})")
    if samples_per_chunk is not None and samples_per_chunk < 1:
        raise InvalidArgumentError(f"samples_per_chunk must be >= 1, not {samples_per_chunk}")
    if out_kind == "hdf5":
        codec_options(codec, 4, shuffle)  # refuses a bad codec before anything is written
    opened = _open_source(src, in_kind, arrays, members, dtype, shape, name, out_kind)
    # What the progress record names: a resumed run must have been started with the same.
    options = {
        "dst": os.path.abspath(dst),
        "codec": codec,
        "samples_per_chunk": samples_per_chunk,
        "shuffle": shuffle,
        # "datasets": the key of earlier releases, so that their unfinished runs resume.
        "datasets": arrays,
        "members": members,
        "dtype": None if dtype is None else str(np.dtype(dtype)),
        "shape": None if shape is None else list(shape),
        "name": name,
    }
    rows = _chunk_rows(opened, out_kind, samples_per_chunk)
    if finished_before:
        try:
            mismatch = _unlike_output(dst, out_kind, opened, rows, codec, shuffle)
            if mismatch is None:
                return _already_complete(src, dst, out_kind, opened, rows, codec, verify, started)
        except BaseException:
            opened.close()
            raise
        if not force:
            opened.close()
            raise FileExistsError(
                f"{dst} exists and is not what this conversion writes ({mismatch}); "
                "pass --force (force=True) to replace it"
            )
    try:
        state, restarted = (
            _resume_point(partial, journal, opened, options) if resume else (None, None)
        )
    except BaseException:
        opened.close()
        raise
    if state is None:
        _clear(partial, journal)
    try:
        if out_kind == "hdf5":
            sink: _Sink = _H5Sink(partial, opened, rows, codec, shuffle, state is not None)
        else:
            sink = _ZipSink(partial, opened, state)
    except BaseException:
        if state is None:
            _remove(partial, journal)  # nothing written worth resuming
        raise
    done = state["done"] if state else 0
    block = _block_rows(opened, rows, memory_bytes)
    bar = _progress(opened.n, done, dst, progress)
    last = time.monotonic()
    finished = False
    try:
        # Each checkpoint: the sink makes its output durable, the progress record names it,
        # then the sink lets older resume data go.
        if state is None:
            _save_state(journal, opened, options, 0, sink.checkpoint())
            sink.committed()
        lo = done
        while lo < opened.n:
            hi = min(opened.n, lo + block)
            sink.write(lo, hi, opened)
            bar.update(hi - lo)
            lo = hi
            if lo == opened.n or time.monotonic() - last >= checkpoint_seconds:
                _save_state(journal, opened, options, lo, sink.checkpoint())
                sink.committed()
                last = time.monotonic()
                if on_checkpoint is not None:
                    on_checkpoint(lo)
        sink.close()
        finished = True
    finally:
        bar.close()
        sink.abandon()
        if not (finished and verify):
            opened.close()
    os.replace(partial, dst)
    _remove(journal, *_directory_copies(partial))
    result = ConvertResult(
        src,
        dst,
        opened.n,
        sink.describe(),
        copied=list(opened.copies),
        resumed_from=done,
        restarted=restarted,
        dst_bytes=os.path.getsize(dst),
        warnings=[*sink.warnings, *opened.notes()],
    )
    if verify:
        try:
            verify_conversion(src, dst, result, opened)
        finally:
            opened.close()
    result.seconds = time.perf_counter() - started
    return result


def _datasets(deprecated: dict[str, Any], arrays: list[str] | None) -> list[str] | None:
    """``arrays`` with the ``datasets=`` of earlier releases folded in, with a
    ``DeprecationWarning``."""
    for name in deprecated:
        if name != "datasets":
            params = signature(convert).parameters
            raise unknown("convert", name, [p for p in params if p != "source"])
    if "datasets" not in deprecated:
        return arrays
    warn("convert(datasets=)", "arrays=")
    if arrays is not None:
        raise TypeError("convert() got both datasets= and arrays=")
    return deprecated["datasets"]  # type: ignore[no-any-return]


def _input_kind(src: str, members: str | None, dtype: Any, shape: Any) -> str:
    """What ``src`` is: ``"image-folder"`` (an ImageFolder tree), ``"image-zip"`` (a ZIP of
    images, unless ``members``, ``dtype`` or ``shape`` say how to read its members as
    arrays), else as the format registry tells. A folder of loose images is
    refused, saying why."""
    if os.path.isdir(src):
        if _images.is_image_tree(src):
            return "image-folder"
        loose = _images.loose_images(src)
        if loose and not any(e.name.endswith((".npy", ".npz")) for e in os.scandir(src)):
            raise _images.loose_images_error(src, loose)
    arrays = members is not None or dtype is not None or shape is not None
    kind = resolve(src, None, {"members": members} if arrays else {}).name
    if kind == "images":
        return "image-zip"
    return kind


def _outside(src: str, dst: str) -> None:
    """Refuses an output inside the tree it packs: the tree is only read."""
    root = os.path.realpath(src)
    where = os.path.realpath(os.path.dirname(os.path.abspath(dst)))
    if os.path.commonpath([root, where]) == root:
        raise InvalidArgumentError(
            f"{dst}: inside {src}, the tree it packs; write it outside (SOURCE is only read)"
        )


def _already_complete(
    src: str,
    dst: str,
    out_kind: str,
    source: _Source,
    rows: dict[str, int],
    codec: str,
    verify: bool,
    started: float,
) -> ConvertResult:
    """The result of resuming a finished run: DST is left as it is (its leftover progress
    files, from a run stopped between the rename and their removal, go)."""
    partial, journal = _partial_paths(dst)
    _remove(journal, journal + ".tmp", *_directory_copies(partial))
    print(f"packread convert: {dst} is complete; nothing to do", file=sys.stderr)
    result = ConvertResult(
        src,
        dst,
        source.n,
        _complete_datasets(out_kind, source, rows, codec),
        copied=list(source.copies),
        resumed_from=source.n,
        dst_bytes=os.path.getsize(dst),
        already_complete=True,
    )
    try:
        if verify:
            verify_conversion(src, dst, result, source)
    finally:
        source.close()
    result.seconds = time.perf_counter() - started
    return result


def verify_conversion(
    src: str, dst: str, result: ConvertResult, source: _Source | None = None
) -> None:
    """Reads every sample of ``dst`` and compares it with ``src``, bit for bit; raises
    ``ValueError`` naming the first sample that differs.

    >>> result = convert("data/train/", "checked.zip", progress=False)
    >>> verify_conversion("data/train/", "checked.zip", result)
    """
    src, dst = os.fspath(src), os.fspath(dst)
    if source is None:
        in_kind = _input_kind(src, None, None, None)
        if in_kind == "image-folder":
            source = _open_source(src, in_kind, None, None, None, None, "data", "zip")
    if isinstance(source, _ImageTreeSource):
        _verify_images(src, dst, source)
        return
    if source is None:
        names = list(result.datasets) if in_kind == "hdf5" else None
        name = next(iter(result.datasets), "data")
        source = _open_source(src, in_kind, names, None, None, None, name, _output_kind(dst))
    readers: dict[str, Any] = {}
    for name in result.datasets:
        if _output_kind(dst) == "hdf5":
            readers[name] = HDF5Reader(dst, name)
        else:
            readers[name] = ZipReader(dst, members=source.pattern(name))
    step = _block_rows(source, dict.fromkeys(result.datasets, 1), DEFAULT_MEMORY_BYTES)
    for lo in range(0, source.n, step):
        hi = min(source.n, lo + step)
        want = source.read(lo, hi)
        for name, reader in readers.items():
            got, exp = reader.batch(range(lo, hi)), want[name]
            if got.dtype != exp.dtype or got.shape != exp.shape:
                raise MismatchError(
                    f"{dst}: {name} holds {got.dtype} {got.shape[1:]} samples, "
                    f"{src} {exp.dtype} {exp.shape[1:]}"
                )
            if got.tobytes() != exp.tobytes():
                bad = next(i for i in range(hi - lo) if got[i].tobytes() != exp[i].tobytes())
                raise MismatchError(f"{dst}: {name} sample {lo + bad} differs from {src}")


def _verify_images(src: str, dst: str, source: _ImageTreeSource) -> None:
    """Every member of ``dst`` equals its file in the tree, byte for byte, its
    ``dataset.json`` is the tree's, and :class:`~packread.ImageReader` gives every image the
    label ImageFolder gives it."""
    import zipfile

    with zipfile.ZipFile(dst) as z:
        if z.namelist() != [LABELS_MEMBER, *source.names]:
            raise MismatchError(f"{dst}: its members are not the images of {src}")
        if z.read(LABELS_MEMBER) != source.labels_json:
            raise MismatchError(f"{dst}: its {LABELS_MEMBER} is not the labels of {src}")
        for name, path in zip(source.names, source.files, strict=True):
            with open(path, "rb") as f:
                if z.read(name) != f.read():
                    raise MismatchError(f"{dst}: {name} differs from {path}")
    reader = ImageReader(dst)
    assert reader.labels is not None
    got = dict(zip(reader.names(), reader.labels.tolist(), strict=True))
    if got != dict(zip(source.names, source.labels, strict=True)):
        raise MismatchError(f"{dst}: ImageReader gives other images or labels than {src}")


# Defined in .codecs; it has always been public here, and is documented (and its examples
# run) as part of this module.
codec_options.__module__ = __name__
