"""The format registry: one record per format, each registered by its reader's module. It
alone answers "which format is this source?": by the options only one format takes, by what a
format finds inside (images in an archive, an ``ImageFolder`` tree), by the file's suffix, or
by its first bytes. :func:`packread.open` and the torch datasets ask it; nothing else sniffs
or routes."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._common import open_regular
from ._sources import BYTES, FILE, FILE_OBJECT, FILES, FOLDER, MAPPING, OBJECT, URL, Source
from .errors import InvalidArgumentError, PackreadIsADirectoryError, PackreadOSError

#: How many leading bytes a format's recogniser sees (for HDF5, 8 bytes at each place a
#: superblock may start: 0, 512, 1024, ... up to 1 MiB).
HEAD_BYTES = 8


@dataclass(frozen=True)
class Format:
    """One format packread reads."""

    #: Its name (``packread.open(..., format=name)``).
    name: str
    #: The reader class that reads it.
    reader: type
    #: File name suffixes (lower case) that say a file is of this format.
    suffixes: tuple[str, ...] = ()
    #: Whether leading bytes are this format's (``head(offset)`` reads 8 bytes at an offset,
    #: or ``b""`` past the end).
    magic: Callable[[Callable[[int], bytes]], bool] | None = None
    #: Whether this format claims a source before suffixes and bytes are looked at: options
    #: only it takes, or what it finds inside (images in an archive, an ``ImageFolder`` tree).
    claims: Callable[[Source, dict[str, Any]], bool] | None = None
    #: Whether many files of this format are read as shards (else each file is one sample,
    #: as for a folder of ``.npy`` files).
    shards: bool = True
    #: The options its reader takes (from its signature).
    options: frozenset[str] = field(default=frozenset())
    #: What the option names of earlier releases still route here (with a warning).
    old_options: frozenset[str] = field(default=frozenset())
    #: The options its reader requires (from its signature: no default): a source given them
    #: all is this format's before any other's claims are asked.
    required: frozenset[str] = field(default=frozenset())


_FORMATS: dict[str, Format] = {}


def reader_options(reader: type) -> frozenset[str]:
    """The keyword parameters of ``reader``'s constructor, but its source."""
    params = inspect.signature(reader.__init__).parameters.values()
    return frozenset(
        p.name
        for p in params
        if p.name not in ("self", "source") and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    )


def required_options(reader: type) -> frozenset[str]:
    """The parameters of ``reader``'s constructor, but its source, that have no default."""
    params = inspect.signature(reader.__init__).parameters.values()
    return frozenset(
        p.name
        for p in params
        if p.name not in ("self", "source")
        and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        and p.default is p.empty
    )


def register(fmt: Format) -> Format:
    """Adds ``fmt`` (its options taken from its reader's signature); returns the record."""
    record = Format(
        name=fmt.name,
        reader=fmt.reader,
        suffixes=tuple(s.lower() for s in fmt.suffixes),
        magic=fmt.magic,
        claims=fmt.claims,
        shards=fmt.shards,
        options=reader_options(fmt.reader),
        old_options=fmt.old_options,
        required=required_options(fmt.reader),
    )
    _FORMATS[fmt.name] = record
    return record


def formats() -> list[Format]:
    """Every format, in the order registered."""
    return list(_FORMATS.values())


def get(name: str) -> Format:
    """The format named ``name``."""
    try:
        return _FORMATS[name]
    except KeyError:
        raise InvalidArgumentError(f"no format {name!r} (formats: {sorted(_FORMATS)})") from None


def of_reader(reader: Any) -> Format | None:
    """The format ``reader`` (an instance) reads, if it is one of packread's."""
    for fmt in _FORMATS.values():
        if isinstance(reader, fmt.reader):
            return fmt
    return None


