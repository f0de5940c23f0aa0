"""ZipReader, NpzReader and load_npz across fork, DataLoader workers (fork and spawn),
pickling and threads (docs/BAD_INPUTS.md 28-32)."""

from __future__ import annotations

import io
import pathlib
import pickle
import threading
import zipfile
import zlib

import numpy as np
import pytest
from _helpers import assert_same, in_child, npy_bytes, random_array, run_threads, with_order
from _zipcraft import patch_both

import packread

TIMEOUT_S = 60
N = 16
SHAPE = (4, 8)


@pytest.fixture
def data(tmp_path):
    """An archive of N raw '<f4' members and N '.npy' members (stored and deflated), and N NPZ
    files (np.savez and np.savez_compressed); returns paths and the arrays written."""
    rng = np.random.default_rng(28)
    raws = [random_array(rng, SHAPE, "<f4") for _ in range(N)]
    npys = [
        with_order(random_array(rng, SHAPE, "<i8"), "F" if i % 4 == 0 else "C") for i in range(N)
    ]
    zpath = tmp_path / "members.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for i in range(N):
            deflated, stored = zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED
            raw_method, npy_method = (deflated, stored) if i % 2 else (stored, deflated)
            zf.writestr(f"raw/{i:02d}", raws[i].tobytes(), compress_type=raw_method)
            zf.writestr(f"npy/{i:02d}.npy", npy_bytes(npys[i]), compress_type=npy_method)
    folder = tmp_path / "npz"
    folder.mkdir()
    npz_paths = []
    for i in range(N):
        path = folder / f"{i:02d}.npz"
        (np.savez_compressed if i % 2 else np.savez)(
            path,
            img=with_order(random_array(rng, (3, 5), "<f8"), "F" if i % 3 == 0 else "C"),
            label=np.int64(i),
        )
        npz_paths.append(str(path))
    return {
        "zip": str(zpath),
        "raw_names": [f"raw/{i:02d}" for i in range(N)],
        "npy_names": [f"npy/{i:02d}.npy" for i in range(N)],
        "raws": raws,
        "npys": npys,
        "npz_paths": npz_paths,
        "npz_dir": str(folder),
    }


def npz_expected(paths, rows):
    out = {}
    for key in ("img", "label"):
        arrays = []
        for i in rows:
            with np.load(paths[i]) as f:
                arrays.append(f[key])
        out[key] = np.ascontiguousarray(np.stack(arrays))
    return out


def single_process(data):
    """Everything the workers read, read in this process."""
    z = packread.ZipReader(data["zip"])
    r = packread.NpzReader(data["npz_dir"])
    rows = list(range(N))
    return {
        "raw": z.batch(data["raw_names"], dtype="<f4", shape=SHAPE),
        "npy": z.batch(data["npy_names"]),
        "npz": r.batch(rows),
        "bytes": [z.read(n) for n in z.names()],
    }


def check_against_references(got, data):
    assert_same(got["raw"], np.stack(data["raws"]))
    assert_same(got["npy"], np.ascontiguousarray(np.stack(data["npys"])))
    want = npz_expected(data["npz_paths"], range(N))
    for key in want:
        assert_same(got["npz"][key], want[key])
    with zipfile.ZipFile(data["zip"]) as zf:
        assert got["bytes"] == [zf.read(n) for n in zf.namelist()]


def test_single_process_matches_references(data):
    check_against_references(single_process(data), data)


# --------------------------------------------------------------------------------------------
# torch DataLoader workers (28, 32)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers(data, context):
    torch = pytest.importorskip("torch")
    from _datasets import ZipNpzDataset

    z = packread.ZipReader(data["zip"])
    r = packread.NpzReader(data["npz_dir"])
    want = single_process(data)  # the parent uses the pool before the workers start
    dataset = ZipNpzDataset(z, data["raw_names"], data["npy_names"], r, SHAPE)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=3, shuffle=False, num_workers=2, multiprocessing_context=context
    )
    raws, npys, imgs, labels = [], [], [], []
    for raw, npy, sample in loader:
        raws.append(raw.numpy())
        npys.append(npy.numpy())
        imgs.append(sample["img"].numpy())
        labels.append(sample["label"].numpy())
    assert_same(np.concatenate(raws), want["raw"])
    assert_same(np.concatenate(npys), want["npy"])
    assert_same(np.concatenate(imgs), want["npz"]["img"])
    assert_same(np.concatenate(labels), want["npz"]["label"])


# --------------------------------------------------------------------------------------------
# fork (28-30)


