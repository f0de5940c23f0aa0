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
