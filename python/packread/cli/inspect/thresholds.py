"""The numbers :func:`packread.cli.inspect.inspect` judges a layout by, and how much of a
folder or an archive it reads to judge it."""

from __future__ import annotations

#: Chunks below this are far too small: the per-chunk work dwarfs their bytes.
TINY_CHUNK_BYTES = 1 << 10
#: A sample split over chunks smaller than this pays the per-chunk work many times.
SPLIT_CHUNK_BYTES = 1 << 20
#: Compression that shrinks data by less than this factor is not worth a decode per read.
WEAK_RATIO = 1.1
#: A folder of at least this many files, averaging under ``SMALL_FILE_BYTES``, is worth
#: packing into one archive.
MANY_FILES = 1000
SMALL_FILE_BYTES = 1 << 20
#: Data below this size gets no layout advice: it reads in no time whatever its layout.
NEGLIGIBLE_BYTES = 1 << 20
#: Files of a folder whose headers are read (spread over the folder) to check they agree.
SAMPLED_FILES = 32
#: ZIP archives with more members than this are listed by pattern (folder and suffix).
LISTED_MEMBERS = 20
#: Decode speed of deflate on one core (libdeflate, from DESIGN.md's measurements).
INFLATE_BYTES_PER_S = 0.9e9
#: Buckets of an image's shorter side (pixels) in an image source's histogram: the sizes
#: ``resize`` is usually picked from (torchvision's 224 crop after a resize to 256, ...).
SHORTER_SIDE_EDGES = (64, 128, 224, 256, 384, 512, 768, 1024, 2048)
#: Undecodable images named in a report (all are counted).
LISTED_UNDECODABLE = 5
#: Threads reading the images of an image source (each image's bytes, for its header).
HEADER_THREADS = 8
