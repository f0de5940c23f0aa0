"""ClipReader: clips of frame folders (on disk, in a ZIP, named by an mmaction list) and of
HDF5 sequences and time axes, against PIL's decode of the right files in the right order,
h5py's slices, torchvision's crops and a reference sampler written in support/clips.py."""

from __future__ import annotations

import io
import os
import pickle
import shutil
import zipfile

import h5py
import numpy as np
import pytest

import packread
from support.clips import (
    natural,
    pan,
    pil_frames,
    reference_positions,
    write_tree,
    write_video,
    zip_tree,
)
from support.images import PHOTOS

Image = pytest.importorskip("PIL.Image")
pytest.importorskip("skimage")


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> tuple[str, dict[str, list[str]]]:
    root = str(tmp_path_factory.mktemp("clips") / "tree")
    return root, write_tree(root)


@pytest.fixture(scope="module")
def same_size_tree(tmp_path_factory) -> tuple[str, dict[str, list[str]]]:
    """Videos of one frame size in two classes, the mmaction way: ``root/<class>/<video>``."""
    root = str(tmp_path_factory.mktemp("clips") / "even")
    out = {}
    for c, cls in enumerate(["open", "pour"]):
        for v in range(3):
            frames = pan(PHOTOS[(c + 2 * v) % len(PHOTOS)], 6 + 5 * v + c, (40, 52), at=5 * v)
            out[f"{cls}/vid{v}"] = write_video(os.path.join(root, cls, f"vid{v}"), frames)
    return root, out


def videos_in_order(paths: dict[str, list[str]]) -> list[str]:
    return sorted(paths, key=lambda k: (k.split("/")[0], k.split("/")[1]))


def test_frames_are_pils_in_natural_order(tmp_path):
    frames = pan("astronaut.png", 12, (32, 40))
    paths = write_video(str(tmp_path / "v" / "clip"), frames, digits=0)  # img_1 ... img_12
    r = packread.ClipReader(str(tmp_path / "v"), 12, sampling="uniform")
    assert r.frames(0) == sorted(paths, key=lambda p: natural(os.path.basename(p)))
    assert r.frames(0)[1].endswith("img_2.jpg")
    assert r.frames(0)[9].endswith("img_10.jpg")
    got = r.batch([0])
    assert got.shape == (1, 12, 32, 40, 3)
    assert got.dtype == np.uint8
    assert np.array_equal(got[0], pil_frames(r.frames(0)))


