"""Video fixtures made at test time from scikit-image's photographs: each video is a camera
panning over one photo (consecutive frames are crops a few pixels apart, as video frames
differ), written by PIL as the frame folders users extract (``img_00001.jpg``, ...), packed
into ZIP archives by ``zipfile``, or stored by h5py as the spatiotemporal seed stores them;
and the reference sampler the reader is checked against, written out here."""

from __future__ import annotations

import io
import os
import re
import zipfile

import numpy as np
from PIL import Image

from support.images import PHOTOS, photo


def pan(
    name: str, frames: int, size: tuple[int, int], step: tuple[int, int] = (2, 3), at: int = 0
) -> list[np.ndarray]:
    """``frames`` RGB frames of ``size`` (h, w): a window moving by ``step`` pixels a frame over
    the photo ``name``, starting ``at`` pixels in."""
    pixels = np.asarray(photo(name))
    h, w = size
    out = []
    for t in range(frames):
        y = (at + t * step[0]) % (pixels.shape[0] - h)
        x = (at + t * step[1]) % (pixels.shape[1] - w)
        out.append(np.ascontiguousarray(pixels[y : y + h, x : x + w]))
    return out


def encode(frame: np.ndarray, fmt: str = "JPEG", **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}) | kw)
    return buf.getvalue()


def frame_name(t: int, ext: str = "jpg", digits: int = 5) -> str:
    """mmaction's frame names: ``img_00001.jpg`` (1-based)."""
    return f"img_{t + 1:0{digits}d}.{ext}"


def write_video(
    folder: str, frames: list[np.ndarray], ext: str = "jpg", digits: int = 5, **kw
) -> list[str]:
    """The frames as files of ``folder`` (JPEG or PNG by ``ext``; ``digits`` 0 writes
    ``img_1``, ``img_2``, ... unpadded); returns their paths."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for t, f in enumerate(frames):
        name = f"img_{t + 1}.{ext}" if digits == 0 else frame_name(t, ext, digits)
        p = os.path.join(folder, name)
        with open(p, "wb") as out:
            out.write(encode(f, "PNG" if ext == "png" else "JPEG", **kw))
        paths.append(p)
    return paths


#: The class tree: class -> [(video, frames, size)]. Frame counts vary (short ones included).
TREE = {
    "climb": [("v_a", 12, (48, 64)), ("v_b", 7, (48, 64)), ("v_c", 20, (40, 56))],
    "jump": [("v_d", 3, (48, 64)), ("v_e", 15, (52, 60))],
    "walk": [("v_f", 9, (48, 64)), ("v_g", 25, (44, 70)), ("v_h", 11, (48, 64))],
}


def write_tree(root: str, png_video: str = "v_f") -> dict[str, list[str]]:
    """:data:`TREE` as ``root/<class>/<video>/img_00001.jpg`` (``png_video`` as PNG); returns
    each video's frame paths (by ``class/video``), in frame order."""
    out: dict[str, list[str]] = {}
    for c, (cls, videos) in enumerate(sorted(TREE.items())):
        for v, (video, n, size) in enumerate(videos):
            frames = pan(PHOTOS[(c + v) % len(PHOTOS)], n, size, at=7 * v)
            ext = "png" if video == png_video else "jpg"
            out[f"{cls}/{video}"] = write_video(os.path.join(root, cls, video), frames, ext)
    return out


def zip_tree(root: str, path: str, prefix: str = "") -> str:
    """The files below ``root`` in a ZIP (``zipfile``, stored and deflated alternately), named
    by their paths below it (after ``prefix``)."""
    with zipfile.ZipFile(path, "w") as z:
        files = sorted(
            os.path.relpath(os.path.join(d, f), root)
            for d, _, names in os.walk(root)
            for f in names
        )
        for k, rel in enumerate(files):
            method = zipfile.ZIP_DEFLATED if k % 2 else zipfile.ZIP_STORED
            z.write(os.path.join(root, rel), prefix + rel, compress_type=method)
    return path


def natural(name: str) -> list:
    """The natural sort key the reader documents: digit runs by value, then by length."""
    parts = re.split(r"(\d+)", name)
    return [(0, int(p), len(p)) if p.isdigit() else (1, p) for p in parts if p != ""]


def pil_frames(paths: list[str], mode: str = "RGB") -> np.ndarray:
    """The frames as PIL decodes them, stacked ``(T, H, W, C)``."""
    out = []
    for p in paths:
        with Image.open(p) as im:
            a = np.asarray(im.convert(mode))
        out.append(a[..., None] if a.ndim == 2 else a)
    return np.stack(out)


def reference_positions(
    n: int,
    clip_len: int,
    k: int = 0,
    *,
    step: int = 1,
    sampling: str = "uniform",
    clips: int = 1,
    stride: int = 1,
    start: int | None = None,
) -> list[int]:
    """Which frames of a video of ``n`` frames clip ``k`` holds, as the reader documents it
    (``start`` given for random clips, whose draw the test cannot know): evenly spaced clips
    start at ``(2k + 1) * S // (2 * clips)`` of its ``S`` starts; windows at ``k * stride``;
    centred segments at each segment's middle; frames past the end repeat the last."""
    span = (clip_len - 1) * step + 1
    starts = max(n - span, 0) + 1
    if sampling == "segments-center":
        out = []
        for i in range(clip_len):
            a, b = i * n // clip_len, (i + 1) * n // clip_len
            out.append(min(a + (b - a) // 2, n - 1))
        return out
    if start is None:
        start = (2 * k + 1) * starts // (2 * clips) if sampling == "uniform" else k * stride
    return [min(start + t * step, n - 1) for t in range(clip_len)]
