"""Mutations of a whole seed file, deterministic from a ``random.Random``: bit flips, bytes and
integers set to interesting values, random ranges, truncation, zeroed, duplicated, inserted and
deleted ranges, and the same aimed at the seed's structured regions (HDF5 chunks and metadata,
ZIP records and their fields, the NPY header), plus NPY header edits and HDF5 chunk copies.

``mutate(seed, rng)`` returns the new bytes and one line per mutation saying what it did."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from _seeds import Field, Region, Seed

INTERESTING_BYTES = (0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE, 0x40, 0x20)


def _interesting_ints(width: int, current: int, size: int) -> list[int]:
    """Values worth trying in a ``width``-byte field now holding ``current``, in a file of
    ``size`` bytes: bounds, signed bounds, off-by-one around the value and the file's length."""
    top = (1 << (8 * width)) - 1
    half = 1 << (8 * width - 1)
    values = [0, 1, 2, top, top - 1, half, half - 1, current + 1, current - 1, current * 2]
    values += [current // 2, size, size - 1, size + 1, 8, 16, 64, 255, 256, 4096, 0x10000]
    return [v & top for v in values]


def _pack(value: int, width: int, big_endian: bool) -> bytes:
    return value.to_bytes(width, "big" if big_endian else "little")


def _unpack(data: bytearray, offset: int, width: int, big_endian: bool) -> int:
    return int.from_bytes(data[offset : offset + width], "big" if big_endian else "little")


class Mutator:
    """Applies mutations to ``data`` (a copy of the seed's bytes), recording each."""

    def __init__(self, seed: Seed, rng: random.Random) -> None:
        self.seed = seed
        self.rng = rng
        self.data = bytearray(seed.data)
        self.log: list[str] = []

    # -- where

    def _where(self, o: int) -> str:
        return f"@{o:#x} ({self.seed.region_at(o)})"

    def _region(self) -> Region | None:
        """A structured region still inside the (possibly shortened) file."""
        live = [r for r in self.seed.regions if r.offset < len(self.data) and r.size > 0]
        return self.rng.choice(live) if live else None

    def _offset(self, targeted: bool) -> int:
        """An offset: anywhere, or in a region, biased to a region's first bytes (where the
        headers are)."""
        n = len(self.data)
        if targeted:
            r = self._region()
            if r is not None:
                end = min(r.offset + r.size, n)
                span = end - r.offset
                if self.rng.random() < 0.5:
                    span = min(span, 32)
                return r.offset + self.rng.randrange(max(span, 1))
        return self.rng.randrange(n)

    # -- the mutations

    def bit_flip(self, targeted: bool) -> None:
        flips = self.rng.choice((1, 1, 1, 2, 4, 8))
        for _ in range(flips):
            o = self._offset(targeted)
            bit = self.rng.randrange(8)
            self.data[o] ^= 1 << bit
            self.log.append(f"flip bit {bit} {self._where(o)}")

    def byte_set(self, targeted: bool) -> None:
        o = self._offset(targeted)
        v = self.rng.choice(INTERESTING_BYTES)
        self.log.append(f"byte {self.data[o]:#04x}->{v:#04x} {self._where(o)}")
        self.data[o] = v

    def int_set(self, targeted: bool) -> None:
        """An integer of 1, 2, 4 or 8 bytes (either byte order) set to an interesting value."""
        width = self.rng.choice((1, 2, 4, 8))
        o = self._offset(targeted)
        o = min(o, len(self.data) - width)
        if o < 0:
            return self.byte_set(targeted)
        big = self.rng.random() < 0.3
        current = _unpack(self.data, o, width, big)
        value = self.rng.choice(_interesting_ints(width, current, len(self.data)))
        self.data[o : o + width] = _pack(value, width, big)
        order = "be" if big else "le"
        self.log.append(f"u{8 * width}{order} {current:#x}->{value:#x} {self._where(o)}")
        return None

    def field_set(self, targeted: bool) -> None:
        """A named field of a record (ZIP header sizes, offsets, counts; the NPY header
        length) set to an interesting value, or to the same field of another record."""
        fields: list[tuple[Region, Field]] = [
            (r, f)
            for r in self.seed.regions
            for f in r.fields
            if f.offset + f.width <= len(self.data)
        ]
        if not fields:
            return self.int_set(targeted)
        region, fld = self.rng.choice(fields)
        current = _unpack(self.data, fld.offset, fld.width, fld.big_endian)
        twins = [
            g
            for r, g in fields
            if g.label == fld.label and g.width == fld.width and r is not region
        ]
        if twins and self.rng.random() < 0.25:
            twin = self.rng.choice(twins)
            value = _unpack(self.data, twin.offset, twin.width, twin.big_endian)
        else:
            value = self.rng.choice(_interesting_ints(fld.width, current, len(self.data)))
        self.data[fld.offset : fld.offset + fld.width] = _pack(value, fld.width, fld.big_endian)
        self.log.append(f"field {region.label}.{fld.label} {current:#x}->{value:#x}")
        return None

    def random_range(self, targeted: bool) -> None:
        o = self._offset(targeted)
        n = min(self.rng.choice((1, 2, 4, 8, 16, 64)), len(self.data) - o)
        self.data[o : o + n] = self.rng.randbytes(n)
        self.log.append(f"random {n} bytes {self._where(o)}")

    def zero_range(self, targeted: bool) -> None:
        o = self._offset(targeted)
        n = min(self.rng.choice((1, 4, 8, 16, 64, 512)), len(self.data) - o)
        self.data[o : o + n] = bytes(n)
        self.log.append(f"zero {n} bytes {self._where(o)}")

    def truncate(self, targeted: bool) -> None:
        o = (
            self._offset(targeted)
            if self.rng.random() < 0.5
            else self.rng.randrange(len(self.data))
        )
        self.log.append(f"truncate {len(self.data)}->{o} {self._where(o)}")
        del self.data[o:]

    def duplicate(self, targeted: bool) -> None:
        """Inserts a copy of a range somewhere else (shifting what follows)."""
        src = self._offset(targeted)
        n = min(self.rng.choice((1, 4, 16, 64, 256)), len(self.data) - src)
        dst = self._offset(targeted)
        self.data[dst:dst] = self.data[src : src + n]
        self.log.append(f"insert copy of {n} bytes from {src:#x} {self._where(dst)}")

    def insert(self, targeted: bool) -> None:
        o = self._offset(targeted)
        n = self.rng.choice((1, 2, 4, 8, 32))
        fill = self.rng.choice((b"\x00" * n, b"\xff" * n, self.rng.randbytes(n)))
        self.data[o:o] = fill
        self.log.append(f"insert {n} bytes {self._where(o)}")

    def delete(self, targeted: bool) -> None:
        o = self._offset(targeted)
        n = min(self.rng.choice((1, 2, 4, 8, 32, 128)), len(self.data) - o)
        del self.data[o : o + n]
        self.log.append(f"delete {n} bytes {self._where(o)}")

    def overwrite_copy(self, targeted: bool) -> None:
        """Copies one region over the start of another of the same kind (a chunk over another
        chunk, a ZIP header over another): well-formed bytes in the wrong place."""
        regions = [r for r in self.seed.regions if r.offset + r.size <= len(self.data)]
        if len(regions) < 2:
            return self.random_range(targeted)
        a = self.rng.choice(regions)
        kind = a.label.split("#")[0].split(":")[0]
        same = [r for r in regions if r is not a and r.label.split("#")[0].split(":")[0] == kind]
        b = self.rng.choice(same or regions)
        n = min(a.size, b.size, len(self.data) - b.offset)
        self.data[b.offset : b.offset + n] = self.seed.data[a.offset : a.offset + n]
        self.log.append(f"copy {n} bytes of {a.label} over {b.label}")
        return None

    def npy_header_edit(self, targeted: bool) -> None:
        """Rewrites one entry of the NPY header dict (descr, shape, fortran_order), keeping the
        header's length where the new text fits, else fixing up the length field."""
        data = bytes(self.data)
        m = re.search(rb"\{.*\}", data[:4096], re.S)
        if not data.startswith(b"\x93NUMPY") or m is None or len(data) < 12:
            return self.bit_flip(targeted)
        edits: list[tuple[bytes, list[bytes]]] = [
            (
                rb"'descr': *('[^']*'|\[.*?\])",
                [
                    b"'<f8'",
                    b"'>i2'",
                    b"'|u1'",
                    b"'<U2'",
                    b"'|S0'",
                    b"'|V3'",
                    b"'<M8[s]'",
                    b"'|O'",
                    b"'<f4 '",
                    b"'b'",
                    b"'?'",
                    b"'<c16'",
                    b"'f2'",
                    b"'<i16'",
                    b"[('a', '<i4'), ('b', '|u1')]",
                    b"[('a', '<i4', (0,))]",
                    b"'<U0'",
                    b"'>f4'",
                    b"''",
                    b"'<i4\\x00'",
                ],
            ),
            (
                rb"'shape': *\([^)]*\)",
                [
                    b"()",
                    b"(0,)",
                    b"(1,)",
                    b"(-1,)",
                    b"(2,)",
                    b"(1000000,)",
                    b"(4294967296,)",
                    b"(9223372036854775807,)",
                    b"(3, 0, 7)",
                    b"(1, 1, 1, 1, 1)",
                    b"(True,)",
                    b"(1.5,)",
                    b"(03,)",
                    b"(1 ,)",
                    b"(2**3,)",
                    b"(1,2,3,4,5,6,7,8,9,10,11,12,13)",
                ],
            ),
            (rb"'fortran_order': *\w+", [b"True", b"False", b"0", b"1", b"None"]),
        ]
        pattern, choices = self.rng.choice(edits)
        found = re.search(pattern, data[: m.end()])
        if found is None:
            return self.bit_flip(targeted)
        key = found.group(0).split(b":")[0]
        new = key + b": " + self.rng.choice(choices)
        version = data[6]
        pre = 10 if version == 1 else 12
        width = 2 if version == 1 else 4
        hlen = int.from_bytes(data[8:pre], "little")
        if pre + hlen > len(data):  # the length field is already wrong: edit what is there
            hlen = len(data) - pre
        head = data[pre : pre + hlen]
        at = found.start() - pre
        if at < 0 or found.end() - pre > len(head):
            return self.bit_flip(targeted)
        text = head[:at] + new + head[found.end() - pre :]
        stripped = text.rstrip(b" \n")
        if len(stripped) + 1 <= hlen:
            text = stripped + b" " * (hlen - len(stripped) - 1) + b"\n"
        else:
            text = stripped + b"\n"
            if len(text).bit_length() > 8 * width:
                return self.bit_flip(targeted)
        out = data[:8] + len(text).to_bytes(width, "little") + text + data[pre + hlen :]
        self.data = bytearray(out)
        self.log.append(f"npy header {found.group(0)!r} -> {new!r}")
        return None


Mutation = Callable[[Mutator, bool], None]

#: (weight, mutation) per format family; targeted hits are chosen half of the time.
GENERIC: list[tuple[int, Mutation]] = [
    (6, Mutator.bit_flip),
    (4, Mutator.byte_set),
    (5, Mutator.int_set),
    (3, Mutator.random_range),
    (2, Mutator.zero_range),
    (2, Mutator.truncate),
    (2, Mutator.duplicate),
    (1, Mutator.insert),
    (1, Mutator.delete),
]
EXTRA: dict[str, list[tuple[int, Mutation]]] = {
    "hdf5": [(2, Mutator.overwrite_copy)],
    "pytables": [(2, Mutator.overwrite_copy)],
    "zip": [(6, Mutator.field_set), (1, Mutator.overwrite_copy)],
    "npz": [(6, Mutator.field_set), (1, Mutator.overwrite_copy)],
    "npy": [(6, Mutator.npy_header_edit), (2, Mutator.field_set)],
}


#: No mutation makes an input larger than this (seeds are at most tens of KB).
MAX_INPUT_BYTES = 1 << 20


def mutate(seed: Seed, rng: random.Random) -> tuple[bytes, list[str]]:
    """One to four stacked mutations of ``seed``."""
    m = Mutator(seed, rng)
    table = GENERIC + EXTRA.get(seed.fmt, [])
    weights = [w for w, _ in table]
    count = rng.choices((1, 2, 3, 4), weights=(60, 25, 10, 5))[0]
    for _ in range(count):
        if not m.data:
            break
        op = rng.choices([f for _, f in table], weights=weights)[0]
        op(m, rng.random() < 0.5)
    if len(m.data) > MAX_INPUT_BYTES:
        raise AssertionError(f"{seed.name}: a mutation made {len(m.data)} bytes: {m.log}")
    if bytes(m.data) == seed.data:  # a no-op (say, a byte set to its own value): flip one bit
        Mutator.bit_flip(m, False)
    return bytes(m.data), m.log