@pytest.mark.parametrize(("clip_len", "step", "clips"), [(4, 1, 1), (3, 2, 2), (5, 3, 3)])
def test_uniform_clips_equal_the_reference_sampler(same_size_tree, clip_len, step, clips):
    root, paths = same_size_tree
    r = packread.ClipReader(
        root, clip_len, frame_step=step, sampling="uniform", clips_per_video=clips
    )
    order = videos_in_order(paths)
    assert len(r) == len(order) * clips
    assert r.classes == ["open", "pour"]
    got = r.batch(range(len(r)))
    for i in range(len(r)):
        video = paths[order[i // clips]]
        want = reference_positions(len(video), clip_len, i % clips, step=step, clips=clips)
        names = [video[p] for p in want]
        assert r.frames(i) == names
        assert np.array_equal(got["frames"][i], pil_frames(names)), i
        assert got["labels"][i] == ["open", "pour"].index(order[i // clips].split("/")[0])


def test_random_clips_repeat_per_epoch_and_differ_across(same_size_tree):
    root, paths = same_size_tree
    kw = {"frame_step": 2, "augment_seed": 7}
    r = packread.ClipReader(root, 3, **kw)
    order = videos_in_order(paths)
    starts = {}
    for epoch in range(6):
        got = r.batch(range(len(r)), epoch=epoch)
        again = packread.ClipReader(root, 3, **kw).batch(range(len(r)), epoch=epoch)
        assert np.array_equal(got["frames"], again["frames"])  # a resumed epoch repeats
        for i in range(len(r)):
            video = paths[order[i]]
            names = r.frames(i, epoch)
            first = video.index(names[0])
            assert names == [
                video[p] for p in reference_positions(len(video), 3, step=2, start=first)
            ]
            assert 0 <= first <= max(len(video) - 5, 0)
            assert np.array_equal(got["frames"][i], pil_frames(names))
            starts.setdefault(i, set()).add(first)
    # Over six epochs the longer videos' clips start at more than one frame.
    assert any(len(s) > 1 for i, s in starts.items() if len(paths[order[i]]) > 8)
    other_seed = packread.ClipReader(root, 3, frame_step=2, augment_seed=8)
    assert any(other_seed.frames(i, 0) != r.frames(i, 0) for i in range(len(r)))


def test_one_crop_and_flip_for_every_frame_of_a_clip(same_size_tree):
    T = pytest.importorskip("torchvision.transforms.functional")
    root, _ = same_size_tree
    decode = packread.ImageDecode(24, crop="random", flip=True, scale=(0.3, 1.0))
    r = packread.ClipReader(root, 4, sampling="uniform", decode=decode, augment_seed=3)
    flips = set()
    for epoch in (0, 1):
        got = r.batch(range(len(r)), epoch=epoch)["frames"]
        for i in range(len(r)):
            top, left, h, w, flipped = r.crop_params(i, epoch)
            flips.add(flipped)
            for t, name in enumerate(r.frames(i, epoch)):
                with Image.open(name) as im:
                    want = T.resized_crop(im.convert("RGB"), top, left, h, w, [24, 24])
                if flipped:
                    want = T.hflip(want)
                diff = np.abs(got[i, t].astype(int) - np.asarray(want).astype(int))
                assert diff.max() <= 2, (i, t, diff.max())
                assert diff.mean() < 0.6, (i, t, diff.mean())
    assert flips == {True, False}
    assert r.varies_by_epoch


def test_layout_normalisation_and_grey(same_size_tree):
    root, _ = same_size_tree
    base = packread.ClipReader(root, 3, sampling="uniform", labels=False)
    hwc = base.batch([0, 4])
    cthw = packread.ClipReader(
        root, 3, sampling="uniform", labels=False, decode=packread.ImageDecode(layout="NCHW")
    ).batch([0, 4])
    assert cthw.shape == (2, 3, 3, 40, 52)
    assert np.array_equal(cthw, hwc.transpose(0, 4, 1, 2, 3))
    mean, std = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)
    norm = packread.ClipReader(
        root,
        3,
        sampling="uniform",
        labels=False,
        decode=packread.ImageDecode(normalize=(mean, std), layout="NCHW"),
    ).batch([0, 4])
    want = (hwc.astype(np.float32) / 255 - np.array(mean, np.float32)) / np.array(std, np.float32)
    assert norm.dtype == np.float32
    assert np.allclose(norm, want.transpose(0, 4, 1, 2, 3), atol=1e-5)
    grey = packread.ClipReader(
        root, 3, sampling="uniform", labels=False, decode=packread.ImageDecode(mode="L")
    )
    g = grey.batch([1])
    assert g.shape == (1, 3, 40, 52, 1)  # the channel axis is kept: C = 1
    assert np.array_equal(g[0], pil_frames(grey.frames(1), "L"))


def test_segments_and_windows(same_size_tree):
    root, paths = same_size_tree
    order = videos_in_order(paths)
    centre = packread.ClipReader(root, 4, sampling="segments-center")
    for i in range(len(centre)):
        video = paths[order[i]]
        assert centre.frames(i) == [
            video[p] for p in reference_positions(len(video), 4, sampling="segments-center")
        ]
    tsn = packread.ClipReader(root, 4, sampling="segments")
    assert tsn.varies_by_epoch
    assert not centre.varies_by_epoch
    for epoch in range(3):
        for i in range(len(tsn)):
            video = paths[order[i]]
            n = len(video)
            got = [video.index(f) for f in tsn.frames(i, epoch)]
            for s, p in enumerate(got):  # one frame in each segment
                assert s * n // 4 <= p < max((s + 1) * n // 4, s * n // 4 + 1)
    windows = packread.ClipReader(root, 3, sampling="windows", stride=2, frame_step=2)
    counts = [(len(paths[v]) - 5) // 2 + 1 for v in order]
    assert len(windows) == sum(counts)
    i = 0
    for v, count in zip(order, counts, strict=True):
        for k in range(count):
            want = [
                paths[v][p]
                for p in reference_positions(
                    len(paths[v]), 3, k, step=2, sampling="windows", stride=2
                )
            ]
            assert windows.frames(i) == want
            i += 1
    got = windows.batch([0, len(windows) - 1])
    assert np.array_equal(got["frames"][1], pil_frames(windows.frames(len(windows) - 1)))


def test_short_videos(tree):
    root, paths = tree
    decode = packread.ImageDecode(16)  # the tree's frames differ in size between videos
    # v_d has 3 frames: a clip of 5 repeats its last.
    r = packread.ClipReader(root, 5, sampling="uniform", decode=decode)
    short = next(i for i, name in enumerate(r.names()) if name.endswith("v_d"))
    assert r.frames(short) == paths["jump/v_d"] + [paths["jump/v_d"][-1]] * 2
    skip = packread.ClipReader(root, 5, sampling="uniform", decode=decode, short="skip")
    assert len(skip) == len(r) - 1
    assert not any(n.endswith("v_d") for n in skip.names())
    assert skip.batch(range(len(skip)))["frames"].shape == (len(skip), 5, 16, 16, 3)
    with pytest.raises(packread.InvalidArgumentError, match=r"v_d.*fewer than a clip spans"):
        packread.ClipReader(root, 5, decode=decode, short="error")
    with pytest.raises(packread.InvalidArgumentError, match="short must be"):
        packread.ClipReader(root, 5, short="pad")


def test_frames_at_their_own_size_must_match(tree):
    root, _ = tree
    # Without a size, every frame must be the first video's size: another is refused when read.
    r = packread.ClipReader(root, 2, sampling="uniform")
    assert r.shape["frames"] == (2, 48, 64, 3)
    first_other = next(i for i, n in enumerate(r.names()) if n.endswith("v_c"))
    r.batch([0])
    with pytest.raises(
        packread.InconsistentError, match=r"a frame of 56x40 pixels in a clip of 64x48"
    ):
        r.batch([first_other])


def test_a_list_file_orders_and_labels(same_size_tree, tmp_path):
    root, paths = same_size_tree
    lines = [("pour/vid2", 17, 4), ("open/vid0", 6, 1), ("pour/vid0", 7, 4)]
    listing = tmp_path / "train_list.txt"
    listing.write_text("".join(f"{p} {n} {lab}\n" for p, n, lab in lines))
    r = packread.ClipReader(root, 3, videos=listing, sampling="uniform")
    assert [n[len(root) + 1 :] for n in r.names()] == [p for p, _, _ in lines]
    assert r.labels.tolist() == [4, 1, 4]
    assert r.label_source == str(listing)
    assert r.frames(1)[0] == paths["open/vid0"][2]
    bad = tmp_path / "bad.txt"
    bad.write_text("open/vid0 6 1\nopen/nothere 5 0\n")
    with pytest.raises(packread.errors.PackreadFileNotFoundError, match=r"nothere.*line 2"):
        packread.ClipReader(root, 3, videos=bad)
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("open/vid0 9 1\n")
    with pytest.raises(packread.InconsistentError, match=r"says 9 frames.*holds 6"):
        packread.ClipReader(root, 3, videos=wrong)
    garbled = tmp_path / "garbled.txt"
    garbled.write_text("open/vid0 six 1\n")
    with pytest.raises(packread.InvalidArgumentError, match=r"garbled.txt:1"):
        packread.ClipReader(root, 3, videos=garbled)


def test_a_zip_of_the_tree_reads_as_the_tree(tree, tmp_path):
    root, _ = tree
    decode = packread.ImageDecode(20, crop="random", flip=True)
    kw = {"sampling": "random", "frame_step": 2, "decode": decode, "augment_seed": 5}
    on_disk = packread.ClipReader(root, 4, **kw)
    path = zip_tree(root, str(tmp_path / "tree.zip"))
    zipped = packread.ClipReader(path, 4, **kw)
    assert len(zipped) == len(on_disk)
    assert zipped.classes == on_disk.classes
    assert [n.split(":")[-1] for n in zipped.names()] == [
        os.path.relpath(n, root) for n in on_disk.names()
    ]
    for epoch in (0, 3):
        a = zipped.batch(range(len(zipped)), epoch=epoch)
        b = on_disk.batch(range(len(on_disk)), epoch=epoch)
        assert np.array_equal(a["frames"], b["frames"])
        assert np.array_equal(a["labels"], b["labels"])
    with open(path, "rb") as f:
        raw = f.read()
    for source in (raw, io.BytesIO(raw), bytearray(raw)):
        assert np.array_equal(
            packread.ClipReader(source, 4, **kw).batch([2], epoch=1)["frames"],
            zipped.batch([2], epoch=1)["frames"],
        )
    opened = packread.open(path, clip_len=4, **kw)
    assert isinstance(opened, packread.ClipReader)
    # Within a folder of the archive, and with the ZIP's own folders.
    inner = zip_tree(root, str(tmp_path / "nested.zip"), prefix="data/frames/")
    assert np.array_equal(
        packread.ClipReader(inner, 4, **kw).batch([1])["frames"], zipped.batch([1])["frames"]
    )


def test_shards_read_as_one(same_size_tree, tmp_path):
    root, paths = same_size_tree
    whole = packread.ClipReader(root, 3, sampling="uniform", clips_per_video=2)
    parts = []
    for k, videos in enumerate(
        (["open/vid0", "pour/vid0"], ["open/vid1", "open/vid2", "pour/vid1", "pour/vid2"])
    ):
        p = str(tmp_path / f"part{k}.zip")
        with zipfile.ZipFile(p, "w") as z:
            for v in videos:
                for f in paths[v]:
                    z.write(f, os.path.relpath(f, root))
        parts.append(p)
    sharded = packread.ClipReader(parts, 3, sampling="uniform", clips_per_video=2)
    assert len(sharded) == len(whole)
    assert sharded.classes == ["open", "pour"]
    order = [0, 1, 6, 7, 2, 3, 4, 5, 8, 9, 10, 11]
    a, b = sharded.batch(range(len(sharded))), whole.batch(order)
    assert np.array_equal(a["frames"], b["frames"])
    assert np.array_equal(a["labels"], b["labels"])
    again = pickle.loads(pickle.dumps(sharded))
    assert np.array_equal(again.batch([5])["frames"], a["frames"][5:6])


def test_pickles_and_closes(same_size_tree):
    root, _ = same_size_tree
    r = packread.ClipReader(root, 3, frame_step=2, augment_seed=9)
    again = pickle.loads(pickle.dumps(r))
    assert np.array_equal(
        again.batch([0, 3], epoch=2)["frames"], r.batch([0, 3], epoch=2)["frames"]
    )
    out = np.empty((2, 3, 40, 52, 3), np.uint8)
    got = r.batch([1, 2], out={"frames": out})
    assert got["frames"] is out
    pending = r.batch_async([4], epoch=1)
    assert np.array_equal(pending.result()["frames"], r.batch([4], epoch=1)["frames"])
    r.close()
    with pytest.raises(packread.ReaderClosedError):
        r.batch([0])


# -- damaged and odd inputs ----------------------------------------------------------------


@pytest.fixture
def small(tmp_path) -> str:
    """Two videos of five 32x40 frames in ``root/<video>/``."""
    root = str(tmp_path / "small")
    for v in range(2):
        write_video(os.path.join(root, f"v{v}"), pan(PHOTOS[v], 5, (32, 40)))
    return root


def test_a_frame_missing_from_the_middle_is_refused(small):
    os.remove(os.path.join(small, "v1", "img_00003.jpg"))
    with pytest.raises(
        packread.InconsistentError, match=r"img_00002.jpg is followed by img_00004.jpg"
    ):
        packread.ClipReader(small, 2)


def test_frames_of_different_sizes_in_one_video(small):
    frame = pan(PHOTOS[3], 1, (36, 40))[0]
    with open(os.path.join(small, "v1", "img_00004.jpg"), "wb") as f:
        Image.fromarray(frame).save(f, "JPEG")
    r = packread.ClipReader(small, 5, sampling="uniform", decode=packread.ImageDecode(16))
    r.batch([0])
    with pytest.raises(packread.InconsistentError, match=r"40x36.*one size"):
        r.batch([1])
    skip = packread.ClipReader(
        small, 5, sampling="uniform", decode=packread.ImageDecode(16), on_error="skip"
    )
    with pytest.warns(RuntimeWarning, match=r"1 clip\(s\) did not decode"):
        got = skip.batch([1, 0])
    assert np.array_equal(got[0], got[1])  # replaced by the next clip that decodes
    assert list(skip.errors) == [1]


def test_an_empty_video_folder(small):
    os.makedirs(os.path.join(small, "v2"))
    with pytest.raises(packread.InvalidArgumentError, match=r"v2.*without frames"):
        packread.ClipReader(small, 2)
    assert len(packread.ClipReader(small, 2, short="skip")) == 2


def test_a_corrupt_frame(small):
    bad = os.path.join(small, "v0", "img_00002.jpg")
    with open(bad, "rb") as f:
        data = f.read()
    with open(bad, "wb") as f:
        f.write(b"GIF89a" + data[6:])  # not a JPEG, PNG or WebP
    r = packread.ClipReader(small, 5, sampling="uniform")
    with pytest.raises(packread.DecodeError, match=r"img_00002.jpg"):
        r.batch([0])
    assert r.batch([1]).shape == (1, 5, 32, 40, 3)
    with open(bad, "wb") as f:
        f.write(data[: len(data) // 3])  # truncated
    skip = packread.ClipReader(small, 5, sampling="uniform", on_error="skip")
    with pytest.warns(RuntimeWarning, match="clip"):
        got = skip.batch([0, 1])
    assert np.array_equal(got[0], got[1])
    assert 0 in skip.errors


def test_bad_options():
    for kw, match in [
        ({"clip_len": 0}, "clip_len"),
        ({"clip_len": 2, "frame_step": 0}, "frame_step"),
        ({"clip_len": 2, "sampling": "dense"}, "sampling"),
        ({"clip_len": 2, "sampling": "segments", "frame_step": 2}, "frame_step"),
        ({"clip_len": 2, "on_error": "ignore"}, "on_error"),
    ]:
        with pytest.raises(packread.InvalidArgumentError, match=match):
            packread.ClipReader(".", **kw)


# -- HDF5 ----------------------------------------------------------------------------------


def seed_frames(n: int, t: int, size: int = 46) -> np.ndarray:
    """``(n, t, size, size)`` grey uint8 sequences: panned crops of the photos, as the
    spatiotemporal seed stores its datapoints."""
    out = np.empty((n, t, size, size), np.uint8)
    for i in range(n):
        frames = pan(PHOTOS[i % len(PHOTOS)], t, (size, size), at=3 * i)
        out[i] = np.stack([np.asarray(Image.fromarray(f).convert("L")) for f in frames])
    return out


@pytest.mark.parametrize(
    "layout",
    [
        {"chunks": (1, 10, 46, 46), "compression": "lzf"},  # one datapoint a chunk (the seed's)
        {"chunks": (1, 5, 46, 46), "compression": "gzip", "shuffle": True},  # frames cut evenly
        {"chunks": (3, 4, 23, 46), "compression": "gzip"},  # auto-chunking's kind: staged
        {},  # contiguous
    ],
    ids=["row-chunks", "frame-chunks", "odd-chunks", "contiguous"],
)
def test_hdf5_sequences_equal_h5py(tmp_path, layout):
    data = seed_frames(7, 10)
    path = str(tmp_path / "seq.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=data, **layout)
        f["label"] = np.arange(7, dtype=np.int32) % 3
    whole = packread.ClipReader(
        path, 10, sampling="uniform", arrays=["data", "labels"], labels="label"
    )
    got = whole.batch([3, 0, 6])
    assert np.array_equal(got["data"], data[[3, 0, 6]])
    assert got["labels"].tolist() == [0, 0, 0]
    r = packread.ClipReader(path, 4, frame_step=2, sampling="windows", stride=3, labels="label")
    with h5py.File(path) as f:
        d = f["data"]
        i = 0
        for n in range(7):
            for start in range(0, 10 - 7 + 1, 3):
                assert np.array_equal(r.batch([i])["data"][0], d[n, start : start + 7 : 2])
                i += 1
        assert len(r) == i
    epoch = r.batch(range(len(r)), epoch=2)
    assert epoch["data"].shape == (len(r), 4, 46, 46)


def write_episodes(path: str, lengths: list[int], ends: bool = True) -> dict[str, np.ndarray]:
    total = sum(lengths)
    rng = np.random.default_rng(4)
    obs = rng.standard_normal((total, 6, 5)).astype(np.float32)
    action = np.arange(total * 2, dtype=np.int64).reshape(total, 2)
    with h5py.File(path, "w") as f:
        f.create_dataset("obs", data=obs, chunks=(1, 6, 5), compression="gzip")
        f.create_dataset("action", data=action, chunks=(16, 2), compression="lzf")
        f["episode_ends" if ends else "episode_lengths"] = (
            np.cumsum(lengths) if ends else np.array(lengths)
        )
        f["task"] = np.arange(len(lengths), dtype=np.int16) * 10
    return {"obs": obs, "action": action}


def test_windows_of_a_time_axis_never_cross_an_episode(tmp_path):
    lengths = [9, 5, 17, 6]
    path = str(tmp_path / "episodes.h5")
    data = write_episodes(path, lengths)
    firsts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    r = packread.ClipReader(path, 5, sampling="windows", episodes="episode_ends", labels="task")
    assert r.keys() == ["action", "obs", "labels"]  # the file's order (h5py's: by name)
    want = [(e, s) for e, n in enumerate(lengths) for s in range(n - 5 + 1)]
    assert len(r) == len(want)
    rng = np.random.default_rng(0)
    for _ in range(3):
        idx = rng.integers(0, len(r), 11)
        got = r.batch(idx)
        for k, i in enumerate(idx):
            e, s = want[i]
            at = firsts[e] + s
            assert np.array_equal(got["obs"][k], data["obs"][at : at + 5])
            assert np.array_equal(got["action"][k], data["action"][at : at + 5])
            assert got["labels"][k] == 10 * e
    # The same episodes given as lengths, in a list.
    by_list = packread.ClipReader(path, 5, sampling="windows", episodes=lengths, arrays="obs")
    assert np.array_equal(by_list.batch(range(len(by_list))), r.batch(range(len(r)))["obs"])
    # Random clips, one per episode, stay inside it.
    rand = packread.ClipReader(path, 3, frame_step=2, episodes="episode_ends", arrays="action")
    for epoch in range(4):
        got = rand.batch(range(4), epoch=epoch)
        for e in range(4):
            first = int(got[e, 0, 0]) // 2
            assert firsts[e] <= first
            assert first + 4 < firsts[e] + lengths[e]
            assert np.array_equal(got[e], data["action"][first : first + 5 : 2])


def test_per_dataset_offsets(tmp_path):
    lengths = [8, 12]
    path = str(tmp_path / "episodes.h5")
    data = write_episodes(path, lengths)
    r = packread.ClipReader(
        path,
        1,
        sampling="windows",
        episodes="episode_ends",
        offsets={"obs": [-2, -1, 0], "action": [0, 1, 2]},
    )
    assert r.shape == {"obs": (3, 6, 5), "action": (3, 2)}
    # An anchor a at least 2 frames into an episode and 2 before its end.
    anchors = [f + a for f, n in zip((0, 8), lengths, strict=True) for a in range(2, n - 2)]
    assert len(r) == len(anchors)
    got = r.batch(range(len(r)))
    for k, a in enumerate(anchors):
        assert np.array_equal(got["obs"][k], data["obs"][a - 2 : a + 1])
        assert np.array_equal(got["action"][k], data["action"][a : a + 3])
    with pytest.raises(packread.MissingKeyError, match="state"):
        packread.ClipReader(path, 1, episodes="episode_ends", offsets={"state": [0]})


@pytest.mark.parametrize(
    ("ends", "match"),
    [
        ([5, 3, 20], "must increase"),
        ([5, 12, 30], "past the data"),
        ([5, 12], "before the data"),
    ],
)
def test_bad_episodes(tmp_path, ends, match):
    path = str(tmp_path / "bad.h5")
    with h5py.File(path, "w") as f:
        f["x"] = np.zeros((20, 3), np.float32)
        f["ends"] = np.array(ends)
    with pytest.raises(packread.InvalidArgumentError, match=match):
        packread.ClipReader(path, 2, episodes="ends", arrays="x")
    with pytest.raises(packread.InvalidArgumentError, match=match):
        packread.ClipReader(path, 2, episodes=ends, arrays="x")


def test_hdf5_without_frames_along_a_second_axis(tmp_path):
    path = str(tmp_path / "flat.h5")
    with h5py.File(path, "w") as f:
        f["x"] = np.zeros(20, np.float32)
    with pytest.raises(packread.InvalidArgumentError, match="episodes="):
        packread.ClipReader(path, 2)


def test_open_dispatches_on_clip_len(tree, tmp_path):
    root, _ = tree
    assert isinstance(packread.open(root), packread.ImageReader)  # an ImageFolder tree
    assert isinstance(
        packread.open(root, clip_len=2, decode=packread.ImageDecode(8)), packread.ClipReader
    )
    shutil.rmtree(str(tmp_path), ignore_errors=True)


# -- inspect and convert -------------------------------------------------------------------


def test_inspect_reports_videos_frames_and_sizes(tree, tmp_path):
    from packread.cli.inspect import inspect

    root, paths = tree
    report = inspect(root, clips=True)
    assert report.format == "frame-folder"
    c = report.clips
    counts = sorted(len(v) for v in paths.values())
    assert c.videos == len(paths)
    assert c.frames == sum(counts)
    assert c.frames_per_video == {
        "min": counts[0],
        "median": int(np.median(counts)),
        "max": counts[-1],
    }
    assert c.width == {"min": 56, "median": 64, "max": 70}
    assert c.formats == {"JPEG": 21, "PNG": 3}  # three frames a video, one video of PNGs
    assert c.classes == 3
    assert c.per_class == {"climb": 3, "jump": 2, "walk": 3}
    assert "frame-sizes" in [a.code for a in report.advice]
    text = report.render()
    assert f"{sum(counts):,} frames in 8 videos" in text
    assert "frames per video: min 3" in text
    # A video of frames of two sizes is named.
    odd = os.path.join(root, "..", "odd")
    shutil.copytree(root, odd)
    last = sorted(os.listdir(os.path.join(odd, "jump", "v_e")), key=natural)[-1]
    with open(os.path.join(odd, "jump", "v_e", last), "wb") as f:
        Image.fromarray(pan(PHOTOS[0], 1, (20, 20))[0]).save(f, "JPEG")
    codes = {a.code: a for a in inspect(odd, clips=True).advice}
    assert "jump/v_e" in codes["mixed-frame-sizes"].message


def test_inspect_says_whether_hdf5_chunks_fit_a_clip(tmp_path):
    from packread.cli.inspect import inspect

    data = seed_frames(6, 8, 16)
    good, auto = str(tmp_path / "good.h5"), str(tmp_path / "auto.h5")
    with h5py.File(good, "w") as f:
        f.create_dataset("data", data=data, chunks=(1, 8, 16, 16), compression="lzf")
    with h5py.File(auto, "w") as f:
        f.create_dataset("data", data=data, chunks=(3, 4, 16, 16), compression="lzf")
    assert "clip-chunks" not in [a.code for a in inspect(good, clips=True).advice]
    advice = {a.code: a for a in inspect(auto, clips=True).advice}
    assert "a chunk holds 3 rows" in advice["clip-chunks"].message
    assert "chunks=(1, 8, 16, 16)" in advice["clip-chunks"].message


def test_convert_packs_a_frame_tree_into_a_zip_clips_read(same_size_tree, tmp_path):
    from packread.cli.convert import convert

    root, _ = same_size_tree
    dst = str(tmp_path / "frames.zip")
    result = convert(root, dst, progress=False, verify=True)
    assert result.samples == sum(len(v) for v in same_size_tree[1].values())
    kw = {"frame_step": 2, "decode": packread.ImageDecode(16, crop="random"), "augment_seed": 2}
    a = packread.ClipReader(dst, 3, **kw).batch(range(6), epoch=4)
    b = packread.ClipReader(root, 3, **kw).batch(range(6), epoch=4)
    assert np.array_equal(a["frames"], b["frames"])
    assert np.array_equal(a["labels"], b["labels"])


# -- torch -----------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_pack_dataset_yields_each_epochs_own_clips(same_size_tree, workers):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from packread.torch import PackDataset, PackMapDataset

    root, _ = same_size_tree
    decode = packread.ImageDecode(16, crop="random", flip=True)
    reader = packread.ClipReader(root, 3, frame_step=2, decode=decode, augment_seed=4)
    ds = PackDataset(reader, 2, seed=1)
    loader = DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=workers > 0)
    seen = {}
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        order = ds.rank_indices(epoch)
        batches = list(loader)
        assert len(batches) == len(ds)
        for j, batch in enumerate(batches):
            idx = order[j * 2 : (j + 1) * 2]
            assert set(batch) == {"frames", "labels"}
            want = reader.batch(idx, epoch=epoch)
            assert np.array_equal(batch["frames"].numpy(), want["frames"])
            assert batch["labels"].tolist() == want["labels"].tolist()
            for k, i in enumerate(idx.tolist()):
                seen.setdefault(i, []).append(batch["frames"][k])
    # A clip (its start, crop and flip) changes from one epoch to the next.
    assert any(not torch.equal(a, b) for a, b in seen.values())
    m = PackMapDataset(reader)
    m.set_epoch(1)
    one = m[3]
    assert np.array_equal(one["frames"].numpy(), reader.batch([3], epoch=1)["frames"][0])


def test_grey_frames_like_the_seeds(tmp_path):
    """184x184 grey JPEG frames (the spatiotemporal seed's), read whole in mode L."""
    root = tmp_path / "seed"
    for v in range(2):
        frames = [
            np.asarray(Image.fromarray(f).convert("L")) for f in pan(PHOTOS[v], 6, (184, 184), at=v)
        ]
        folder = root / f"dp_{v:04d}"
        folder.mkdir(parents=True)
        for t, f in enumerate(frames):
            Image.fromarray(f).save(folder / f"img_{t + 1:05d}.jpg")
    r = packread.ClipReader(str(root), 6, sampling="uniform", decode=packread.ImageDecode(mode="L"))
    got = r.batch([1, 0])
    assert got.shape == (2, 6, 184, 184, 1)
    for k, i in enumerate([1, 0]):
        assert np.array_equal(got[k], pil_frames(r.frames(i), "L"))
    # Flipped whole frames: the same pixels mirrored.
    flip = packread.ClipReader(
        str(root),
        6,
        sampling="uniform",
        decode=packread.ImageDecode(mode="L", flip=True),
        augment_seed=1,
    )
    flipped = [flip.batch([0], epoch=e)[0] for e in range(8)]
    plain = r.batch([0])[0]
    assert any(np.array_equal(f, plain[:, :, ::-1]) for f in flipped)
    assert any(np.array_equal(f, plain) for f in flipped)


def test_an_empty_video_folder_in_a_zip(small, tmp_path):
    path = str(tmp_path / "small.zip")
    zip_tree(small, path)
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("v0/", b"")  # a folder's own entry, beside its frames
        z.writestr("v2/", b"")  # an empty video
    with pytest.raises(packread.InvalidArgumentError, match=r"v2.*without frames"):
        packread.ClipReader(path, 2)
    r = packread.ClipReader(path, 2, short="skip")
    assert len(r) == 2
    assert [n.split(":")[-1] for n in r.names()] == ["v0", "v1"]
