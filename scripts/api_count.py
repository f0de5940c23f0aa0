"""Counts the parameters of packread's public API: ``packread.open``, the five readers'
constructors, the torch datasets' constructors, ``load_npy`` and ``load_npz``. ``self`` and
catch-alls (``*args``, ``**options``, ``**deprecated``, ``**reader_options``) are not counted.

Prints the total number of parameters and the number of distinct names among them, then the
same with the option objects (``ImageDecode``, ``Remote``, ``Limits``) added, whose fields were
keyword arguments of the readers before the redesign. ``--list`` also prints each callable's
parameters.

    .venv/bin/python scripts/api_count.py [--list]

It imports ``packread.torch``, so torch must be installed.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from typing import Any

import packread
from packread.torch import PackDataset, PackMapDataset

#: The public entry points counted, by the name users call them by.
API: dict[str, Callable[..., Any]] = {
    "packread.open": packread.open,
    "packread.HDF5Reader": packread.HDF5Reader.__init__,
    "packread.ZipReader": packread.ZipReader.__init__,
    "packread.NpyReader": packread.NpyReader.__init__,
    "packread.NpzReader": packread.NpzReader.__init__,
    "packread.ImageReader": packread.ImageReader.__init__,
    "packread.torch.PackDataset": PackDataset.__init__,
    "packread.torch.PackMapDataset": PackMapDataset.__init__,
    "packread.load_npy": packread.load_npy,
    "packread.load_npz": packread.load_npz,
}

#: The value objects that group options.
OPTION_OBJECTS: dict[str, Callable[..., Any]] = {
    "packread.ImageDecode": packread.ImageDecode,
    "packread.Remote": packread.Remote,
    "packread.Limits": packread.Limits,
}


def parameters(func: Callable[..., Any]) -> list[str]:
    """The named parameters of ``func``, without ``self`` and catch-alls."""
    return [
        p.name
        for p in inspect.signature(func).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def count(api: dict[str, Callable[..., Any]]) -> tuple[int, int]:
    """``(parameters, distinct names)`` over ``api``."""
    names = [name for func in api.values() for name in parameters(func)]
    return len(names), len(set(names))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print each callable's parameters")
    args = parser.parse_args(argv)
    if args.list:
        for label, func in {**API, **OPTION_OBJECTS}.items():
            print(f"{label}: {', '.join(parameters(func))}")
        print()
    total, distinct = count(API)
    print(f"{total} parameters under {distinct} names")
    total, distinct = count({**API, **OPTION_OBJECTS})
    print(f"with ImageDecode, Remote and Limits: {total} parameters under {distinct} names")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
