"""Hand-made and hand-patched ZIP archives for the ZIP/NPZ tests.

``layout`` walks an archive's central directory (as written by ``zipfile``: no comment, one
disk) and gives the offset of every header; ``patch_*`` overwrite one field of a header in
place. ``build_zip`` writes an archive field by field, with ZIP64 records and extra fields on
request, so that valid and subtly invalid ZIP64 variants can be produced.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

LOCAL_SIG = 0x04034B50
CENTRAL_SIG = 0x02014B50
EOCD_SIG = 0x06054B50
EOCD64_SIG = 0x06064B50
LOCATOR_SIG = 0x07064B50

# (offset, struct format) of the fields of each fixed-size header.
LOCAL_FIELDS = {
    "signature": (0, "<I"),
    "flags": (6, "<H"),
    "method": (8, "<H"),
    "crc": (14, "<I"),
    "csize": (18, "<I"),
    "usize": (22, "<I"),
    "name_len": (26, "<H"),
    "extra_len": (28, "<H"),
}
CENTRAL_FIELDS = {
    "signature": (0, "<I"),
    "flags": (8, "<H"),
    "method": (10, "<H"),
    "crc": (16, "<I"),
    "csize": (20, "<I"),
    "usize": (24, "<I"),
    "name_len": (28, "<H"),
    "extra_len": (30, "<H"),
    "comment_len": (32, "<H"),
    "offset": (42, "<I"),
}
EOCD_FIELDS = {
    "signature": (0, "<I"),
    "disk_entries": (8, "<H"),
    "entries": (10, "<H"),
    "cd_size": (12, "<I"),
    "cd_offset": (16, "<I"),
    "comment_len": (20, "<H"),
}
EOCD64_FIELDS = {
    "signature": (0, "<I"),
    "record_size": (4, "<Q"),
    "disk_entries": (24, "<Q"),
    "entries": (32, "<Q"),
    "cd_size": (40, "<Q"),
    "cd_offset": (48, "<Q"),
}
LOCATOR_FIELDS = {
    "signature": (0, "<I"),
    "eocd64_offset": (8, "<Q"),
    "disks": (16, "<I"),
}


@dataclass
class Member:
    """Where one member's headers are."""

    name: bytes
    central: int  # offset of its central directory entry
    local: int  # offset of its local header
    data: int  # offset of its data
    csize: int

    @property
    def local_name(self) -> int:
        return self.local + 30


@dataclass
class Layout:
    eocd: int
    cd_offset: int
    cd_size: int
    members: list[Member]

    def member(self, name: str) -> Member:
        (m,) = [m for m in self.members if m.name == name.encode()]
        return m


def _get(raw, at: int, fields: dict, field: str) -> int:
    off, fmt = fields[field]
    return struct.unpack_from(fmt, raw, at + off)[0]


def layout(raw: bytes) -> Layout:
    eocd = raw.rfind(struct.pack("<I", EOCD_SIG))
    assert eocd >= 0, "no end record"
    cd_offset = _get(raw, eocd, EOCD_FIELDS, "cd_offset")
    cd_size = _get(raw, eocd, EOCD_FIELDS, "cd_size")
    count = _get(raw, eocd, EOCD_FIELDS, "entries")
    members = []
    at = cd_offset
    for _ in range(count):
        assert _get(raw, at, CENTRAL_FIELDS, "signature") == CENTRAL_SIG
        n = _get(raw, at, CENTRAL_FIELDS, "name_len")
        x = _get(raw, at, CENTRAL_FIELDS, "extra_len")
        c = _get(raw, at, CENTRAL_FIELDS, "comment_len")
        local = _get(raw, at, CENTRAL_FIELDS, "offset")
        name = bytes(raw[at + 46 : at + 46 + n])
        ln = _get(raw, local, LOCAL_FIELDS, "name_len")
        lx = _get(raw, local, LOCAL_FIELDS, "extra_len")
        csize = _get(raw, at, CENTRAL_FIELDS, "csize")
        members.append(Member(name, at, local, local + 30 + ln + lx, csize))
        at += 46 + n + x + c
    return Layout(eocd, cd_offset, cd_size, members)


def _patch(raw: bytes, at: int, fields: dict, **values) -> bytes:
    buf = bytearray(raw)
    for field, value in values.items():
        off, fmt = fields[field]
        struct.pack_into(fmt, buf, at + off, value)
    return bytes(buf)


