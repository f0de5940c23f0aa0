"""The whole-file fuzzer (fuzz/files/fuzz_files.py, run by `make fuzz`) keeps working: a short
deterministic run writes its seeds, reads every one unmutated equal to the reference readers,
runs mutated inputs of every format through packread and the references, and says so."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ("hdf5", "pytables", "zip", "npz", "npy", "images")


def run_fuzzer(*args: str) -> str:
    """What ``fuzz/files/fuzz_files.py ARGS`` prints, after checking that it exits 0."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / "files" / "fuzz_files.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    return out


def test_fuzz_files_short_run(tmp_path):
    out = run_fuzzer(
        "--runs", "40", "--seed", "1", "--seconds", "120", "--out", str(tmp_path / "artifacts")
    )
    assert "files: no failures" in out
    assert re.search(r"^files: Done 40 runs in \d+ second\(s\)$", out, re.M), out
    # Every seed read unmutated, equal to its reference.
    seeds = re.search(r"^files: \d+ seed files, read unmutated first .*: \{'ok': \d+\}$", out, re.M)
    assert seeds, out
    for fmt in FORMATS:
        row = re.search(rf"^  {fmt} +(\d+) ", out, re.M)
        assert row, out
        assert int(row.group(1)) > 0, row.group(0)


# Inputs the file fuzzer found, kept as regression files (with the plan of the run that found
# them, in a .json beside some), with the verdict each must keep: "ok" (packread's data equals
# the reference's), "both-refused", "packread-refused" (packread refuses what the reference
# reads differently), "reference-defect".
DAMAGED = {
    # A deflated .npy member whose stream ends inside its NPY header: the header read looped
    # forever.
    "npz_header_past_deflate_end.npz": "both-refused",
    # A v1 B-tree key whose last (element) coordinate is not 0: libhdf5's lookup misses the
    # chunk, so h5py reads the fill value; packread read the chunk.
    "btree_key_trailing_offset.h5": "ok",
    # A blosc 1.x stream whose size was made 0: decoded as zeros by blosc2's rules.
    "blosc1_stream_size_zero.h5": "both-refused",
    # A blosc2 chunk whose shuffle parameter byte was damaged to 8: PyTables' c-blosc2 2.23
    # unshuffles in 8-byte groups (its newer meaning of that byte), packread's 2.15 ignored it
    # and returned other bytes; now refused as a shuffle it cannot undo.
    "blosc2_shuffle_group_size.h5": "packread-refused",
    # A damaged B-tree hides a chunk from libhdf5's lookup: h5py and packread read the fill
    # value, PyTables (iterating the chunk index) the chunk.
    "pytables_chunk_beyond_btree_lookup.h5": "reference-defect",
}


def test_damaged_files_the_fuzzer_found_keep_their_verdicts():
    folder = ROOT / "tests" / "fixtures" / "damaged"
    out = run_fuzzer("--replay", *(str(folder / name) for name in DAMAGED))
    verdicts = dict(re.findall(r"^\S*/([^/\s]+): \w+, plan.*?^  => ([\w-]+):", out, re.M | re.S))
    assert verdicts == DAMAGED, out