def test_fork_child_reads_readers_opened_in_the_parent(data, tmp_path):
    z = packread.ZipReader(data["zip"])
    r = packread.NpzReader(data["npz_paths"])
    packread.set_num_threads(4)
    try:
        want = single_process(data)  # parent: pool used, local headers and files indexed
        with open(data["npz_paths"][1], "rb") as f:
            raw_npz = f.read()

        def work():
            rows = list(range(N))
            out = {
                "raw": z.batch(data["raw_names"], dtype="<f4", shape=SHAPE),
                "npy": z.batch(data["npy_names"]),
                "npz": r.batch(rows),
                "bytes": [z.read(n) for n in z.names()],
            }
            for _ in range(20):  # the child's pool works more than once
                assert z.batch(data["npy_names"][::-1]).tobytes() == out["npy"][::-1].tobytes()
            out["load_npz"] = packread.load_npz(raw_npz)
            out["load_npz_path"] = packread.load_npz(data["npz_paths"][2])
            return out

        got = in_child(work, tmp_path / "child.pkl", TIMEOUT_S)
    finally:
        packread.set_num_threads(0)
    check_against_references(got, data)
    for key in ("raw", "npy"):
        assert_same(got[key], want[key])
    for key in ("img", "label"):
        assert_same(got["npz"][key], want["npz"][key])
    for i, name in ((1, "load_npz"), (2, "load_npz_path")):
        with np.load(data["npz_paths"][i]) as f:
            for key in ("img", "label"):
                assert_same(got[name][key], f[key])


def test_fork_child_indexes_files_the_parent_never_read(data, tmp_path):
    # The NpzReader only indexed its first file in the parent; the child indexes the rest.
    r = packread.NpzReader(data["npz_paths"])
    z = packread.ZipReader(data["zip"])  # no member read yet
    got = in_child(
        lambda: (r.batch(range(N - 1, -1, -1)), z.read("npy/03.npy")), tmp_path / "c.pkl"
    )
    want = npz_expected(data["npz_paths"], range(N - 1, -1, -1))
    for key in want:
        assert_same(got[0][key], want[key])
    assert got[1] == npy_bytes(data["npys"][3])
    # ... and the parent is unaffected.
    assert_same(r.batch([5])["img"], npz_expected(data["npz_paths"], [5])["img"])


def test_fork_while_another_thread_reads(data, tmp_path):
    z = packread.ZipReader(data["zip"])
    r = packread.NpzReader(data["npz_dir"])
    want_npy = z.batch(data["npy_names"])
    want_img = r.batch(range(N))["img"]
    stop = threading.Event()
    started = threading.Event()
    errors = []

    def loop():
        try:
            while not stop.is_set():
                if z.batch(data["npy_names"]).tobytes() != want_npy.tobytes():
                    errors.append("wrong zip batch in the parent thread")
                if r.batch(range(N))["img"].tobytes() != want_img.tobytes():
                    errors.append("wrong npz batch in the parent thread")
                started.set()
        except BaseException as exc:
            errors.append(repr(exc))
            started.set()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        assert started.wait(TIMEOUT_S)
        for k in range(4):
            got = in_child(
                lambda: (z.batch(data["npy_names"]), r.batch(range(N))["img"]),
                tmp_path / f"child{k}.pkl",
                TIMEOUT_S,
            )
            assert_same(got[0], want_npy)
            assert_same(got[1], want_img)
    finally:
        stop.set()
        thread.join(TIMEOUT_S)
    assert not thread.is_alive()
    assert errors == []


# --------------------------------------------------------------------------------------------
# pickle (32)


def test_zip_reader_pickles_by_path(data):
    z = packread.ZipReader(data["zip"])
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        blob = pickle.dumps(z, protocol=protocol)
        assert len(blob) < 600
        assert data["raws"][0].tobytes()[:32] not in blob
        copy = pickle.loads(blob)
        assert isinstance(copy, packread.ZipReader)
        assert copy.path == z.path
        assert copy.names() == z.names()
        assert copy.info(3) == z.info(3)
        assert copy.read("raw/05") == z.read("raw/05")
        assert_same(copy.batch(data["npy_names"][:5]), z.batch(data["npy_names"][:5]))


def test_zip_reader_pickle_keeps_options(tmp_path):
    path = tmp_path / "crc.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("big", bytes(10_000))
        zf.writestr("small", b"abc")
    # A wrong CRC-32 for "small", in the central directory and its local header.
    path.write_bytes(patch_both(path.read_bytes(), "small", crc=zlib.crc32(b"abc") ^ 1))
    with pytest.raises(packread.BadZipError):
        packread.ZipReader(path).read("small")
    z = packread.ZipReader(path, verify_crc=False, max_member_bytes=1000)
    copy = pickle.loads(pickle.dumps(z))
    assert copy.read("small") == b"abc"
    with pytest.raises(packread.LimitExceededError):
        copy.read("big")


