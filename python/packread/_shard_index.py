"""The shard index file (``shard_index=``): a JSON file recording what counting a reader's
shards found (each shard's length, the arrays, labels and objects' stamps), keyed by the
format, the options and each file's size and modification time. A reopen that finds it
current opens no shard until a batch touches one; a stale, damaged or hand-edited file is
rebuilt, never trusted."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from . import _packread
from ._common import open_regular
from .errors import PackreadFileNotFoundError, os_error

#: The version of the index file's layout.
INDEX_FORMAT = 2

#: Largest index file read (one of a million shards is about 100 MB); a larger one is rebuilt.
MAX_INDEX_BYTES = 1 << 30


def jsonable(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples as lists)."""
    return json.loads(json.dumps(value, default=repr))


def key(format: str, options: dict[str, Any], paths: list[str]) -> dict[str, Any] | None:
    """What an index file must have been written for: the format, options and files (``None``
    when a shard is missing, counting opens it and says so; or an object, whose stamp only an
    open tells)."""
    stamps = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            return None
        stamps.append([p, st.st_size, st.st_mtime_ns])
    return jsonable(
        {
            "format": INDEX_FORMAT,
            "kind": format,
            "options": repr(sorted(options.items())),
            "files": stamps,
        }
    )


def read(path: str, want: dict[str, Any] | None, shards: int) -> dict[str, Any] | None:
    """The state recorded at ``path``, when it was written for ``want`` and is intact; ``None``
    otherwise. A path that cannot hold the index (a folder, a FIFO, a device) is an error
    naming it."""
    if not os.path.lexists(path):
        # Said now, not after every shard was counted for an index that cannot be written.
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise PackreadFileNotFoundError(
                f"shard_index {path}: its folder {folder} does not exist"
            )
        return None
    try:
        with open_regular(path) as f:
            raw = f.read(MAX_INDEX_BYTES + 1)
    except OSError as e:
        raise os_error(e, f"shard_index {path}") from None
    try:
        saved = json.loads(raw) if len(raw) <= MAX_INDEX_BYTES else None
    except (ValueError, RecursionError):
        return None  # damaged: rebuilt
    if want is None or not isinstance(saved, dict) or saved.get("key") != want:
        return None  # written for other files, other options, or files since changed
    state = saved.get("state")
    return state if _packread.ShardSet.valid_state(state, shards) else None


def write(path: str, want: dict[str, Any] | None, state: dict[str, Any]) -> None:
    """Records ``state`` for ``want`` at ``path`` (atomically: written aside, then renamed)."""
    if want is None:
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"key": want, "state": state}, f)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise os_error(e, f"shard_index {path}: cannot write it") from None
