"""Tar fixtures made at test time, written the ways tar datasets are: webdataset's own
``ShardWriter``/``TarWriter`` (a stream in tarfile's default format: ustar headers, PAX records
where a name needs them), and Python's ``tarfile`` in ustar, GNU and PAX formats with names past
ustar's 100 characters (``././@LongLink`` members, ``path`` records). Samples
are crops of scikit-image's photographs re-encoded by PIL (JPEG quality 90, PNG) next to
``.cls``, ``.json``, ``.npy``, ``.txt`` and raw members. The reference is webdataset itself
(``WebDataset(...).decode("rgb8")``, samples by key) and PIL for pixels; and here too the
byte editors the damaged-archive tests use (header fields, checksums, PAX records)."""

from __future__ import annotations

import functools
import io
import os
import tarfile
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from PIL import Image

from support.images import PHOTOS, photo

#: A tar block: headers and the padding of member data are whole blocks.
BLOCK = 512
#: Every member's modification time (reproducible archives).
MTIME = 1_700_000_000
#: Samples of the main shards, and how many a shard holds (the last holds fewer).
COUNT = 40
PER_SHARD = 14
#: Picture size (h, w) of the ``jpg`` members, and of the ``seg.png`` ones.
HW = (48, 64)
SEG_HW = (12, 16)
#: Every field of a main-shard sample, sorted (``fields=None`` reads them all).
FIELDS = ["bin", "cls", "jpg", "json", "npy", "seg.png", "txt"]
NPY_SHAPE = (3, 4)


@functools.cache
def _pixels(name: str) -> np.ndarray:
    return np.asarray(photo(name))


def crop(i: int, hw: tuple[int, int] = HW) -> np.ndarray:
    """Sample ``i``'s picture: an ``hw`` window of one of scikit-image's photos, placed by
    ``i`` (neighbouring samples show different photos and places)."""
    pixels = _pixels(PHOTOS[i % len(PHOTOS)])
    h, w = hw
    y = (37 * i) % (pixels.shape[0] - h)
    x = (53 * i) % (pixels.shape[1] - w)
    return np.ascontiguousarray(pixels[y : y + h, x : x + w])


