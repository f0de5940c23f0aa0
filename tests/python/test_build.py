"""The build's own steps (the Makefile), where a mistake shows only on another machine or in
another clone: checked with `make -n`, which prints the commands without running them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def wheel_target_dir(checkout: str, cargo_target_dir: str) -> str:
    """The CARGO_TARGET_DIR `make wheel` would build the wheel in, for a clone at `checkout`."""
    env = {**os.environ, "CARGO_TARGET_DIR": cargo_target_dir}
    printed = subprocess.run(
        ["make", "--no-print-directory", "-n", "wheel", f"CURDIR={checkout}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r'CARGO_TARGET_DIR="([^"]+)" maturin build', printed)
    assert found, printed
    # The recipe leaves the shell to expand ${CARGO_TARGET_DIR:-...}; expand it the same way.
    return subprocess.run(
        ["bash", "-c", f'echo "{found.group(1)}"'],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_wheel_target_dir_is_one_per_checkout():
    # CMake caches the zig compiler wrapper, which runs the configuring clone's own maturin: two
    # clones sharing CARGO_TARGET_DIR (as .ci/run shares it) must not share the wheel's builds,
    # or the second fails once the first is deleted. Stop 27's CI failed so.
    shared = "/cache/target"
    one = wheel_target_dir("/tmp/clone-a", shared)
    two = wheel_target_dir("/check/work/main", shared)
    assert one != two
    # Below the shared directory (so it is cached), apart from `develop`'s gcc builds.
    for got in (one, two):
        assert got.startswith(shared + "/manylinux2014-"), got
    # The same clone gets the same directory each time, so its builds are reused.
    assert wheel_target_dir("/tmp/clone-a", shared) == one
