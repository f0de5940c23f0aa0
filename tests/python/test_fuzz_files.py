"""The whole-file fuzzer (fuzz/files/fuzz_files.py, run by `make fuzz`) keeps working: a short
deterministic run writes its seeds, reads every one unmutated equal to the reference readers,
runs mutated inputs of every format through packread and the references, and says so."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ("hdf5", "pytables", "zip", "npz", "npy")


def test_fuzz_files_short_run(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "fuzz" / "files" / "fuzz_files.py"),
            "--runs",
            "40",
            "--seed",
            "1",
            "--seconds",
            "120",
            "--out",
            str(tmp_path / "artifacts"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    assert "files: no failures" in out
    assert re.search(r"^files: Done 40 runs in \d+ second\(s\)$", out, re.M), out
    # Every seed read unmutated, equal to its reference.
    seeds = re.search(r"^files: \d+ seed files, read unmutated first .*: \{'ok': \d+\}$", out, re.M)
    assert seeds, out
    for fmt in FORMATS:
        row = re.search(rf"^  {fmt} +(\d+) ", out, re.M)
        assert row, out
        assert int(row.group(1)) > 0, row.group(0)


# Inputs the file fuzzer found, kept as regression files, with the verdict each must keep:
# "ok" (packread's data equals the reference's), "both-refused".
DAMAGED = {
    # A deflated .npy member whose stream ends inside its NPY header: the header read looped
    # forever.
    "npz_header_past_deflate_end.npz": "both-refused",
    # A v1 B-tree key whose last (element) coordinate is not 0: libhdf5's lookup misses the
    # chunk, so h5py reads the fill value; packread read the chunk.
    "btree_key_trailing_offset.h5": "ok",
    # A blosc 1.x stream whose size was made 0: decoded as zeros by blosc2's rules.
    "blosc1_stream_size_zero.h5": "both-refused",
}


def test_damaged_files_the_fuzzer_found_keep_their_verdicts():
    folder = ROOT / "tests" / "fixtures" / "damaged"
    paths = [str(folder / name) for name in DAMAGED]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / "files" / "fuzz_files.py"), "--replay", *paths],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    verdicts = dict(re.findall(r"^\S*/([^/\s]+): \w+, plan.*?^  => ([\w-]+):", out, re.M | re.S))
    assert verdicts == DAMAGED, out
