"""The progress bar of ``packread convert`` (tqdm, when it is installed and wanted)."""

from __future__ import annotations

import os
import sys
from typing import Any


class _NoBar:
    """Stands in for tqdm when it is not installed or not wanted."""

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, initial: int, dst: str, show: bool) -> Any:
    if not show:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        print(
            f"converting {total:,} samples into {dst} (pip install tqdm for a progress bar)",
            file=sys.stderr,
        )
        return _NoBar()
    return tqdm(
        total=total,
        initial=initial,
        unit="sample",
        unit_scale=total >= 10_000,
        desc=os.path.basename(dst),
        file=sys.stderr,
    )
