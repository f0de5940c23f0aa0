"""A map-style torch Dataset over an NpyReader; a module of its own so that spawn workers can
import it (the reader inside pickles by path)."""

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