def test_npz_reader_pickles_by_path(data):
    r = packread.NpzReader(data["npz_paths"])
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        blob = pickle.dumps(r, protocol=protocol)
        assert len(blob) < 200 * N + 1000
        copy = pickle.loads(blob)
        assert isinstance(copy, packread.NpzReader)
        assert copy.paths == r.paths
        assert copy.keys() == r.keys()
        assert copy.shape["img"] == r.shape["img"]
        assert copy.dtype["img"] == r.dtype["img"]
        idx = [7, 0, 3, 3]
        got, want = copy.batch(idx), r.batch(idx)
        for key in want:
            assert_same(got[key], want[key])


def test_npz_reader_pickle_keeps_options(data):
    # The last file's img.npy has a wrong CRC-32.
    last = data["npz_paths"][-1]
    with open(last, "rb") as f:
        raw = f.read()
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        crc = zf.getinfo("img.npy").CRC
    with np.load(io.BytesIO(raw)) as f:
        want = np.ascontiguousarray(f["img"])
    with open(last, "wb") as f:
        f.write(patch_both(raw, "img.npy", crc=crc ^ 1))
    with pytest.raises(packread.BadZipError):
        pickle.loads(pickle.dumps(packread.NpzReader(data["npz_paths"]))).batch([N - 1])
    r = packread.NpzReader(data["npz_paths"], verify_crc=False)
    copy = pickle.loads(pickle.dumps(r))
    assert_same(copy.batch([N - 1])["img"][0], want)


# --------------------------------------------------------------------------------------------
# threads (31)


def test_threads_share_one_zip_reader_and_npz_reader(data):
    z = packread.ZipReader(data["zip"])
    r = packread.NpzReader(data["npz_dir"])
    want = single_process(data)
    members = {n: z.read(n) for n in z.names()}
    raw_npz = [pathlib.Path(p).read_bytes() for p in data["npz_paths"]]
    barrier = threading.Barrier(8)
    failures = []
    done = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            barrier.wait()
            for k in range(25):
                idx = rng.integers(-N, N, size=int(rng.integers(0, 12)))
                rows = [int(i) % N for i in idx]
                kind = k % 5
                if kind == 0:
                    names = [data["raw_names"][i] for i in rows]
                    got = z.batch(names, dtype="<f4", shape=SHAPE)
                    ok = got.tobytes() == want["raw"][rows].tobytes()
                elif kind == 1:
                    names = [data["npy_names"][i] for i in rows]
                    out = np.empty((len(rows), *SHAPE), dtype="<i8")
                    got = z.batch(names, out=out) if names else out
                    ok = got is out and out.tobytes() == want["npy"][rows].tobytes()
                elif kind == 2:
                    name = z.names()[int(rng.integers(len(z)))]
                    ok = z.read(name) == members[name]
                elif kind == 3:
                    got = r.batch(idx)
                    ok = all(got[key].tobytes() == want["npz"][key][rows].tobytes() for key in got)
                else:
                    i = int(rng.integers(N))
                    got = packread.load_npz(raw_npz[i])
                    with np.load(io.BytesIO(raw_npz[i])) as f:
                        ok = all(np.array_equal(got[key], f[key]) for key in f.files)
                if not ok:
                    failures.append((seed, k, kind, idx.tolist()))
            done.append(seed)
        except BaseException as exc:
            failures.append((seed, repr(exc)))

    run_threads(work, timeout_s=TIMEOUT_S)
    assert failures == []
    assert sorted(done) == list(range(8))


def test_threads_first_reads_race_on_lazy_indexing(data):
    # Fresh readers: local headers (ZipReader) and files (NpzReader) are indexed on first
    # use, here by 8 threads at once.
    for _ in range(3):
        z = packread.ZipReader(data["zip"])
        r = packread.NpzReader(data["npz_paths"])
        want_npy = np.ascontiguousarray(np.stack(data["npys"]))
        want_img = npz_expected(data["npz_paths"], range(N))["img"]
        barrier = threading.Barrier(8)
        results = []

        def work(z, r, barrier, results):
            barrier.wait()
            results.append((z.batch(data["npy_names"]), r.batch(range(N))["img"]))

        threads = [threading.Thread(target=work, args=(z, r, barrier, results)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT_S)
        assert len(results) == 8
        for npy, img in results:
            assert_same(npy, want_npy)
            assert_same(img, want_img)