def head_of(source: Source) -> Callable[[int], bytes] | None:
    """Reads 8 bytes at an offset of a source's (first) file, or ``None`` where its bytes are
    not looked at (objects in object storage are told by their names). A FIFO, socket or
    device is refused at once (``PackreadOSError``), never opened in a way that blocks."""
    kind = source.kind
    if kind in (FILE, FILES) and source.local:
        path = source.first
        cache: dict[int, bytes] = {}

        def head(offset: int) -> bytes:
            if offset not in cache:
                try:
                    with open_regular(path) as f:
                        f.seek(offset)
                        cache[offset] = f.read(HEAD_BYTES)
                except PackreadIsADirectoryError:
                    cache[offset] = b""
                except PackreadOSError:
                    raise
                except OSError:
                    cache[offset] = b""
            return cache[offset]

        return head
    if kind == BYTES:
        data = memoryview(source.value).cast("B") if not isinstance(source.value, bytes) else None
        raw = source.value if data is None else data
        return lambda offset: bytes(raw[offset : offset + HEAD_BYTES])
    if kind == FILE_OBJECT:
        f = source.value

        def head(offset: int) -> bytes:
            at = f.tell()
            try:
                f.seek(offset)
                return bytes(f.read(HEAD_BYTES) or b"")
            finally:
                f.seek(at)

        return head
    return None


def takes(fmt: Format, options: dict[str, Any]) -> bool:
    """Whether ``fmt``'s reader takes the ``options`` given: none of them is another format's
    and not its own (an earlier release's name, which no format lists, is left to the
    reader)."""
    others: set[str] = set()
    for f in _FORMATS.values():
        if f is not fmt:
            others |= f.options
    return not (set(options) - fmt.options - fmt.old_options) & others


def identify(source: Source) -> Format | None:
    """The format a file's name (its suffix) or, failing that, its first bytes say; ``None``
    for a folder, a mapping, or a file neither tells."""
    if source.kind in (FOLDER, MAPPING):
        return None
    name = source.first.lower() if source.kind in (FILE, FILES, URL, OBJECT) else ""
    for fmt in _FORMATS.values():
        if fmt.suffixes and name.endswith(fmt.suffixes):
            return fmt
    head = head_of(source)
    if head is not None:
        for fmt in _FORMATS.values():
            if fmt.magic is not None and fmt.magic(head):
                return fmt
    return None


def detect(source: Source, options: dict[str, Any]) -> Format:
    """The format of ``source``, given with ``options``: first a format whose reader requires
    options and is given them all, then the first format that claims it and takes the options
    given, then by suffix and by leading bytes."""
    given = set(options)
    for fmt in _FORMATS.values():
        required = bool(fmt.required) and fmt.required <= given
        if required and (fmt.claims is None or fmt.claims(source, options)):
            return fmt
    for fmt in _FORMATS.values():
        if fmt.claims is not None and takes(fmt, options) and fmt.claims(source, options):
            return fmt
    if source.kind in (FOLDER, MAPPING):
        raise InvalidArgumentError(
            f"{source.name}: cannot tell what this {source.kind} holds (a folder of .npy or "
            ".npz files, or an ImageFolder tree of images); pass format="
        )
    found = identify(source)
    if found is not None:
        return found
    known = ", ".join(s for f in _FORMATS.values() for s in f.suffixes)
    raise InvalidArgumentError(
        f"{source.name}: cannot tell the format (expected {known}, or a folder of .npy or "
        ".npz files); pass format= or a reader"
    )


def suffix_of(path: str) -> str:
    return os.path.splitext(path)[1].lower()


def sniff(path: str) -> str | None:
    """The format a local file's first bytes say (``"hdf5"``, ``"zip"``, ``"npy"``), or
    ``None`` if none fits (or it cannot be read, or is a folder)."""
    head = head_of(Source(FILE, path, path))
    if head is None:
        return None
    for fmt in _FORMATS.values():
        if fmt.magic is not None and fmt.magic(head):
            return fmt.name
    return None
