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


class ZipNpzDataset(torch.utils.data.Dataset):
    """Sample i: raw member i of a ZipReader (as '<f4' of ``shape``), ``.npy`` member i of
    the same archive, and file i of an NpzReader (a dict)."""

    def __init__(self, zip_reader, raw_names, npy_names, npz_reader, shape) -> None:
        self.zip = zip_reader
        self.raw_names = raw_names
        self.npy_names = npy_names
        self.npz = npz_reader
        self.shape = shape

    def __len__(self) -> int:
        return len(self.npz)

    def __getitem__(self, i: int):
        raw = self.zip.batch([self.raw_names[i]], dtype="<f4", shape=self.shape)[0]
        npy = self.zip.batch([self.npy_names[i]])[0]
        return raw, npy, self.npz[i]
