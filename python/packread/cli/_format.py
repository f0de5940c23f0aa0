"""How the commands write numbers for people: sizes (``1.46 MiB``), durations, ratios
(``1.46x``), rates, shapes and the name of a path. Shared by ``packread inspect``,
``packread convert``, ``packread bench`` and the command line, so that they all say a size the
same way.

:func:`human_bytes` and :func:`human_seconds` have always been public in
:mod:`packread.cli.inspect` and are documented there.
"""

from __future__ import annotations

import os
from typing import Any


def human_bytes(n: float | None) -> str:
    """``196608`` -> ``'192 KiB'``.

    >>> human_bytes(196608), human_bytes(1536), human_bytes(12)
    ('192 KiB', '1.5 KiB', '12 B')
    """
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(n)} B"
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def human_seconds(s: float) -> str:
    """``0.000073`` -> ``'73 µs'``.

    >>> human_seconds(0.000073), human_seconds(0.25), human_seconds(95)
    ('73 µs', '250 ms', '1.6 min')
    """
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.0f} ms"
    if s < 60:
        return f"{s:.3g} s"
    if s < 3600:
        return f"{s / 60:.2g} min"
    return f"{s / 3600:.2g} h"


def human_ratio(ratio: float) -> str:
    """A factor (a compression ratio, a speed-up) with two decimals.

    >>> human_ratio(1.4567), human_ratio(12)
    ('1.46x', '12.00x')
    """
    return f"{ratio:.2f}x"


def human_rate(rate: float) -> str:
    """A rate (samples per second) in whole units with thousands separators.

    >>> human_rate(12345.6)
    '12,346'
    """
    return f"{rate:,.0f}"


def human_shape(shape: Any) -> str:
    """A shape as Python writes a tuple, whatever integer type its dimensions have.

    >>> human_shape([3, 32, 32]), human_shape((4,)), human_shape(())
    ('(3, 32, 32)', '(4,)', '()')
    """
    return "(" + ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def path_name(path: str) -> str:
    """The last part of a file's or folder's path (a trailing ``/`` ignored); empty for ``/``.

    >>> path_name("data/train/"), path_name("runs/train.h5")
    ('train', 'train.h5')
    """
    return os.path.basename(os.path.normpath(path))