def patch_local(raw: bytes, name: str, **values) -> bytes:
    return _patch(raw, layout(raw).member(name).local, LOCAL_FIELDS, **values)


def patch_central(raw: bytes, name: str, **values) -> bytes:
    return _patch(raw, layout(raw).member(name).central, CENTRAL_FIELDS, **values)


def patch_both(raw: bytes, name: str, **values) -> bytes:
    """The same fields patched in the local header and the central directory entry."""
    return patch_central(patch_local(raw, name, **values), name, **values)


def patch_eocd(raw: bytes, **values) -> bytes:
    return _patch(raw, layout(raw).eocd, EOCD_FIELDS, **values)


def patch_at(raw: bytes, at: int, new: bytes) -> bytes:
    buf = bytearray(raw)
    buf[at : at + len(new)] = new
    return bytes(buf)


def deflate(data: bytes, level: int = 6) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def zip64_extra(*values: int) -> bytes:
    """A ZIP64 extended information extra field holding ``values`` (8 bytes each)."""
    body = b"".join(struct.pack("<Q", v) for v in values)
    return struct.pack("<HH", 1, len(body)) + body


def build_zip(
    members: list[tuple[str, bytes, int]],
    *,
    local_zip64: bool = False,
    central_zip64: bool = False,
    eocd64: bool = False,
    central_extra: dict[str, bytes] | None = None,
    eocd64_values: dict[str, int] | None = None,
    locator_values: dict[str, int] | None = None,
    prefix: bytes = b"",
) -> bytes:
    """An archive of ``(name, data, method)`` members (method 0 stored or 8 deflated).

    ``local_zip64``/``central_zip64`` put sizes (and, centrally, the local header offset) into
    ZIP64 extra fields with 0xFFFFFFFF in the fixed fields; ``eocd64`` writes a ZIP64 end record
    and locator, with 0xFFFF/0xFFFFFFFF in the classic end record. ``central_extra`` replaces a
    member's central extra field verbatim (keeping the 0xFFFFFFFF markers if central_zip64);
    ``eocd64_values``/``locator_values`` overwrite fields of those records.
    """
    out = bytearray(prefix)
    central = bytearray()
    for name, data, method in members:
        raw_name = name.encode()
        body = deflate(data) if method == 8 else data
        crc = zlib.crc32(data)
        offset = len(out)
        if local_zip64:
            lx = zip64_extra(len(data), len(body))
            lc, lu = 0xFFFFFFFF, 0xFFFFFFFF
        else:
            lx, lc, lu = b"", len(body), len(data)
        flags = 0x800 if not name.isascii() else 0
        version = 45 if (local_zip64 or central_zip64 or eocd64) else 20
        out += struct.pack(
            "<IHHHHHIIIHH", LOCAL_SIG, version, flags, method, 0, 0x21, crc, lc, lu, len(raw_name),
            len(lx),
        )  # fmt: skip
        out += raw_name + lx + body
        if central_zip64:
            cx = zip64_extra(len(data), len(body), offset)
            cc, cu, co = 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF
        else:
            cx, cc, cu, co = b"", len(body), len(data), offset
        if central_extra and name in central_extra:
            cx = central_extra[name]
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII", CENTRAL_SIG, version, version, flags, method, 0, 0x21, crc,
            cc, cu, len(raw_name), len(cx), 0, 0, 0, 0, co,
        )  # fmt: skip
        central += raw_name + cx
    cd_offset = len(out)
    out += central
    count = len(members)
    if eocd64:
        record = {
            "record_size": 44,
            "disk_entries": count,
            "entries": count,
            "cd_size": len(central),
            "cd_offset": cd_offset,
        }
        record.update(eocd64_values or {})
        eocd64_at = len(out)
        out += struct.pack(
            "<IQHHIIQQQQ", EOCD64_SIG, record["record_size"], 45, 45, 0, 0,
            record["disk_entries"], record["entries"], record["cd_size"], record["cd_offset"],
        )  # fmt: skip
        loc = {"eocd64_offset": eocd64_at, "disks": 1}
        loc.update(locator_values or {})
        out += struct.pack("<IIQI", LOCATOR_SIG, 0, loc["eocd64_offset"], loc["disks"])
        out += struct.pack("<IHHHHIIH", EOCD_SIG, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    else:
        out += struct.pack("<IHHHHIIH", EOCD_SIG, 0, 0, count, count, len(central), cd_offset, 0)
    return bytes(out)
