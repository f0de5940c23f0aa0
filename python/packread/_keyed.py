"""Samples made of several members that share a key, as WebDataset lays out its shards:
:class:`TarReader` over tar archives, and ``ZipReader(..., fields=)`` over ZIPs laid out the
same way. The members are grouped, and each field read by its kind, in the core; this module
checks the options and opens one archive or many."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Union

from . import _packread
from ._common import check_num_threads
from ._deprecated import fold, source_names
from ._options import DEFAULT_MAX_IMAGE_BYTES, ImageDecode, Limits, Remote
from ._reader import ArrayReader, check_ragged
from ._registry import Format, register
from ._sources import Source, classify
from .errors import InvalidArgumentError, PackreadTypeError, UnsupportedError

#: How a field may be read (``kinds=``): by default as its name's last extension says.
KINDS = ("image", "int", "npy", "npy-ragged", "json", "text", "bytes")

#: What ``fields=`` takes: field names (``"jpg;png"`` for alternatives), or batch keys mapped
#: to them.
Fields = Union[Sequence[str], Mapping[str, str], None]

#: A tar header's ``ustar`` magic, at byte 257 (POSIX ``ustar\0`` or GNU ``ustar ``).
TAR_MAGIC_AT = 257


def is_tar(head: Any) -> bool:
    """Whether a file's bytes at 257 are a tar header's magic."""
    return bool(head(TAR_MAGIC_AT)[:5] == b"ustar")


def fields_option(fields: Fields) -> list[tuple[str, list[str]]] | None:
    """``fields`` checked, as ``[(batch key, [field names])]``: a list of names (``"jpg;png"``
    lists alternatives; the batch key is the first), or a dict of batch keys to names."""
    if fields is None:
        return None
    if isinstance(fields, str):
        raise PackreadTypeError(
            "fields is a list of field names (such as ['jpg', 'cls']) or a dict of batch keys "
            "to field names, not one string"
        )
    pairs = list(fields.items()) if isinstance(fields, Mapping) else [(None, f) for f in fields]
    out: list[tuple[str, list[str]]] = []
    for key, spec in pairs:
        if not isinstance(spec, str) or (key is not None and not isinstance(key, str)):
            raise PackreadTypeError("field names and batch keys are strings")
        names = [n.strip().lower().lstrip(".") for n in spec.split(";")]
        if not all(names):
            raise InvalidArgumentError(f"field {spec!r} has an empty name")
        out.append((key if key is not None else names[0], names))
    if not out:
        raise InvalidArgumentError("fields is empty")
    keys = [k for k, _ in out]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise InvalidArgumentError(f"fields reads batch key {twice[0]!r} twice")
    return out


def kinds_option(kinds: Mapping[str, str] | None) -> list[tuple[str, str]]:
    """``kinds`` checked, as ``[(batch key, kind)]``."""
    if kinds is None:
        return []
    if not isinstance(kinds, Mapping):
        raise PackreadTypeError("kinds is a dict of batch keys to kinds")
    for key, kind in kinds.items():
        if kind not in KINDS:
            raise InvalidArgumentError(
                f"kinds[{key!r}] must be one of {', '.join(KINDS)}, not {kind!r}"
            )
    return [(str(k), str(v)) for k, v in kinds.items()]


def keyed_binding(
    fields: Fields,
    kinds: Mapping[str, str] | None,
    decode: ImageDecode,
    augment_seed: int,
    on_error: str,
    on_missing: str,
    num_threads: int | None,
    remote: Remote,
    limits: Limits,
) -> dict[str, Any]:
    """The options the extension takes for keyed samples, checked."""
    if on_error not in ("raise", "skip"):
        raise InvalidArgumentError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if on_missing not in ("raise", "skip"):
        raise InvalidArgumentError(f"on_missing must be 'raise' or 'skip', got {on_missing!r}")
    return {
        **decode._binding(),
        "fields": fields_option(fields),
        "kinds": kinds_option(kinds),
        "augment_seed": int(augment_seed) & (2**64 - 1),
        "on_error": on_error,
        "on_missing": on_missing,
        "num_threads": num_threads,
        **limits._binding(DEFAULT_MAX_IMAGE_BYTES),
        **remote._binding(),
    }


def open_keyed(
    reader: ArrayReader,
    fmt: str,
    src: Source,
    options: dict[str, Any],
    remote: Remote,
    shard_index: Any,
    max_open_shards: Any,
    state: dict[str, Any] | None,
    stacklevel: int,
) -> None:
    """Opens ``src`` as keyed samples of ``fmt`` (``"tar"``, ``"zip"``) into ``reader``: one
    archive (its keys and skipped samples at hand) or many as shards. ``stacklevel``: the
    user's frame, for the warning of samples left out."""
    inner: Any = None
    if src.many:
        shards = reader._open_shards(src.value, options, shard_index, max_open_shards, state)
        core = shards.reader()
        names = None
    else:
        what = "a tar archive" if fmt == "tar" else "a ZIP archive"
        # A ZIP object's directory is at its end; a tar is walked from its start.
        target = reader._target(src, remote, what, tail=fmt == "zip")
        inner = _packread.KeyedFile(target, fmt, options)
        reader._paths = [inner.location]
        core = inner.reader
        names = list(inner.names())
    reader._keyed_inner = reader._inner = inner
    reader._keyed_names = names
    reader._bind(core)
    reader._choose(None)
    # Warned once, where the samples were counted (not again in a worker that unpickles).
    counted = inner is not None or state is None
    skipped = reader.skipped if counted else []
    if skipped:
        _, key, field = skipped[0]
        warnings.warn(
            f"{reader._describe()}: {len(skipped)} sample(s) lack a field and were left out "
            f"(reader.skipped has them all); first: key {key!r} has no {field!r}",
            RuntimeWarning,
            stacklevel=stacklevel + 1,
        )


