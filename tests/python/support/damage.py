"""Damaged encoded images made at test time from files PIL writes: named JPEG and PNG
mutations, each the shape of a defect class found by the damaged-image runs, and seeded random
ones (bit flips, cut, repeated and dropped bytes). ``pil_result`` gives what PIL does with
each: the reference a decoder of damaged images is held to."""

from __future__ import annotations

import io
import random
import struct
import zlib
from collections.abc import Callable

import numpy as np
from PIL import Image

from support.images import encode, photo

SOI = b"\xff\xd8"
SOS, DHT, DQT, EOI = 0xDA, 0xC4, 0xDB, 0xD9


def jpeg_segments(data: bytes) -> list[tuple[int, int, int]]:
    """``(marker, start, end)`` of each marker segment from SOI up to and including the first
    SOS header (``start`` at its ``FF``)."""
    out, pos = [], 2
    while pos + 4 <= len(data):
        assert data[pos] == 0xFF, f"no marker at byte {pos}"
        marker = data[pos + 1]
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        out.append((marker, pos, pos + 2 + length))
        pos += 2 + length
        if marker == SOS:
            break
    return out


def _first(data: bytes, marker: int) -> tuple[int, int]:
    return next((s, e) for m, s, e in jpeg_segments(data) if m == marker)


def _without(data: bytes, marker: int) -> bytes:
    out, last = bytearray(), 0
    for m, s, e in jpeg_segments(data):
        if m == marker:
            out += data[last:s]
            last = e
    return bytes(out + data[last:])


def _scan_middle(data: bytes) -> int:
    """A byte in the middle of the first scan's entropy-coded data, not after an ``FF``."""
    _, end = _first(data, SOS)
    at = end + (len(data) - end) // 2
    while data[at - 1] == 0xFF:
        at += 1
    return at


def _adobe(transform: int) -> bytes:
    body = b"Adobe" + struct.pack(">HHHB", 100, 0, 0, transform)
    return b"\xff\xee" + struct.pack(">H", len(body) + 2) + body


def _jpeg_mutations() -> dict[str, Callable[[bytes, bytes], bytes]]:
    """Named mutations of ``(baseline, progressive)`` JPEGs; the comment says what each one
    caught."""

    def poison_dqt(b: bytes, p: bytes) -> bytes:
        # A fatal header error ("Bogus DQT index 15") left the decoder mid-stream for the next
        # image on its thread ("two SOI markers").
        s, _ = _first(b, DQT)
        return b[: s + 4] + b"\x0f" + b[s + 5 :]

    def cut_before_sos(b: bytes, p: bytes) -> bytes:
        # Data ending in the header: the same, and the previous image's size reported.
        s, _ = _first(b, SOS)
        return b[:s]

    def no_dht(b: bytes, p: bytes) -> bytes:
        # Decoded with the previous image's Huffman tables; alone, with the standard ones
        # (PIL writes the standard tables, so the pixels are the original's).
        return _without(b, DHT)

    def no_dqt(b: bytes, p: bytes) -> bytes:
        # Decoded with the previous image's quantization tables where PIL refuses it.
        return _without(b, DQT)

    def fatal_after_warning(b: bytes, p: bytes) -> bytes:
        # A marker mid-scan (warning: premature end of data segment), then an unknown one
        # (fatal): the partial image came back as if only the warning had happened.
        at = _scan_middle(b)
        return b[:at] + b"\xff\xad" + b[at:]

    def progressive_cut(b: bytes, p: bytes) -> bytes:
        # Data ending before the last scan: the half-decoded image came back, no error.
        return p[:1000]

    def junk_before_sos(b: bytes, p: bytes) -> bytes:
        # A recoverable warning in the header refused, where PIL decodes.
        s, _ = _first(b, SOS)
        return b[:s] + b"\x00" * 7 + b[s:]

    def adobe_unknown_transform(b: bytes, p: bytes) -> bytes:
        # "Unknown Adobe color transform code": a warning, refused.
        s, _ = _first(b, DQT)
        return b[:s] + _adobe(7) + b[s:]

    def marker_mid_scan(b: bytes, p: bytes) -> bytes:
        # "Premature end of data segment" (the scan ends early, the rest grey): called
        # truncation, where PIL decodes it.
        at = _scan_middle(b)
        return b[:at] + b"\xff\xd9" + b[at:]

    def no_eoi(b: bytes, p: bytes) -> bytes:
        # Only the end marker missing: the decoder reads ahead past the last row's data, so
        # PIL says truncated too.
        assert b.endswith(b"\xff\xd9")
        return b[:-2]

    def progressive_no_eoi(b: bytes, p: bytes) -> bytes:
        # A progressive image cannot know its scans ended without it: PIL says truncated.
        assert p.endswith(b"\xff\xd9")
        return p[:-2]

    return {
        f.__name__: f
        for f in (
            poison_dqt,
            cut_before_sos,
            no_dht,
            no_dqt,
            fatal_after_warning,
            progressive_cut,
            junk_before_sos,
            adobe_unknown_transform,
            marker_mid_scan,
            no_eoi,
            progressive_no_eoi,
        )
    }


