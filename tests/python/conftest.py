"""Shared fixtures: folders of ``.npy`` samples written with ``np.save``, and the shared format
matrix (``support/formats.py``) written once per module that asks for it."""

from __future__ import annotations

import numpy as np
import pytest

from support.formats import Case, write_all
from support.helpers import random_array, stack, with_order


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict[str, Case]:
    """Every case of the shared format matrix, by name (a module may extend it)."""
    return write_all(str(tmp_path_factory.mktemp("formats")))


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


def pytest_addoption(parser):
    parser.addoption(
        "--run-slow",
        action="store_true",
        help="also run the long-run tests marked slow (make py-test-slow; minutes each)",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-run test, run by `make py-test-slow` only")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="long-run test: make py-test-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