def jpeg(pixels: np.ndarray, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def png(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "PNG")
    return buf.getvalue()


def npy(arr: np.ndarray) -> bytes:
    """``arr`` as ``np.save`` writes it."""
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def label(i: int) -> int:
    """Sample ``i``'s ``.cls``: its index, so that a batch says which samples it holds."""
    return i


def shard_key(i: int) -> str:
    """Sample ``i``'s key in the main shards: a folder per shard, one with a dot in its name
    (the key is cut at the first dot of the *base* name, not of the path)."""
    folder = ["train", "train.v1", "train/deep"][i // PER_SHARD]
    return f"{folder}/s{i:03d}"


def sample(i: int, key: str | None = None) -> dict[str, Any]:
    """Sample ``i`` as webdataset's writer takes it: encoded images, ``np.save`` bytes and raw
    bytes as they are, and the int, dict and str that its encoder writes for ``.cls``,
    ``.json`` and ``.txt``."""
    rng = np.random.default_rng(i)
    return {
        "__key__": shard_key(i) if key is None else key,
        "jpg": jpeg(crop(i)),
        "seg.png": png(crop(i + 101, SEG_HW)),
        "cls": label(i),
        "json": {"i": i, "name": f"s{i:03d}", "tags": ["a", "b"][: i % 3], "score": i / 7},
        "npy": npy(rng.standard_normal(NPY_SHAPE).astype("<f4")),
        "txt": f"sample {i}: ünïcode ✓",
        "bin": bytes(range(i % 11 + 1)) * 3,
    }


def encoded(fields: dict[str, Any]) -> dict[str, bytes]:
    """A sample's members' bytes, as webdataset's ``TarWriter`` encodes them (no key)."""
    from webdataset.writer import default_handlers, encode_based_on_extension

    out = encode_based_on_extension(dict(fields), default_handlers)
    return {k: v for k, v in out.items() if not k.startswith("__")}


def write_shards(root: str, count: int = COUNT, per_shard: int = PER_SHARD) -> list[str]:
    """``count`` samples of :func:`sample` in shards of ``per_shard`` written by webdataset's
    ``ShardWriter`` (``root/shard-000000.tar``, ...); returns their paths."""
    import webdataset

    os.makedirs(root, exist_ok=True)
    pattern = os.path.join(root, "shard-%06d.tar")
    with webdataset.ShardWriter(pattern, maxcount=per_shard, verbose=0, mtime=MTIME) as w:
        for i in range(count):
            w.write(sample(i))
    return [pattern % k for k in range((count + per_shard - 1) // per_shard)]


def write_samples(path: str, samples: Iterable[dict[str, Any]]) -> str:
    """Samples (dicts with ``__key__``) in one tar written by webdataset's ``TarWriter``."""
    import webdataset

    with webdataset.TarWriter(path, mtime=MTIME) as w:
        for s in samples:
            w.write(s)
    return path


def member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, **kw) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size = len(data) if kind == tarfile.REGTYPE else 0
    ti.type = kind
    ti.mtime = MTIME
    ti.mode = 0o644
    for k, v in kw.items():
        setattr(ti, k, v)
    return ti


def tar_bytes(
    members: Sequence[tuple[str, bytes] | tuple[tarfile.TarInfo, bytes]],
    format: int = tarfile.GNU_FORMAT,
) -> bytes:
    """Members ``(name or TarInfo, data)`` in order, as Python's ``tarfile`` writes them in
    ``format`` (GNU: ``././@LongLink`` for long names; PAX: ``path`` records)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=format) as t:
        for name, data in members:
            ti = name if isinstance(name, tarfile.TarInfo) else member(name, data)
            t.addfile(ti, io.BytesIO(data) if ti.isreg() else None)
    return buf.getvalue()


def sample_members(samples: Iterable[dict[str, Any]]) -> list[tuple[str, bytes]]:
    """``(member name, bytes)`` of each sample's fields, as webdataset's ``TarWriter`` names
    and orders them (``key.field``, fields sorted)."""
    out = []
    for s in samples:
        data = encoded(s)
        out += [(f"{s['__key__']}.{k}", data[k]) for k in sorted(data)]
    return out


def write(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


# --------------------------------------------------------------------------------------------
# The reference: webdataset


def webdataset_samples(paths: str | Sequence[str]) -> dict[str, dict[str, Any]]:
    """Every sample webdataset reads from ``paths`` (in order), by key: its fields decoded by
    ``.decode("rgb8")`` (images uint8 ``(H, W, 3)`` from PIL, ``.cls`` ints, ``.json`` parsed,
    ``.txt`` str, ``.npy`` arrays, other fields bytes)."""
    import webdataset

    urls = [paths] if isinstance(paths, str) else list(paths)
    ds = webdataset.WebDataset([str(u) for u in urls], shardshuffle=False, empty_check=False)
    out: dict[str, dict[str, Any]] = {}
    for s in ds.decode("rgb8"):
        assert s["__key__"] not in out, f"webdataset read {s['__key__']} twice"
        out[s["__key__"]] = {k: v for k, v in s.items() if not k.startswith("__")}
    return out


def webdataset_tuples(paths: str | Sequence[str], *specs: str) -> list[tuple]:
    """webdataset's ``.to_tuple(*specs)`` of every sample (``"jpg;png"``: the first present)."""
    import webdataset

    urls = [paths] if isinstance(paths, str) else list(paths)
    ds = webdataset.WebDataset([str(u) for u in urls], shardshuffle=False, empty_check=False)
    return list(ds.decode("rgb8").to_tuple(*specs))


def pil_rgb(raw: bytes) -> np.ndarray:
    """What PIL gives: ``Image.open(f).convert("RGB")``."""
    with Image.open(io.BytesIO(raw)) as im:
        return np.asarray(im.convert("RGB"))


# --------------------------------------------------------------------------------------------
# Damage: byte edits of a tarfile-written archive


def members_of(data: bytes) -> list[tarfile.TarInfo]:
    """The members ``tarfile`` finds: ``offset`` (their first header, a GNU long name's or a
    PAX record's included), ``offset_data`` and ``size`` say where each lies."""
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return t.getmembers()


def checksum(header: bytes) -> int:
    """A header's checksum: the sum of its bytes with the checksum field as spaces."""
    return sum(header[:148]) + 8 * ord(" ") + sum(header[156:BLOCK])


def fix_checksum(buf: bytearray, at: int) -> None:
    """Rewrites the checksum of the header at ``at`` (as tarfile writes it: 6 octal digits,
    NUL, space)."""
    buf[at + 148 : at + 156] = b"%06o\0 " % checksum(bytes(buf[at : at + BLOCK]))


def set_size(buf: bytearray, at: int, size: int, base256: bool = False) -> None:
    """Writes ``size`` into the size field of the header at ``at``: 11 octal digits and a NUL,
    or GNU's base-256 (a first byte of 0x80, then the value big-endian in the other 11); the
    checksum is fixed so that only the size is wrong."""
    field = b"\x80" + size.to_bytes(11, "big") if base256 else b"%011o\0" % size
    assert len(field) == 12, field
    buf[at + 124 : at + 136] = field
    fix_checksum(buf, at)


def header_at(data: bytes, name_fragment: bytes) -> int:
    """The offset of the first header (block) whose name field starts with ``name_fragment``."""
    for at in range(0, len(data), BLOCK):
        if data[at : at + len(name_fragment)] == name_fragment:
            return at
    raise AssertionError(f"no header named {name_fragment!r}")


def end_of_members(data: bytes) -> int:
    """Where the members end (the end-of-archive zero blocks start)."""
    last = members_of(data)[-1]
    return last.offset_data + -(-last.size // BLOCK) * BLOCK
