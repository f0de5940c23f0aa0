"""Objects in object storage as reader sources: URLs (``s3://``, ``gs://``, ``az://``,
``abfs://``, ``http(s)://``) are opened here into the extension's ``RemoteObject``, which
every reader takes where it takes a path; glob URLs are listed here. A ``RemoteObject``
pickles with the size and ETag it was opened with, so a reader unpickled in a ``DataLoader``
worker makes no request to open it, and every later read still checks the object is the one
it opened."""

from __future__ import annotations

import copyreg
import fnmatch
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from glob import has_magic as glob_magic
from typing import Any

from . import _packread
from ._options import Remote
from .errors import (
    LimitExceededError,
    PackreadFileNotFoundError,
    PackreadOSError,
    UnsupportedError,
)

#: How many bytes an open fetches first: NPY headers and HDF5 superblocks lie in the head, a
#: ZIP archive's end records (and a small directory) in its last 64 KiB + 22 bytes.
HEAD_BYTES: int = _packread.HEAD_BYTES
TAIL_BYTES: int = _packread.TAIL_BYTES


def is_url(src: Any) -> bool:
    """Whether ``src`` is a URL string packread reads from object storage (a path with a lone
    surrogate, as ``os.fsdecode`` gives for bytes that are not UTF-8, is none)."""
    if not isinstance(src, str) or "://" not in src:
        return False
    try:
        return bool(_packread.is_url(src))
    except UnicodeEncodeError:
        return False


def url_has_glob(url: str) -> bool:
    """Whether a URL's path holds glob characters (an HTTP URL's query is not its path, nor
    its host: ``http://[::1]/x``; a URL that does not parse is none, and its open says why)."""
    if url.lower().startswith(("http://", "https://")):
        try:
            return glob_magic(urllib.parse.urlsplit(url).path)
        except ValueError:
            return False
    return glob_magic(url.split("://", 1)[1])


def open_remote(url: str, remote: Remote, *, tail: bool = False) -> Any:
    """Opens ``url``: one request for its head (or, ``tail=True``, its last bytes), which
    also gives its size and ETag."""
    first, n = ("tail", TAIL_BYTES) if tail else ("head", HEAD_BYTES)
    b = remote._binding()
    return _packread.RemoteObject(
        url, b["storage_options"], first, n, b["index_cache"], b["data_cache"]
    )


def stamp_of(obj: Any) -> list[Any]:
    """What identifies an opened object's content: ``[size, etag, modified]`` (its ETag and
    Last-Modified time, ``None`` where the server gives none)."""
    return [obj.size, obj.etag, obj.modified]


def remote_glob(pattern: str, remote: Remote | None) -> list[str]:
    """The objects a glob URL matches, sorted: an object store's listing, or for HTTP(S) the
    folder's index page."""
    if pattern.lower().startswith(("http://", "https://")):
        return http_glob(pattern)
    return list(_packread.remote_glob(pattern, Remote._of(remote)._pairs()))


#: Largest index page read for an HTTP glob.
MAX_INDEX_PAGE = 64 << 20


def http_glob(pattern: str, timeout: float = 30.0) -> list[str]:
    """The files an HTTP(S) folder's index page links to whose names match the last part of
    ``pattern`` (``https://host/data/*.npy``), sorted, as fsspec lists an HTTP folder: the
    ``href`` links of the page (nginx's or Apache's autoindex, ``python -m http.server``) that
    name a file directly in that folder. Glob characters must be in the last part only."""
    folder, _, name_pattern = pattern.rpartition("/")
    folder += "/"
    if url_has_glob(folder):
        raise UnsupportedError(
            f"{pattern}: over HTTP a glob may match file names only, not folders; list the URLs"
        )
    try:
        with urllib.request.urlopen(folder, timeout=timeout) as answer:
            page = answer.read(MAX_INDEX_PAGE + 1)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise PackreadFileNotFoundError(f"{folder}: no such folder (HTTP 404)") from None
        raise UnsupportedError(
            f"{pattern}: the server gives no index page to match a glob against (HTTP {e.code}); "
            "list the URLs"
        ) from None
    except OSError as e:
        raise PackreadOSError(f"{folder}: cannot read the folder's index page: {e}") from None
    if len(page) > MAX_INDEX_PAGE:
        raise LimitExceededError(f"{folder}: index page larger than {MAX_INDEX_PAGE} bytes")
    found = set()
    for href in re.findall(r"""href\s*=\s*["']([^"']+)["']""", page.decode("utf-8", "replace")):
        url = urllib.parse.urljoin(folder, href).split("#", 1)[0].split("?", 1)[0]
        if not url.startswith(folder):
            continue
        name = urllib.parse.unquote(url[len(folder) :])
        if name and "/" not in name and fnmatch.fnmatchcase(name, name_pattern):
            found.add(folder + urllib.parse.quote(name))
    return sorted(found)


def _restore(
    url: str,
    options: list[tuple[str, str]],
    size: int,
    etag: str | None,
    cache: str | None,
    data: tuple[str, int] | None = None,
    modified: int | None = None,
) -> Any:
    return _packread.RemoteObject.restore(url, options, size, etag, cache, data, modified)


def _reduce(obj: Any) -> tuple[Any, ...]:
    cache, data = obj.cache_dir, obj.data_cache
    return (
        _restore,
        (
            obj.url,
            obj.options,
            obj.size,
            obj.etag,
            None if cache is None else os.fspath(cache),
            None if data is None else (os.fspath(data[0]), int(data[1])),
            obj.modified,
        ),
    )


copyreg.pickle(_packread.RemoteObject, _reduce)


def is_remote(src: Any) -> bool:
    """Whether ``src`` is an opened remote object."""
    return isinstance(src, _packread.RemoteObject)