def good_jpegs() -> dict[str, bytes]:
    """Good JPEGs of the kinds datasets hold, small enough to decode many times."""
    im = photo("chelsea.png").resize((161, 120))
    return {
        "baseline": encode(im, "JPEG", quality=90),
        "progressive": encode(im, "JPEG", quality=85, progressive=True),
        "444": encode(im, "JPEG", quality=75, subsampling=0),
        "gray": encode(im.convert("L"), "JPEG", quality=90),
        "cmyk": encode(im.convert("CMYK"), "JPEG", quality=90),
    }


def damaged_jpegs(random_count: int = 40, seed: int = 0) -> dict[str, bytes]:
    """The named mutations of PIL's baseline and progressive JPEGs, then ``random_count``
    seeded random ones of every good kind."""
    good = good_jpegs()
    base, prog = good["baseline"], good["progressive"]
    out = {name: f(base, prog) for name, f in _jpeg_mutations().items()}
    rng = random.Random(seed)
    for k in range(random_count):
        kind = sorted(good)[k % len(good)]
        out[f"random{k:03d}-{kind}"] = mutate(good[kind], rng)
    return out


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random damage of ``data`` past its first two bytes: flipped bits, a byte set, a
    cut, a run repeated or a run dropped."""
    x = bytearray(data)
    how = rng.choice(["flip", "byte", "cut", "repeat", "drop"])
    at = rng.randrange(2, len(x))
    if how == "flip":
        for _ in range(rng.randint(1, 4)):
            p = rng.randrange(2, len(x))
            x[p] ^= 1 << rng.randrange(8)
    elif how == "byte":
        x[at] = rng.randrange(256)
    elif how == "cut":
        del x[at:]
    elif how == "repeat":
        x[at:at] = x[at : at + rng.randint(1, 40)]
    else:
        del x[at : at + rng.randint(1, 30)]
    return bytes(x)


# --- PNG ---------------------------------------------------------------------------------------


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_of(
    width: int, height: int, color_type: int, depth: int, rows: list[bytes], *chunks
) -> bytes:
    """A PNG written chunk by chunk (for what PIL does not write: 16-bit RGB, any ``tRNS``):
    ``rows`` unfiltered, ``chunks`` ``(kind, body)`` placed before the image data."""
    header = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    data = zlib.compress(b"".join(b"\x00" + r for r in rows))
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", header)
        + b"".join(png_chunk(k, b) for k, b in chunks)
        + png_chunk(b"IDAT", data)
        + png_chunk(b"IEND", b"")
    )


def png_short_palette() -> bytes:
    """A palette PNG whose PLTE holds 47 bytes (15 entries and two stray bytes)."""
    rows = [bytes(range(16)) for _ in range(4)]
    palette = bytes(range(45)) + b"\x01\x02"
    return png_of(16, 4, 3, 8, rows, (b"PLTE", palette))


def png16_with_trns() -> dict[str, bytes]:
    """16-bit grey and RGB PNGs with a ``tRNS`` colour: one that no 8-bit pixel can equal (it
    is over 255), and one some pixels equal after PIL's conversion to 8 bits."""
    grey = np.array([[597, 300, 5, 255, 256, 0]], dtype=">u2")
    rgb = np.array(
        [[[1000, 2000, 3000], [1, 3, 5], [258, 772, 1286], [65535, 0, 256]]], dtype=">u2"
    )
    return {
        "gray16_trns_over_255": png_of(
            6, 1, 0, 16, [grey[0].tobytes()], (b"tRNS", struct.pack(">H", 597))
        ),
        "gray16_trns_5": png_of(6, 1, 0, 16, [grey[0].tobytes()], (b"tRNS", struct.pack(">H", 5))),
        "rgb16_trns_16bit": png_of(
            4, 1, 2, 16, [rgb[0].tobytes()], (b"tRNS", struct.pack(">HHH", 258, 772, 1286))
        ),
        "rgb16_trns_8bit": png_of(
            4, 1, 2, 16, [rgb[0].tobytes()], (b"tRNS", struct.pack(">HHH", 1, 3, 5))
        ),
    }


def pil_result(data: bytes, mode: str = "RGB") -> np.ndarray | Exception:
    """What PIL gives for ``data``: ``Image.open(f).convert(mode)``'s pixels, or the exception
    it raises (without ``LOAD_TRUNCATED_IMAGES``)."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            return np.asarray(im.convert(mode))
    except Exception as e:  # PIL raises many kinds for damaged files
        return e
