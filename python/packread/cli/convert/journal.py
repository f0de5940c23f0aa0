"""The files of a run that has not finished, and what resuming it decides.

A run writes ``DST.partial`` and renames it to ``DST`` as a whole at the end. After each
checkpoint, ``DST.partial.json`` (written as ``.json.tmp``, then renamed) records how many
samples are durable, the options and the source they came from; a ZIP output keeps a copy of
its central directory beside it (``DST.partial.cd-OFFSET``). Resuming continues from the
record, starts over (and says why) when the run stopped before recording any sample, and
refuses when the options or the source changed.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import sys
from typing import Any

from ...errors import InvalidArgumentError
from .sources import _Source

_JOURNAL_VERSION = 1


def _partial_paths(dst: str) -> tuple[str, str]:
    """``DST.partial`` (the output being written) and ``DST.partial.json`` (its record)."""
    return dst + ".partial", dst + ".partial.json"


def _directory_copy(partial: str, offset: int) -> str:
    """The copy of a ZIP output's central directory written at ``offset``."""
    return f"{partial}.cd-{offset}"


def _directory_copies(partial: str) -> list[str]:
    """The central-directory copies of an output being written."""
    return glob.glob(glob.escape(partial) + ".cd-*")


def _finished_before(src: str, dst: str, partial: str, resume: bool, force: bool) -> bool:
    """Whether ``dst`` may hold a finished run that resuming finds complete. A finished run
    leaves DST and no DST.partial (renamed last, as a whole); with DST.partial beside DST,
    resuming would replace DST: that takes ``force``, as any existing DST does."""
    if not os.path.exists(dst):
        return False
    if os.path.samefile(src, dst):
        raise InvalidArgumentError(f"{dst}: the output would replace the source")
    finished = resume and not os.path.lexists(partial)
    if not (force or finished):
        raise FileExistsError(f"{dst} exists; pass --force (force=True) to replace it")
    return finished


def _resume_point(
    partial: str, journal: str, source: _Source, options: dict[str, Any]
) -> tuple[dict[str, Any] | None, str | None]:
    """``(state, None)``: the progress record to resume from; ``(None, why)``: the run must
    start over, and says so."""
    loaded = _load_state(partial, journal, source, options)
    if isinstance(loaded, str):  # nothing usable recorded yet
        print(f"packread convert: {partial}: {loaded}; starting over", file=sys.stderr)
        return None, loaded
    return loaded, None


def _clear(partial: str, journal: str) -> None:
    """Removes what an earlier run left, before a run that starts from the beginning."""
    _remove(partial, journal, journal + ".tmp", *_directory_copies(partial))


def _load_state(
    partial: str, journal: str, source: _Source, options: dict[str, Any]
) -> dict[str, Any] | str:
    """The progress record to resume from, or why the run must start over: it stopped before
    recording any sample (DST.partial without a record, as a run killed in its first
    moments leaves it: an empty file, the bare HDF5 structure or an empty ZIP, perhaps
    with a half-written record or directory copy; or a record at sample 0)."""
    if not os.path.exists(partial):
        raise FileNotFoundError(
            f"{partial}: no interrupted conversion to resume; run again without --resume"
        )
    if not os.path.exists(journal):
        return (
            f"no progress record ({os.path.basename(journal)}): "
            "the run stopped before its first checkpoint"
        )
    with open(journal) as f:
        state = json.load(f)
    if state.get("version") != _JOURNAL_VERSION or state.get("options") != options:
        raise InvalidArgumentError(
            f"{journal}: the interrupted conversion had other options "
            f"({state.get('options')}); run again without --resume to start over"
        )
    if state.get("source") != source.fingerprint():
        raise InvalidArgumentError(
            f"{journal}: the source changed since the interrupted conversion; "
            "run again without --resume to start over"
        )
    if state.get("done") == 0:
        return "its progress record holds no sample yet"
    return state


def _save_state(
    journal: str, source: _Source, options: dict[str, Any], done: int, sink: dict[str, Any]
) -> None:
    state = {
        "version": _JOURNAL_VERSION,
        "options": options,
        "source": source.fingerprint(),
        "done": done,
        "sink": sink,
    }
    tmp = journal + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, journal)


def _remove(*paths: str) -> None:
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(p)