class KeyedSamples(ArrayReader):
    """What readers of keyed samples share: their keys, the samples left out, the members."""

    _keyed_inner: Any = None
    _keyed_names: list[str] | None = None

    def names(self) -> list[str]:
        """The samples' keys, in order (each shard's in turn).

        >>> TarReader("train.tar").names()[:2]
        ['000000', '000001']
        """
        if self._keyed_names is None:
            self._keyed_names = self._shard_names()
        return list(self._keyed_names)

    @property
    def skipped(self) -> list[tuple[str, str, str]]:
        """``(archive, key, batch key)`` of every sample left out because it lacks a field
        (``on_missing="skip"``), in order.

        >>> TarReader("train.tar", fields=["jpg", "cls"]).skipped
        []
        """
        self._check_open()
        if self._keyed_inner is not None:
            return [(self._paths[0], k, f) for k, f in self._keyed_inner.skipped()]
        return [(self._paths[k], key, f) for k, key, f in self._set.skipped()]

    def members(self) -> list[tuple[str, int]]:
        """``(name, size)`` of every member of the archive (the regular files of a tar), in
        order: of a reader of one archive.

        >>> TarReader("train.tar").members()[0]
        ('000000.cls', 1)
        """
        if self._keyed_inner is None:
            raise UnsupportedError(
                f"{self._describe()}: members() of a reader of several archives; open one: "
                f"{type(self).__name__}(reader.paths[k], ...)"
            )
        self._check_open()
        return [(n, int(s)) for n, s in self._keyed_inner.members()]


