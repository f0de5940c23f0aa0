"""Clips of videos stored as frames (:class:`ClipReader`): a sample is ``clip_len`` frames
of one video, decoded on packread's threads into one ``(B, T, H, W, C)`` batch. Which videos a
source holds, their frames' order, names and labels are found in the core, the same for one
source and for every shard of many."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import _packread
from ._common import check_num_threads
from ._hdf5 import DEFAULT_CACHE_BYTES
from ._image import LabelledReader
from ._options import DEFAULT_MAX_IMAGE_BYTES, ImageDecode, Limits, Remote
from ._registry import Format, register
from ._sources import classify
from ._zip import members_option
from .errors import InvalidArgumentError, PackreadTypeError

#: How clips are cut from a video (``sampling=``).
SAMPLINGS = ("random", "uniform", "segments", "segments-center", "windows")

#: What a video shorter than a clip gives (``short=``).
SHORT_POLICIES = ("repeat_last", "error", "skip")


def _episodes(episodes: Any) -> Any:
    """``episodes=`` checked: a dataset's name, or a list of ints."""
    if episodes is None or isinstance(episodes, str):
        return episodes
    values = np.asarray(episodes)
    if values.ndim != 1 or values.dtype.kind not in "iu":
        raise InvalidArgumentError(
            "episodes must be an HDF5 dataset's name or a list of episode ends or lengths"
        )
    return [int(v) for v in values]


def _offsets(offsets: Any) -> dict[str, list[int]] | None:
    """``offsets=`` checked: ``{dataset: [frame offsets]}``."""
    if offsets is None:
        return None
    if not isinstance(offsets, Mapping):
        raise PackreadTypeError("offsets must be a dict {dataset: [frame offsets]}")
    out: dict[str, list[int]] = {}
    for name, values in offsets.items():
        arr = np.asarray(values)
        if (
            not isinstance(name, str)
            or arr.ndim != 1
            or arr.size == 0
            or arr.dtype.kind not in "iu"
        ):
            raise InvalidArgumentError(
                f"offsets[{name!r}] must be a non-empty list of ints (frames from the anchor)"
            )
        out[name] = [int(v) for v in arr]
    return out


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


