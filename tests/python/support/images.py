"""Encoded image fixtures made at test time from the photographs scikit-image ships, re-encoded
by PIL the ways datasets hold them: JPEG at several qualities and sizes, progressive, grey,
CMYK; PNG of 8 and 16 bits, palette, grey + alpha, RGBA; WebP lossy and lossless; EXIF-rotated
JPEGs."""

from __future__ import annotations

import io
import os
from collections.abc import Callable

import numpy as np
from PIL import Image

#: Photographs in scikit-image's data folder (real pictures, not noise).
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png"]


def photo(name: str) -> Image.Image:
    import skimage

    path = os.path.join(os.path.dirname(skimage.__file__), "data", name)
    with Image.open(path) as im:
        return im.convert("RGB")


def encode(im: Image.Image, fmt: str, **kw) -> bytes:
    """``im`` as PIL writes it in ``fmt`` (``"JPEG"``, ``"PNG"``, ``"WEBP"``) with ``kw``."""
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


#: Each kind of file: a name suffix and how PIL writes it from an RGB photograph.
KINDS: dict[str, Callable[[Image.Image], bytes]] = {
    "q90.jpg": lambda im: encode(im, "JPEG", quality=90),
    "q60-444.jpg": lambda im: encode(im, "JPEG", quality=60, subsampling=0),
    "q95-422.jpg": lambda im: encode(im, "JPEG", quality=95, subsampling=1),
    "progressive.jpg": lambda im: encode(im, "JPEG", quality=85, progressive=True),
    "gray.jpg": lambda im: encode(im.convert("L"), "JPEG", quality=90),
    "cmyk.jpg": lambda im: encode(im.convert("CMYK"), "JPEG", quality=90),
    "small.jpg": lambda im: encode(im.resize((61, 47)), "JPEG", quality=90),
    "rgb.png": lambda im: encode(im, "PNG"),
    "rgba.png": lambda im: encode(_with_alpha(im), "PNG"),
    "gray16.png": lambda im: encode(_gray16(im), "PNG"),
    "palette.png": lambda im: encode(im.convert("P", palette=Image.Palette.ADAPTIVE), "PNG"),
    "la.png": lambda im: encode(_with_alpha(im).convert("LA"), "PNG"),
    "lossless.webp": lambda im: encode(im, "WEBP", lossless=True),
    "lossless-alpha.webp": lambda im: encode(_with_alpha(im), "WEBP", lossless=True),
    "lossy.webp": lambda im: encode(im, "WEBP", quality=80),
}

#: Kinds whose pixels PIL and packread decode with different code (libwebp vs image-webp):
#: compared within a tolerance.
INEXACT = {"lossy.webp"}


def _with_alpha(im: Image.Image) -> Image.Image:
    a = np.asarray(im.convert("L"))
    out = im.convert("RGBA")
    out.putalpha(Image.fromarray((255 - a // 2).astype(np.uint8)))
    return out


def _gray16(im: Image.Image) -> Image.Image:
    a = np.asarray(im.convert("L")).astype(np.uint16)
    # Values above 255 too: PIL clips them converting I;16 to L.
    return Image.fromarray(a * 3)  # uint16: mode I;16


def files(photos: list[str] | None = None) -> dict[str, bytes]:
    """Every kind of file from every photograph: ``{"<photo>.<kind>": bytes}``."""
    out = {}
    for p in photos or PHOTOS:
        im = photo(p)
        stem = p.split(".")[0]
        for kind, make in KINDS.items():
            out[f"{stem}.{kind}"] = make(im)
    return out


def rotated(orientation: int) -> bytes:
    """A JPEG whose EXIF orientation is ``orientation`` (its pixels stored sideways)."""
    return encode(photo("chelsea.png"), "JPEG", quality=90, exif=_exif(orientation))


def pil_rgb(raw: bytes, mode: str = "RGB") -> np.ndarray:
    """What PIL gives: ``Image.open(f).convert(mode)``."""
    with Image.open(io.BytesIO(raw)) as im:
        return np.asarray(im.convert(mode))
