"""`packread bench` on small files: every configuration runs and reports, the chart is a PNG
matplotlib reads back. Speeds are printed, never asserted."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile

import h5py
import matplotlib.image
import numpy as np
import pytest

import packread
from packread.cli import main
from packread.cli.bench import LoopDataset, bench, run_epoch

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def h5_file(tmp_path):
    path = tmp_path / "small.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "images",
            data=rng.integers(0, 256, (32, 3, 8, 8), dtype=np.uint8),
            chunks=(1, 3, 8, 8),
            compression="gzip",
        )
        f.create_dataset("labels", data=np.arange(32))
    return path


def test_bench_writes_a_table_and_a_png(h5_file, tmp_path, capsys):
    png = tmp_path / "chart.png"
    args = [
        "bench",
        str(h5_file),
        "-b",
        "4",
        "8",
        "-w",
        "0",
        "1",
        "--batches",
        "2",
        "--rounds",
        "1",
        "--chart",
        str(png),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "baseline: h5py d[i]" in out
    for config in ("loop", "packread batch", "DataLoader(loop Dataset)", "DataLoader(PackDataset)"):
        assert config in out
    assert png.read_bytes()[:8] == PNG_MAGIC
    pixels = matplotlib.image.imread(png)
    assert pixels.ndim == 3
    assert pixels.shape[0] > 100
    assert pixels.shape[1] > 100


def test_bench_json_rows(h5_file, capsys):
    assert (
        main(
            [
                "bench",
                str(h5_file),
                "-b",
                "8",
                "-w",
                "0",
                "--batches",
                "2",
                "--rounds",
                "2",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    rows = data["rows"]
    assert [r["config"] for r in rows] == [
        "loop",
        "packread batch",
        "DataLoader(loop Dataset)",
        "DataLoader(PackDataset)",
    ]
    for r in rows:
        assert len(r["rates"]) == 2
        assert all(x > 0 for x in r["rates"])
        assert r["samples_per_s"] == pytest.approx(float(np.median(r["rates"])))


@pytest.mark.parametrize("fmt", ["npy", "npz", "zip"])
def test_bench_other_formats(tmp_path, fmt):
    rng = np.random.default_rng(1)
    data = rng.random((20, 4, 4)).astype("<f4")
    if fmt == "zip":
        path = tmp_path / "raw.zip"
        with zipfile.ZipFile(path, "w") as z:
            for i, x in enumerate(data):
                z.writestr(f"x/{i:02d}.raw", x.tobytes())
        extra = {"members": "x/*.raw", "dtype": "<f4", "shape": (4, 4)}
    else:
        path = tmp_path / fmt
        path.mkdir()
        for i, x in enumerate(data):
            if fmt == "npy":
                np.save(path / f"{i:02d}.npy", x)
            else:
                np.savez(path / f"{i:02d}.npz", x=x, y=np.int64(i))
        extra = {}
    result = bench(path, batch_sizes=[5], workers=[0], batches=2, rounds=1, log=None, **extra)
    assert len(result.rows) == 4
    assert all(r.samples_per_s > 0 for r in result.rows)
    # The baseline loop reads what packread reads.
    loop = LoopDataset(os.fspath(path), fmt, packread.open(path, **extra))
    got = loop.batch([3, 1])
    want = data[[3, 1]]
    np.testing.assert_array_equal(got["x"] if fmt == "npz" else got, want)


@pytest.mark.parametrize("layout", ["npy", "npz"])
def test_bench_rows_of_one_array(tmp_path, layout):
    rng = np.random.default_rng(2)
    x, y = rng.random((30, 3, 4)).astype("<f4"), np.arange(30)
    if layout == "npy":
        path = tmp_path / "X.npy"
        np.save(path, x)
    else:
        path = tmp_path / "d.npz"
        np.savez(path, x=x, y=y)
    result = bench(path, batch_sizes=[5], workers=[0], batches=2, rounds=1, log=None)
    assert result.format == f"{layout} rows"
    assert len(result.rows) == 4
    assert all(r.samples_per_s > 0 for r in result.rows)
    loop = LoopDataset(os.fspath(path), result.format, packread.open(path))
    got = loop.batch([7, 2])
    if layout == "npy":
        np.testing.assert_array_equal(got, x[[7, 2]])
    else:
        np.testing.assert_array_equal(got["x"], x[[7, 2]])
        np.testing.assert_array_equal(got["y"], y[[7, 2]])


@pytest.mark.parametrize("container", ["zip", "tree"])
def test_bench_images(tmp_path, container):
    # Images of several sizes: the loop decodes with PIL (and torchvision's eval transforms),
    # packread at 224x224 centre crops; both give the same pixels, give or take rounding.
    from PIL import Image

    rng = np.random.default_rng(3)
    encoded = []
    for i in range(12):
        buf = io.BytesIO()
        pixels = rng.integers(0, 256, (240 + 3 * i, 250 - 2 * i, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(buf, "PNG")
        encoded.append(buf.getvalue())
    if container == "zip":
        path = tmp_path / "images.zip"
        with zipfile.ZipFile(path, "w") as z:
            for i, raw in enumerate(encoded):
                z.writestr(f"{i:02d}.png", raw)
    else:
        path = tmp_path / "tree"
        for i, raw in enumerate(encoded):
            (path / f"c{i % 3}").mkdir(parents=True, exist_ok=True)
            (path / f"c{i % 3}" / f"{i:02d}.png").write_bytes(raw)
    result = bench(path, batch_sizes=[4], workers=[0], batches=2, rounds=1, log=None)
    assert result.format == "images"
    assert len(result.rows) == 4
    assert all(r.samples_per_s > 0 for r in result.rows)
    reader = packread.open(path, decode=packread.ImageDecode(224), arrays="images")
    loop = LoopDataset(os.fspath(path), "images", reader)
    got, want = loop.batch([5, 0, 11]), reader.batch([5, 0, 11])
    assert got.shape == want.shape == (3, 224, 224, 3)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 2


def test_bench_of_only_variable_length_data_says_why(tmp_path):
    import h5py

    path = tmp_path / "speech.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("u", data=[np.arange(3.0), np.arange(5.0)], dtype=h5py.vlen_dtype("f8"))
    with pytest.raises(ValueError, match="every dataset holds variable-length data"):
        bench(path, batch_sizes=[2], workers=[0], batches=1, rounds=1, log=None)


def test_run_epoch_limit_and_steady_rate():
    epoch = run_epoch([np.zeros((4, 2))] * 10, limit=3)
    assert epoch.samples == 12
    assert epoch.first_samples == 4
    assert epoch.steady_rate > 0


def test_help_and_module_entry_point():
    for args in ([], ["inspect"], ["convert"], ["bench"]):
        proc = subprocess.run(
            [sys.executable, "-m", "packread", *args, "--help"], capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        assert "usage: packread" in proc.stdout
        if args:
            assert "examples:" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "packread", "--version"], capture_output=True, text=True
    )
    assert proc.stdout.startswith("packread ")
    proc = subprocess.run([sys.executable, "-m", "packread"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "inspect" in proc.stdout


def test_bench_leaves_variable_length_data_out(tmp_path):
    import tables

    path = tmp_path / "ragged.h5"
    with tables.open_file(path, "w") as f:
        f.create_carray("/", "images", obj=np.zeros((16, 2, 4), np.uint8), chunkshape=(1, 2, 4))
        tokens = f.create_vlarray("/", "tokens", tables.Int32Atom())
        for i in range(16):
            tokens.append(np.arange(i % 3, dtype=np.int32))
    result = bench(path, batch_sizes=[4], workers=[0], batches=2, rounds=1, log=None)
    assert "variable-length datasets left out: tokens" in result.notes
    assert len(result.rows) == 4


def test_old_names_still_work_with_a_note(h5_file, capsys):
    """``--datasets`` and ``--threads`` (the flags of earlier releases) are ``--arrays`` and
    ``--num-threads``, with a note on stderr; giving both spellings is an error."""
    args = ["bench", str(h5_file), "-b", "4", "--no-loader", "--batches", "1", "--rounds", "1"]
    assert main([*args, "--datasets", "images", "--threads", "2", "--json"]) == 0
    captured = capsys.readouterr()
    assert "--datasets is deprecated; use --arrays" in captured.err
    assert "--threads is deprecated; use --num-threads" in captured.err
    assert json.loads(captured.out)["rows"][0]["config"] == "loop"
    assert main([*args, "--arrays", "images", "--num-threads", "2", "--json"]) == 0
    assert "deprecated" not in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([*args, "--arrays", "images", "--datasets", "labels"])
    assert e.value.code == 2
    assert "--datasets and --arrays are one option" in capsys.readouterr().err


def test_bench_takes_the_readers_vocabulary(h5_file, tmp_path):
    result = bench(
        h5_file, batch_sizes=[4], workers=[], batches=1, rounds=1, log=None, arrays="images"
    )
    assert result.rows[0].config == "loop"
    with pytest.warns(DeprecationWarning, match=r"bench\(datasets=\) is deprecated; use arrays="):
        bench(
            h5_file, batch_sizes=[4], workers=[], batches=1, rounds=1, log=None, datasets="images"
        )
    path = tmp_path / "raw.zip"
    with zipfile.ZipFile(path, "w") as z:
        for i in range(4):
            z.writestr(f"x/{i}.raw", bytes(16))
    with pytest.warns(DeprecationWarning, match="use members="):
        result = bench(
            path, batch_sizes=[2], workers=[], batches=1, rounds=1, log=None, datasets="x/*.raw"
        )
    assert result.samples == 4
    with (
        pytest.raises(TypeError, match="both datasets= and arrays="),
        pytest.warns(DeprecationWarning, match="datasets="),
    ):
        bench(h5_file, workers=[], log=None, arrays="images", datasets="images")
    with pytest.raises(TypeError, match="did you mean 'arrays'"):
        bench(h5_file, workers=[], log=None, arrays_="images")
