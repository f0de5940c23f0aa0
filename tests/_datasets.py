"""Map-style torch Datasets over an NpyReader and an HDF5Reader; a module of their own so that
spawn workers can import them (the readers inside pickle by path)."""

from __future__ import annotations

import numpy as np
import torch.utils.data

import packread


class NpyDataset(torch.utils.data.Dataset):
    def __init__(self, reader: packread.NpyReader) -> None:
        self.reader = reader

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.reader.batch([i])[0]


class HDF5SampleDataset(torch.utils.data.Dataset):
    """One sample per item from an HDF5Reader: an array (one dataset) or a dict of arrays."""

    def __init__(self, reader: packread.HDF5Reader) -> None:
        self.reader = reader

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, i: int):
        got = self.reader.batch([i])
        if isinstance(got, dict):
            return {k: v[0] for k, v in got.items()}
        return got[0]