class TarReader(KeyedSamples):
    """Tar shards in WebDataset's layout read at random: every sample is the group of members
    that share a key, each field decoded by its kind on packread's threads, with the GIL
    released. A batch is a dict with one entry per field.

    ``source`` is an uncompressed tar (a path, a URL, bytes, a binary file object), or many: a
    list or a glob (``"shards/*.tar"``, sorted), one reader over their samples in turn. On the
    first open, packread walks the 512-byte headers once (ustar, GNU long names, PAX path and
    size records); an object's walk is kept in the index cache, so that a reopen walks nothing.
    Only regular files are members: directories, links, devices and sparse files are skipped,
    never followed, and nothing is ever extracted. A ``.tar.gz`` cannot be read at random and
    is refused: ``packread convert x.tar.gz x.tar`` converts it once.

    **Keys and fields** split as webdataset splits them: the key is the path up to the first
    dot of the base name, the field the rest, lower-cased: ``a/b.c.jpg`` is field ``c.jpg`` of
    key ``a/b``. Names with no dot in their base name are not samples' fields. A key's members
    must follow each other: a key seen twice in one shard, or in two shards, is refused.

    ``fields`` chooses what a batch holds: ``None`` (every field of the first sample), a list
    of field names (``["jpg;png", "cls"]``: ``;`` lists alternatives, the first present wins,
    and the batch key is the first name), or a dict of batch keys to field names
    (``{"image": "jpg;png", "label": "cls"}``). A sample lacking a field is a
    ``MissingKeyError`` naming the archive and key; ``on_missing="skip"`` leaves it out (one
    warning; :attr:`skipped` lists them).

    Each field is read as its last extension says, or as ``kinds={batch key: kind}`` says:

    - ``"image"`` (``jpg``, ``jpeg``, ``png``, ``webp``): decoded as ``decode`` (a
      :class:`~packread.ImageDecode`) says: ``uint8`` ``(B, H, W, 3)`` crops, normalised,
      NCHW...; without a size, each image whole (a list). Random crops are drawn from
      ``(augment_seed, epoch, sample)``; ``on_error="skip"`` replaces images that do not decode;
    - ``"int"`` (``cls``, ``cls2``, ``class``, ``count``, ``index``, ``inx``, ``id``): an
      integer label written as text, into ``int64``;
    - ``"npy"``: ``.npy`` arrays, stacked (each must have the first sample's dtype and shape);
      ``"npy-ragged"`` (given in ``kinds``): arrays of one dtype and any shapes, a list (with
      ``ragged="flat"``: ``(values, offsets, shapes)``);
    - ``"json"`` (``json``, ``jsn``): a list of parsed documents;
    - ``"text"`` (``txt``, ``text``, ``transcript``): a list of ``str`` (UTF-8);
    - ``"bytes"`` (anything else): a list of ``bytes``.

    >>> r = TarReader("train.tar", fields=["jpg", "cls"], decode=packread.ImageDecode(32))
    >>> b = r.batch([0, 2])
    >>> b["jpg"].shape, b["cls"]
    ((2, 32, 32, 3), array([0, 2]))
    """

    format = "tar"

    @source_names("TarReader")
    def __init__(
        self,
        source: Any,
        *,
        fields: Fields = None,
        kinds: Mapping[str, str] | None = None,
        decode: ImageDecode | None = None,
        augment_seed: int = 0,
        on_error: str = "raise",
        on_missing: str = "raise",
        ragged: str = "list",
        num_threads: int | None = None,
        remote: Remote | dict[str, Any] | None = None,
        limits: Limits | None = None,
        shard_index: str | os.PathLike[str] | None = None,
        max_open_shards: int | None = None,
        **deprecated: Any,
    ) -> None:
        kwargs = fold("TarReader", TarReader.__init__, locals(), deprecated)
        self._setup(source, None, **kwargs)

    def _setup(
        self,
        source: Any,
        state: dict[str, Any] | None,
        fields: Any = None,
        kinds: Any = None,
        decode: Any = None,
        augment_seed: int = 0,
        on_error: str = "raise",
        on_missing: str = "raise",
        ragged: str = "list",
        num_threads: int | None = None,
        remote: Any = None,
        limits: Any = None,
        shard_index: Any = None,
        max_open_shards: Any = None,
    ) -> None:
        decode, remote, limits = ImageDecode._of(decode), Remote._of(remote), Limits._of(limits)
        self._ragged = check_ragged(ragged)
        self._kwargs = {
            "fields": fields,
            "kinds": kinds,
            "decode": decode,
            "augment_seed": int(augment_seed),
            "on_error": on_error,
            "on_missing": on_missing,
            "ragged": ragged,
            "num_threads": check_num_threads(num_threads),
            "remote": remote,
            "limits": limits,
            "shard_index": shard_index,
            "max_open_shards": max_open_shards,
        }
        options = keyed_binding(
            fields,
            kinds,
            decode,
            augment_seed,
            on_error,
            on_missing,
            self._kwargs["num_threads"],
            remote,
            limits,
        )
        self.decode = decode
        self.varies_by_epoch = decode.varies_by_epoch
        self._skipped_what = "image(s)"
        self._source = source
        src = classify(source, remote)
        # The user's frame: this, __init__, the deprecated-names wrapper, the caller.
        open_keyed(self, "tar", src, options, remote, shard_index, max_open_shards, state, 4)

    def __repr__(self) -> str:
        if self.closed:
            return f"<closed {type(self).__name__}>"
        files = "" if self._set is None else f", {len(self._paths)} shards"
        return f"TarReader({self._describe()!r}, {len(self)} samples{files}, keys={self.keys()})"


#: Compressed tars: named as this format, so that their reader says why it refuses them.
COMPRESSED_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst")

register(
    Format(name="tar", reader=TarReader, suffixes=(".tar", *COMPRESSED_SUFFIXES), magic=is_tar)
)

__all__ = ["KINDS", "KeyedSamples", "TarReader"]
