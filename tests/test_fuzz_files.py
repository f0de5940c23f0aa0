"""The whole-file fuzzer (fuzz/files/fuzz_files.py, run by `make fuzz`) keeps working: a short
deterministic run writes its seeds, reads every one unmutated equal to the reference readers,
runs mutated inputs of every format through packread and the references, and says so."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
