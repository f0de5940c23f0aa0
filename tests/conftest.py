"""Shared fixtures: folders of ``.npy`` samples written with ``np.save``."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

# The helper modules (`_helpers`, `_datasets`) live next to the tests.
sys.path.insert(0, os.path.dirname(__file__))

from _helpers import random_array, stack, with_order


@pytest.fixture
def make_samples(tmp_path):
    """``make(n, shape, dtype, order=, subdir=)`` writes ``n`` random samples with ``np.save``
    into ``tmp_path/subdir`` and returns their paths (as ``str``), in name order."""

    def make(
        n=16, shape=(3, 8, 8), dtype="<f4", *, order="C", subdir="samples", prefix="s", seed=0
    ):
        folder = tmp_path / subdir
        folder.mkdir(exist_ok=True)
        rng = np.random.default_rng(seed)
        paths = []
        for i in range(n):
            arr = with_order(random_array(rng, shape, dtype), order)
            path = folder / f"{prefix}{i:03d}.npy"
            np.save(path, arr)
            paths.append(str(path))
        return paths

    return make


@pytest.fixture
def samples(make_samples):
    """16 float32 samples of shape (3, 8, 8)."""
    return make_samples()


@pytest.fixture
def expected_batch():
    return stack
