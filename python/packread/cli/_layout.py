"""The chunk layout random sample reads want, shared by ``packread inspect`` (its advice) and
``packread convert`` (its default ``samples_per_chunk``).

:data:`MIN_CHUNK_BYTES` and :func:`samples_per_chunk_for` have always been public in
:mod:`packread.cli.inspect` and are documented there.
"""

from __future__ import annotations

import math

#: Chunks below this spend more on per-chunk work (a read, a decoder call, an index entry)
#: than on their bytes; chunks are best at least this large, or one whole sample.
MIN_CHUNK_BYTES = 4 << 10


def samples_per_chunk_for(sample_bytes: int) -> int:
    """Samples per chunk for random reads: one, unless a sample is smaller than
    ``MIN_CHUNK_BYTES`` (then enough to fill that).

    >>> samples_per_chunk_for(196_608), samples_per_chunk_for(8)
    (1, 512)
    """
    if sample_bytes <= 0:
        return 1
    return max(1, math.ceil(MIN_CHUNK_BYTES / sample_bytes))
