"""What a source is, said once for every reader and for :func:`packread.open`: one local file,
a folder, an object (a URL, or one opened already), many files (a list, or a glob of paths
or URLs: shards, or files of one sample each), bytes in memory, a binary file object, or a
mapping of names to sources (several arrays read together)."""

from __future__ import annotations

import glob
import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._common import byte_view
from ._options import Remote
from ._remote import is_remote, is_url, remote_glob, url_has_glob
from .errors import InvalidArgumentError, PackreadFileNotFoundError, PackreadTypeError

#: The kinds of source.
FILE, FOLDER, URL, OBJECT, FILES, BYTES, FILE_OBJECT, MAPPING = (
    "file",
    "folder",
    "url",
    "object",
    "files",
    "bytes",
    "file object",
    "mapping",
)


@dataclass(frozen=True)
class Source:
    """A source, classified."""

    #: One of the kinds above.
    kind: str
    #: What it is: a path, a URL, an opened object, a list of paths or URLs, a bytes-like
    #: object, a file object, or a dict of sources.
    value: Any
    #: How messages name it, and whose suffix tells its format.
    name: str

    @property
    def many(self) -> bool:
        """Whether it names several files."""
        return self.kind == FILES

    @property
    def first(self) -> str:
        """The name of its (first) file."""
        return self.value[0] if self.kind == FILES else self.name

    @property
    def local(self) -> bool:
        """Whether its files are local paths."""
        return self.kind in (FILE, FOLDER) or (
            self.kind == FILES and not any(is_url(p) for p in self.value)
        )


BytesLike = (bytes, bytearray, memoryview, np.ndarray)


def is_file_object(obj: Any) -> bool:
    """A binary file object: something with ``read`` (or ``readinto``) and ``seek``."""
    if isinstance(obj, io.TextIOBase):
        return False
    return callable(getattr(obj, "seek", None)) and (
        callable(getattr(obj, "readinto", None)) or callable(getattr(obj, "read", None))
    )


def _paths(items: Any) -> list[str]:
    out = []
    for p in items:
        if not isinstance(p, (str, os.PathLike)):
            raise PackreadTypeError(f"a list of files holds paths or URLs, not {type(p).__name__}")
        out.append(os.fspath(p))
    if not out:
        raise InvalidArgumentError("source is an empty list of files")
    if any(is_url(f) for f in out) and not all(is_url(f) for f in out):
        raise InvalidArgumentError("a list source holds either URLs or local paths, not both")
    return out


def classify(source: Any, remote: Remote | None = None) -> Source:
    """``source`` classified; a glob is expanded here (sorted; a URL's over the listing), and
    a glob matching nothing is an error naming it."""
    remote = Remote._of(remote)
    if is_remote(source):
        return Source(OBJECT, source, source.url)
    if isinstance(source, (list, tuple)):
        paths = _paths(source)
        return Source(FILES, paths, paths[0])
    if isinstance(source, Mapping):
        if not source:
            raise InvalidArgumentError("source is an empty mapping")
        return Source(MAPPING, dict(source), next(iter(source)))
    if isinstance(source, BytesLike):
        return Source(BYTES, source, "<bytes>")
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not isinstance(path, str):
            raise PackreadTypeError("paths are str or os.PathLike of str, not bytes")
        if is_url(path):
            if url_has_glob(path):
                urls = remote_glob(path, remote)
                if not urls:
                    raise PackreadFileNotFoundError(f"{path}: the pattern matches no objects")
                return Source(FILES, urls, urls[0])
            return Source(URL, path, path)
        if os.path.isdir(path):
            return Source(FOLDER, path, path)
        if glob.has_magic(path) and not os.path.exists(path):
            files = sorted(glob.glob(path))
            if not files:
                raise PackreadFileNotFoundError(f"{path}: the pattern matches no files")
            return Source(FILES, files, files[0])
        return Source(FILE, path, path)
    if is_file_object(source):
        name = getattr(source, "name", None)
        return Source(FILE_OBJECT, source, name if isinstance(name, str) else "<file object>")
    raise PackreadTypeError(
        "source must be a path, a URL, a list or glob of files, bytes, a binary file object "
        f"or a reader, not {type(source).__name__}"
    )


def in_place(source: Source) -> Any:
    """What the extension reads a one-file source from: a path, an opened object, a binary
    file object (read through its ``seek``/``readinto``), ``bytes`` as they are, any other
    bytes-like object as a zero-copy ``uint8`` view."""
    if source.kind == BYTES:
        value = source.value
        return value if isinstance(value, bytes) else byte_view(value, "source")
    return source.value


def folder_files(folder: str, suffix: str) -> list[str]:
    """The ``*suffix`` files of a folder, sorted."""
    names = sorted(n for n in os.listdir(folder) if n.endswith(suffix))
    if not names:
        raise PackreadFileNotFoundError(f"{folder}: no {suffix} files in this directory")
    return [os.path.join(folder, n) for n in names]
