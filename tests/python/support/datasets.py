"""A map-style torch Dataset over any packread reader, in a module of its own so that spawn and
forkserver workers can import it (the reader inside pickles by path)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch.utils.data


def native(arr: np.ndarray) -> np.ndarray:
    """The array in native byte order (torch refuses others), values unchanged."""
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))


class ReaderDataset(torch.utils.data.Dataset):
    """Item ``i`` is sample ``i`` of the reader: an array, or a dict of arrays for readers of
    several arrays (HDF5 datasets, NPZ keys), in native byte order."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, i: int) -> Any:
        got = self.reader.batch([i])
        if isinstance(got, dict):
            return {k: native(v[0]) for k, v in got.items()}
        return native(got[0])
