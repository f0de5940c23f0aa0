"""Objects in object storage as reader sources: URLs (``s3://``, ``gs://``, ``az://``,
``abfs://``, ``http(s)://``) are opened here into the extension's ``RemoteObject``, which
every reader takes where it takes a path. A ``RemoteObject`` pickles with the size and ETag it
was opened with, so a reader unpickled in a ``DataLoader`` worker makes no request to open
it, and every later read still checks the object is the one it opened."""

from __future__ import annotations

import copyreg
import fnmatch
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from glob import has_magic as glob_magic
from pathlib import Path
from typing import Any

from . import _packread
from .errors import (
    InvalidArgumentError,
    LimitExceededError,
    PackreadFileNotFoundError,
    PackreadOSError,
    PackreadTypeError,
    UnsupportedError,
)

#: How many bytes an open fetches first: NPY headers and HDF5 superblocks lie in the head, a
#: ZIP archive's end records (and a small directory) in its last 64 KiB + 22 bytes.
HEAD_BYTES = 256 << 10
TAIL_BYTES = (64 << 10) + 22


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


def option_pairs(storage_options: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``storage_options`` as the string pairs the extension takes (booleans as
    ``"true"``/``"false"``, numbers as text)."""
    if storage_options is None:
        return []
    if not isinstance(storage_options, Mapping):
        raise PackreadTypeError(
            f"storage_options must be a dict, not {type(storage_options).__name__}"
        )
    pairs = []
    for key, value in storage_options.items():
        if not isinstance(key, str):
            raise PackreadTypeError(f"storage option names are str, not {type(key).__name__}")
        if isinstance(value, bool):
            value = "true" if value else "false"
        pairs.append((key, str(value)))
    return pairs


#: Default bound of the data cache (``cache_dir=``): 10 GiB.
DEFAULT_CACHE_DIR_BYTES = 10 << 30


def data_cache_of(
    cache_dir: str | os.PathLike[str] | None, cache_dir_bytes: int
) -> tuple[str, int] | None:
    """``(folder, bound)`` of the data cache ``cache_dir=`` asks for, or ``None``."""
    if cache_dir is None:
        return None
    if not isinstance(cache_dir, (str, os.PathLike)):
        raise PackreadTypeError(f"cache_dir must be a folder, not {type(cache_dir).__name__}")
    if isinstance(cache_dir_bytes, bool) or not isinstance(cache_dir_bytes, int):
        raise PackreadTypeError("cache_dir_bytes must be an int")
    if cache_dir_bytes < 1:
        raise InvalidArgumentError(f"cache_dir_bytes must be >= 1, not {cache_dir_bytes}")
    return (os.fspath(cache_dir), int(cache_dir_bytes))


def default_cache_dir() -> Path:
    """Where the index cache lives unless told: ``$PACKREAD_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/packread``, else ``~/.cache/packread``."""
    if os.environ.get("PACKREAD_CACHE_DIR"):
        return Path(os.environ["PACKREAD_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "packread"


def cache_dir_of(index_cache: bool | str | os.PathLike[str]) -> str | None:
    """The folder for ``index_cache=`` (``True``: the default one; ``False``: none)."""
    if index_cache is True:
        return str(default_cache_dir())
    if index_cache is False or index_cache is None:
        return None
    if isinstance(index_cache, (str, os.PathLike)):
        return os.fspath(index_cache)
    raise PackreadTypeError(
        f"index_cache must be a bool or a folder, not {type(index_cache).__name__}"
    )


def open_remote(
    url: str,
    storage_options: Mapping[str, Any] | None,
    *,
    tail: bool = False,
    index_cache: bool | str | os.PathLike[str] = True,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_dir_bytes: int = DEFAULT_CACHE_DIR_BYTES,
) -> Any:
    """Opens ``url``: one request for its head (or, ``tail=True``, its last bytes), which
    also gives its size and ETag. ``cache_dir``: keep fetched data there (1 MiB blocks, at
    most ``cache_dir_bytes``), for repeated epochs on one node."""
    first, n = ("tail", TAIL_BYTES) if tail else ("head", HEAD_BYTES)
    return _packread.RemoteObject(
        url,
        option_pairs(storage_options),
        first,
        n,
        cache_dir_of(index_cache),
        data_cache_of(cache_dir, cache_dir_bytes),
    )


def restore_remote(
    url: str,
    storage_options: Mapping[str, Any] | None,
    stamp: Any,
    index_cache: bool | str | os.PathLike[str] = True,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_dir_bytes: int = DEFAULT_CACHE_DIR_BYTES,
) -> Any:
    """The object at ``url`` as opened before, ``stamp`` being its ``(size, etag, modified)``
    (:func:`stamp_of`): no request until a read, and every read checks the object is still
    that one."""
    size, etag, modified = stamp
    return _packread.RemoteObject.restore(
        url,
        option_pairs(storage_options),
        int(size),
        etag,
        cache_dir_of(index_cache),
        data_cache_of(cache_dir, cache_dir_bytes),
        modified,
    )


def stamp_of(obj: Any) -> list[Any]:
    """What identifies an opened object's content: ``[size, etag, modified]`` (its ETag and
    Last-Modified time, ``None`` where the server gives none), as :func:`restore_remote`
    takes it."""
    return [obj.size, obj.etag, obj.modified]


def remote_glob(pattern: str, storage_options: Mapping[str, Any] | None) -> list[str]:
    """The objects a glob URL matches, sorted: an object store's listing, or for HTTP(S) the
    folder's index page."""
    if pattern.lower().startswith(("http://", "https://")):
        return http_glob(pattern)
    return list(_packread.remote_glob(pattern, option_pairs(storage_options)))


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


def remote_paths(src: Any, storage_options: Mapping[str, Any] | None) -> list[str] | None:
    """The URLs ``src`` names (a URL, a glob URL over the object listing, or a list of URLs),
    or ``None`` if it names local files."""
    if is_url(src):
        if url_has_glob(src):
            urls = remote_glob(src, storage_options)
            if not urls:
                raise PackreadFileNotFoundError(f"{src}: the pattern matches no objects")
            return urls
        return [src]
    if isinstance(src, (list, tuple)) and src and all(is_url(p) for p in src):
        return list(src)
    return None
