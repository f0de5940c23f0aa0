"""The ``packread convert`` commands that inspection's advice suggests."""

from __future__ import annotations

import os

from .._format import path_name


def _stem(path: str) -> str:
    """The name of the file or folder without its suffix: what the suggested output is named
    after."""
    return os.path.splitext(path_name(path))[0] or "packed"


def _fix(path: str, codec: str) -> str:
    """The conversion that gives every dataset chunks of ``samples_per_chunk_for`` samples."""
    return f"packread convert {path} {_stem(path)}-packed.h5 --codec {codec}"
