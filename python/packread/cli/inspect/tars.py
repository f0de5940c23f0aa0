"""Tar shards in WebDataset's layout (what :class:`packread.TarReader` reads): the samples (keys),
each field with how many samples have it and its sizes, the samples that lack a field, and the
formats of a few images of each image field (their headers only). The headers are walked as a
reader's first open walks them (and kept in the index cache alike)."""

from __future__ import annotations

import os
import warnings
from collections import Counter

from ... import _packread
from ..._keyed import TarReader
from ...errors import PackreadError
from .report import Advice, Item, Report

#: Images whose headers are read per image field, spread over the samples.
SAMPLED_IMAGES = 64

#: Field extensions read as images.
IMAGE_FIELDS = ("jpg", "jpeg", "png", "webp")


def _inspect_tars(paths: list[str], shown: str) -> Report:
    """The tar shards at ``paths`` (one or many), reported as ``shown``."""
    per_field: dict[str, list[int]] = {}
    keys = 0
    first_missing: dict[str, str] = {}
    groups_by_shard = []
    for path in paths:
        groups = _packread.keyed_groups(path, True)
        groups_by_shard.append(groups)
        keys += len(groups)
        for _, fields in groups:
            for field, size in fields:
                per_field.setdefault(field, []).append(size)
    items: list[Item] = []
    advice: list[Advice] = []
    for field, sizes in sorted(per_field.items()):
        missing = keys - len(sizes)
        note = f"{len(sizes):,} members of {min(sizes):,} to {max(sizes):,} bytes"
        if missing:
            note += f"; missing in {missing:,} of {keys:,} samples"
            for shard, groups in zip(paths, groups_by_shard, strict=True):
                lacking = [k for k, fs in groups if all(f != field for f, _ in fs)]
                if lacking:
                    first_missing[field] = f"{os.path.basename(shard)}: {lacking[0]}"
                    break
        if field.rsplit(".", 1)[-1] in IMAGE_FIELDS:
            formats = _image_formats(paths, groups_by_shard, field)
            note += "; " + ", ".join(f"{n} {k}" for k, n in sorted(formats.items()))
        items.append(
            Item(
                field,
                "members",
                count=len(sizes),
                layout="stored",
                data_bytes=sum(sizes),
                stored_bytes=sum(sizes),
                samples=len(sizes),
                note=note,
            )
        )
    for field, where in first_missing.items():
        have = len(per_field[field])
        advice.append(
            Advice(
                "missing-fields",
                "note",
                shown,
                f"{keys - have:,} of {keys:,} samples have no {field!r} (first: {where}): a "
                f"reader asking for it raises MissingKeyError, or leaves them out with "
                f'on_missing="skip"',
            )
        )
    disk = sum(os.path.getsize(p) for p in paths)
    return Report(shown, "tar", disk, len(paths), keys, items, advice)


def _image_formats(
    paths: list[str], groups_by_shard: list[list[tuple[str, list[tuple[str, int]]]]], field: str
) -> Counter[str]:
    """The formats of up to :data:`SAMPLED_IMAGES` images of ``field``, spread over the shards
    and samples, from their headers (``"undecodable"`` for those that do not read)."""
    total = sum(len(g) for g in groups_by_shard)
    per_shard = max(1, SAMPLED_IMAGES // max(1, len(paths)))
    formats: Counter[str] = Counter()
    for path, groups in zip(paths, groups_by_shard, strict=True):
        having = [k for k, (_, fs) in enumerate(groups) if any(f == field for f, _ in fs)]
        if not having or total == 0:
            continue
        step = max(1, len(having) // per_shard)
        with warnings.catch_warnings():  # the samples without the field: reported already
            warnings.simplefilter("ignore", RuntimeWarning)
            reader = TarReader(
                path, fields={"x": field}, kinds={"x": "bytes"}, on_missing="skip", num_threads=1
            )
        with reader:
            positions = list(range(0, len(reader), step))[:per_shard]
            for data in reader.batch(positions)["x"]:
                try:
                    formats[_packread.image_info(data)[0]] += 1
                except PackreadError:
                    formats["undecodable"] += 1
    return formats
