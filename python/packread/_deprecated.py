"""The names packread had before its one vocabulary (0.1 → 0.2): each still works for this
release, with a ``DeprecationWarning`` that names its replacement, and is listed in the
CHANGELOG. Readers pass the keyword arguments they do not know here; anything that is not an
old name is the ``TypeError`` Python gives for an unknown keyword."""

from __future__ import annotations

import difflib
import functools
import inspect
import os
import sys
import warnings
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ._options import ImageDecode, Limits, Remote

#: Old option -> the new one it became, where it only changed its name.
RENAMED = {
    "datasets": "arrays",
    "keys": "arrays",
    "dataset": "images",
    "seed": "augment_seed",
    "cache_bytes": "chunk_cache_bytes",
    "src": "source",
    "path": "source",
    "paths": "source",
}

#: Old options now grouped in a value object: ``option -> (object's parameter, group)``.
GROUPED: dict[str, tuple[str, str]] = {
    **{name: (name, "decode") for name in ImageDecode._names()},
    "storage_options": ("storage_options", "remote"),
    "index_cache": ("index_cache", "remote"),
    "cache_dir": ("data_cache", "remote"),
    "cache_dir_bytes": ("data_cache_bytes", "remote"),
    "max_header_size": ("max_header_size", "limits"),
    "max_member_bytes": ("max_member_bytes", "limits"),
    "max_pixels": ("max_pixels", "limits"),
}

_GROUPS = {"decode": ImageDecode, "remote": Remote, "limits": Limits}
_SPELLED = {
    "decode": "packread.ImageDecode",
    "remote": "packread.Remote",
    "limits": "packread.Limits",
}


#: Where packread's modules are: a warning is blamed on the first caller outside them.
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _outside_packread() -> int:
    """The ``stacklevel`` at which :func:`warn`'s ``warnings.warn`` names the first frame
    outside packread: the user's line, however many of packread's calls (``packread.open``,
    a torch dataset, a reader) the old name went through."""
    frame = sys._getframe(2)  # warn's caller (0 is this function, 1 is warn)
    level = 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level


def warn(old: str, new: str) -> None:
    """The ``DeprecationWarning`` for an old name, blamed on the user's line."""
    warnings.warn(
        f"{old} is deprecated; use {new} (it will be removed in the next release)",
        DeprecationWarning,
        stacklevel=_outside_packread(),
    )


def unknown(where: str, name: str, known: Iterable[str]) -> TypeError:
    """The ``TypeError`` for an unknown keyword argument, with the nearest known names."""
    close = difflib.get_close_matches(name, sorted(known), n=3)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return TypeError(f"{where}() got an unexpected keyword argument {name!r}{hint}")


@functools.cache
def _options_of(func: Callable[..., Any]) -> dict[str, Any]:
    """The options ``func`` takes, with their defaults: worked out once per function (an
    ``inspect.signature`` costs ~15 us, more than a small ``load_npy`` itself)."""
    return {
        p.name: p.default
        for p in inspect.signature(func).parameters.values()
        if p.name not in ("self", "source") and p.kind is not p.VAR_KEYWORD
    }


def fold(
    where: str,
    func: Callable[..., Any],
    given: dict[str, Any],
    old: dict[str, Any],
) -> dict[str, Any]:
    """``given`` (the options ``func``, a reader's constructor, took: its ``locals()`` on
    entry) with ``old`` (keyword arguments under former names) folded in, each with a warning:
    a renamed option under its new name, a grouped one into its value object. An option given
    both ways is an error; a name that is neither is the usual ``TypeError``."""
    params = _options_of(func)
    out = {name: given[name] for name in params if name in given}
    groups: dict[str, dict[str, Any]] = {}
    for name, value in old.items():
        if name in RENAMED and RENAMED[name] in params:
            new = RENAMED[name]
            warn(f"{where}({name}=)", f"{new}=")
            if out.get(new) is not params[new]:
                raise TypeError(f"{where}() got both {name}= and {new}=")
            out[new] = value
        elif name in GROUPED and GROUPED[name][1] in params:
            param, group = GROUPED[name]
            warn(f"{where}({name}=)", f"{group}={_SPELLED[group]}({param}=...)")
            groups.setdefault(group, {})[param] = value
        else:
            raise unknown(where, name, params)
    for group, values in groups.items():
        if out.get(group) is not None:
            raise TypeError(f"{where}() got {group}= and also {sorted(values)}, which belong in it")
        if group == "remote" and "data_cache" in values and values["data_cache"] is None:
            values["data_cache"] = False
        out[group] = _GROUPS[group](**values)
    return out


F = TypeVar("F", bound=Callable[..., Any])


def source_names(where: str, *old: str) -> Callable[[F], F]:
    """Wraps a constructor or function whose first parameter (``self`` aside) is ``source``:
    ``old`` are the names that parameter had in the previous release, which still work with a
    warning; any other former name of it (``RENAMED``) is a ``TypeError`` naming ``source``.
    The signature is the wrapped one's (``inspect.signature`` follows ``__wrapped__``)."""

    def wrap(func: F) -> F:
        names = list(inspect.signature(func).parameters)
        at = names.index("source")

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            given = [n for n in kwargs if RENAMED.get(n) == "source"]
            if given:
                name = given[0]
                if name not in old:
                    raise TypeError(
                        f"{where}() got an unexpected keyword argument {name!r}: what to read "
                        "is source= (or the first argument)"
                    )
                if len(args) > at or "source" in kwargs or len(given) > 1:
                    raise TypeError(f"{where}() got {name}= and another source (source=)")
                warn(f"{where}({name}=)", "source=")
                kwargs["source"] = kwargs.pop(name)
            return func(*args, **kwargs)

        return call  # type: ignore[return-value]

    return wrap


class SampleKeys:
    """``keys()`` as :class:`~packread.NpyReader` and :class:`~packread.ZipReader` had it:
    the samples' names (with a ``DeprecationWarning``); in the next release ``keys()`` names
    the arrays a batch holds, as on every reader. A reader whose samples have no names (rows
    of an array, new in this release) names its arrays already."""

    #: Whether the reader names its arrays already (new modes, such as ``fields=``).
    _names_arrays: bool = False

    def keys(self) -> list[str]:
        if self._names_arrays or self.names() is None:  # type: ignore[attr-defined]
            return super().keys()  # type: ignore[misc,no-any-return]
        warn(
            f"{type(self).__name__}.keys() names the samples",
            "names() (keys() will name the arrays a batch holds)",
        )
        return self.names()  # type: ignore[attr-defined,no-any-return]