class ClipReader(LabelledReader):
    """Clips of videos stored as frames: a sample is ``clip_len`` frames of one video, each an
    encoded image (JPEG, PNG, WebP), decoded, cropped and resized on packread's threads with
    the GIL released, straight into one batch ``{"frames": ..., "labels": ...}`` (``labels``
    where the source has them). ``frames`` is ``(B, T, H, W, C)``, or with
    ``decode=ImageDecode(..., layout="NCHW")`` ``(B, C, T, H, W)`` as torchvision's video
    models take it. Grey frames (``mode="L"``) keep their channel axis: ``C = 1``.

    ``source`` is one of, or a list or glob of (``shards``):

    - a folder of video folders, ``root/<video>/<frames>``, or of class folders,
      ``root/<class>/<video>/<frames>`` (classes sorted by name, labels their positions, as
      ``torchvision.datasets.ImageFolder`` gives them); videos in name order;
    - a ZIP archive holding such a tree (``packread convert`` writes one): its directory is
      the index, no file is opened per frame;
    - either of them with ``videos=``, an mmaction list file of ``path num_frames [label]``
      lines (paths below the folder, or folders in the archive): those videos in its order,
      labelled by it; each folder must hold ``num_frames`` frames;
    - an HDF5 file whose datasets (``arrays``: their names; default every dataset of the
      common length but ``labels`` and ``episodes``) hold frames as stored (any dtype, no
      decoding): a row of ``(N, T, ...)`` is a video of ``T`` frames (the spatiotemporal
      seed's layout); with ``episodes=`` the first axis ``(T, ...)`` is time, cut into
      episodes by their ends (increasing, the last ``T``) or lengths (summing to ``T``), an
      integer dataset's name or a list: a clip never crosses an episode's end. A batch is
      ``{dataset: (B, T, ...)}``; ``offsets={dataset: [frames]}`` gives a dataset its own
      frames around a clip's anchor (LeRobot's ``delta_timestamps`` in frames, e.g.
      ``{"obs": [-2, -1, 0], "action": [0, 1, 2]}``): a clip then spans from the least offset
      to the greatest, and only windows that fit in an episode are taken. ``labels=`` names an
      integer dataset of one label a row (or episode).

    A video's frames are its folder's image files in natural order (``img_2`` before
    ``img_10``); other files are left out. Frames numbered unevenly (a frame missing from the
    middle) are refused when the reader opens (``InconsistentError``).

    Which frames a sample holds (``frame_step``: the distance between them):

    - ``sampling="random"`` (training): one clip per video, its start drawn from
      ``(augment_seed, epoch, sample)``: ``batch(idx, epoch=e)`` repeats epoch ``e`` exactly;
    - ``"uniform"`` (evaluation): ``clips_per_video`` evenly spaced clips per video, each a
      sample: clip ``k`` of ``clips_per_video`` starts at ``(2k + 1) * S // (2 *
      clips_per_video)`` of the ``S`` starts a video has (mmaction's test sampling);
    - ``"segments"`` (TSN): ``clip_len`` equal segments, one frame of each at a random offset
      (drawn per epoch); ``"segments-center"``: each segment's centre frame;
    - ``"windows"``: every window at ``stride``, each a sample (``len`` = windows).

    A video shorter than a clip (``short=``): ``"repeat_last"`` (default, as torchcodec's
    samplers) repeats its last frame, ``"error"`` refuses to open, naming it, ``"skip"`` leaves
    it out. A video without frames is refused unless ``short="skip"``.

    ``decode`` (a :class:`~packread.ImageDecode`) is applied to every frame: ``size=None``
    (the default) keeps frames whole, and every frame must then have the first frame's size.
    A clip's frames share one crop box and one flip, drawn from ``(augment_seed, epoch,
    sample)``. Frames of different sizes within one video are an ``InconsistentError``; a
    frame that does not decode a ``DecodeError`` naming it; with ``on_error="skip"`` its clip
    is replaced by the next one (in index order, wrapping around) that decodes, recorded in
    :attr:`errors`.

    >>> r = ClipReader("frames/", clip_len=4, frame_step=2,
    ...                decode=packread.ImageDecode(16, crop="random", flip=True))
    >>> r.batch([0, 1], epoch=3).shape  # no labels: the frames alone
    (2, 4, 16, 16, 3)
    """

    format = "clips"
    _skipped_what = "clip(s)"

    def __init__(
        self,
        source: Any,
        clip_len: int,
        *,
        frame_step: int = 1,
        sampling: str = "random",
        clips_per_video: int = 1,
        stride: int = 1,
        short: str = "repeat_last",
        videos: str | os.PathLike[str] | None = None,
        episodes: str | Sequence[int] | None = None,
        offsets: Mapping[str, Sequence[int]] | None = None,
        decode: ImageDecode | None = None,
        arrays: str | Sequence[str] | None = None,
        members: str | Sequence[str] | None = None,
        labels: str | bool | None = None,
        chunk_cache_bytes: int = DEFAULT_CACHE_BYTES,
        augment_seed: int = 0,
        on_error: str = "raise",
        num_threads: int | None = None,
        remote: Remote | dict[str, Any] | None = None,
        limits: Limits | None = None,
        shard_index: str | os.PathLike[str] | None = None,
        max_open_shards: int | None = None,
    ) -> None:
        kwargs = {k: v for k, v in locals().items() if k not in ("self", "source", "__class__")}
        self._setup(source, None, **kwargs)

    def _setup(
        self,
        source: Any,
        state: dict[str, Any] | None,
        clip_len: int = 1,
        frame_step: int = 1,
        sampling: str = "random",
        clips_per_video: int = 1,
        stride: int = 1,
        short: str = "repeat_last",
        videos: Any = None,
        episodes: Any = None,
        offsets: Any = None,
        decode: Any = None,
        arrays: Any = None,
        members: Any = None,
        labels: Any = None,
        chunk_cache_bytes: int = DEFAULT_CACHE_BYTES,
        augment_seed: int = 0,
        on_error: str = "raise",
        num_threads: int | None = None,
        remote: Any = None,
        limits: Any = None,
        shard_index: Any = None,
        max_open_shards: Any = None,
    ) -> None:
        decode, remote, limits = ImageDecode._of(decode), Remote._of(remote), Limits._of(limits)
        clip_len = _positive("clip_len", clip_len)
        frame_step = _positive("frame_step", frame_step)
        clips_per_video = _positive("clips_per_video", clips_per_video)
        stride = _positive("stride", stride)
        if sampling not in SAMPLINGS:
            raise InvalidArgumentError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
        if short not in SHORT_POLICIES:
            raise InvalidArgumentError(f"short must be one of {SHORT_POLICIES}, got {short!r}")
        if sampling.startswith("segments") and frame_step != 1:
            raise InvalidArgumentError(
                "frame_step does not apply to sampling='segments' (one frame a segment)"
            )
        if on_error not in ("raise", "skip"):
            raise InvalidArgumentError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if not (labels is None or isinstance(labels, (bool, str))):
            raise PackreadTypeError("labels must be an HDF5 dataset's name, True or False")
        if labels is True:
            labels = None
        episodes = _episodes(episodes)
        offsets = _offsets(offsets)
        # Of an HDF5 file, the arrays named are its datasets read (but the labels).
        wanted = [arrays] if isinstance(arrays, str) else None if arrays is None else list(arrays)
        datasets = None if wanted is None else [a for a in wanted if a != "labels"] or None
        if videos is not None:
            if not isinstance(videos, (str, os.PathLike)):
                raise PackreadTypeError("videos must be the path of a list file")
            videos = os.fspath(videos)
        members = members_option(members)
        self._kwargs = {
            "clip_len": clip_len,
            "frame_step": frame_step,
            "sampling": sampling,
            "clips_per_video": clips_per_video,
            "stride": stride,
            "short": short,
            "videos": videos,
            "episodes": episodes,
            "offsets": None if offsets is None else dict(offsets),
            "decode": decode,
            "arrays": arrays,
            "members": members,
            "labels": labels,
            "chunk_cache_bytes": int(chunk_cache_bytes),
            "augment_seed": int(augment_seed),
            "on_error": on_error,
            "num_threads": check_num_threads(num_threads),
            "remote": remote,
            "limits": limits,
            "shard_index": shard_index,
            "max_open_shards": max_open_shards,
        }
        options = {
            **decode._binding(),
            "clip_len": clip_len,
            "frame_step": frame_step,
            "sampling": sampling,
            "clips_per_video": clips_per_video,
            "stride": stride,
            "short": short,
            "videos": videos,
            "episodes": episodes,
            "offsets": [] if offsets is None else list(offsets.items()),
            "datasets": datasets,
            "cache_bytes": int(chunk_cache_bytes),
            "augment_seed": int(augment_seed) & (2**64 - 1),
            "on_error": on_error,
            "members": members,
            "labels": labels,
            "num_threads": self._kwargs["num_threads"],
            **limits._binding(DEFAULT_MAX_IMAGE_BYTES),
            **remote._binding(),
        }
        self.decode = decode
        #: How clips are cut: ``sampling``, ``clip_len``, ``frame_step``, ...
        self.sampling = sampling
        self.clip_len = clip_len
        self.frame_step = frame_step
        self.varies_by_epoch = decode.varies_by_epoch or sampling in ("random", "segments")
        src = classify(source, remote)
        self._source = source
        reader = self._open_labelled(
            src,
            options,
            _packread.ClipFile,
            "clips",
            remote,
            shard_index,
            max_open_shards,
            state,
        )
        found = self.labels
        self._bind(reader, None, None if found is None else {"labels": found})
        # Without labels, frames of one array are that array (as an HDF5Reader of one dataset).
        core = [n for n in self._arrays if n != "labels" or found is None]
        if arrays is None and found is None and len(core) == 1:
            arrays = core[0]
        self._choose(arrays)

    def _sample(self, i: int) -> int:
        n = len(self)
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not -n <= i < n:
            raise IndexError(f"{self._describe()}: sample {i!r} of {n}")
        return int(i) % n

    @property
    def videos(self) -> list[tuple[str, int]]:
        """``(name, frames)`` of every video, in order (with ``short="skip"``, also those
        left out).

        >>> ClipReader("frames/", clip_len=8).videos
        [('frames/v_000', 8), ('frames/v_001', 10), ('frames/v_002', 12)]
        """
        inner = self._one_file("videos")
        return [(name, frames) for name, frames, _ in inner.videos()]

    def video_frames(self, v: int) -> list[str]:
        """Every frame of video ``v`` (its position in :attr:`videos`), in order: files, or
        ``archive:member``; of HDF5 frames ``dataset[row, t]`` or ``dataset[t]``.

        >>> ClipReader("frames/", clip_len=8).video_frames(0)[:2]
        ['frames/v_000/img_00001.jpg', 'frames/v_000/img_00002.jpg']
        """
        inner = self._one_file("video_frames()")
        n = len(inner.videos())
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not -n <= v < n:
            raise IndexError(f"{self._describe()}: video {v!r} of {n}")
        return list(inner.video_frames(int(v) % n))

    def frames(self, i: int, epoch: int = 0) -> list[str]:
        """The frames (files, or ``archive:member``) sample ``i`` holds in ``epoch``, in
        clip order.

        >>> ClipReader("frames/", clip_len=2, sampling="uniform").frames(0)
        ['frames/v_000/img_00004.jpg', 'frames/v_000/img_00005.jpg']
        """
        inner = self._one_file("frames()")
        return list(inner.frames(self._sample(i), int(epoch))[2])

    def frame_positions(self, i: int, epoch: int = 0) -> tuple[int, list[int]]:
        """``(video, positions)``: the video sample ``i`` is cut from (its position in
        :attr:`videos`) and its frames' positions in that video, in ``epoch``.

        >>> ClipReader("frames/", clip_len=3, sampling="windows", stride=4).frame_positions(2)
        (1, [0, 1, 2])
        """
        inner = self._one_file("frame_positions()")
        video, positions, _ = inner.frames(self._sample(i), int(epoch))
        return int(video), [int(p) for p in positions]

    def crop_params(self, i: int, epoch: int = 0) -> tuple[int, int, int, int, bool]:
        """``(top, left, height, width, flipped)`` of the crop every frame of sample ``i``
        gets in ``epoch``, in its pixels (as :meth:`ImageReader.crop_params`).

        >>> decode = packread.ImageDecode(16, crop="random", flip=True)
        >>> top, left, h, w, flipped = ClipReader("frames/", 4, decode=decode).crop_params(0)
        >>> 0 < h <= 24 and 0 < w <= 32
        True
        """
        inner = self._one_file("crop_params()")
        return tuple(inner.crop(self._sample(i), int(epoch)))  # type: ignore[return-value]

    def __repr__(self) -> str:
        if self.closed:
            return f"<closed {type(self).__name__}>"
        return (
            f"ClipReader({self._describe()!r}, {len(self)} clips of {self.clip_len}, "
            f"sampling={self.sampling!r}, shape={self.shape})"
        )


# Claimed by the option it requires (``clip_len``): the registry asks such formats first.
register(Format(name="clips", reader=ClipReader))

__all__ = ["ClipReader"]
