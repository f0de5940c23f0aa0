"""The ``packread`` command: ``inspect``, ``convert`` and ``bench`` (also ``python -m packread``).

Each command is a function of its own module, usable from Python too:
:func:`packread.cli.inspect.inspect`, :func:`packread.cli.convert.convert` and
:func:`packread.cli.bench.bench`.

>>> main(["inspect", "train.h5", "--json"])  # doctest: +ELLIPSIS
{
  "path": "train.h5",
...
0
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from .._packread import __version__
from ..errors import PackreadError

__all__ = ["main"]

_DESCRIPTION = """\
Why is my loader slow, and what do I change? packread answers on your own files:

  packread inspect SOURCE       what SOURCE holds, its layout, and advice with the numbers
  packread convert SOURCE DST   rewrite it in the layout random sample reads want
  packread bench SOURCE         packread against the plain h5py/numpy/zipfile loop on SOURCE

SOURCE is an HDF5 file (h5py or PyTables), a ZIP archive, an NPZ or NPY file, a folder of
.npy or .npz files, or images: an ImageFolder tree (a folder of class folders) or a ZIP of
images. Run `packread COMMAND --help` for each command's options.
"""

_INSPECT = """\
Prints a tree of the datasets (HDF5), members (ZIP) or arrays (NPZ, NPY folders) with dtype,
sample shape, chunk shape, filters, compression ratio and size on disk, then advice where
the layout will cost training reads, each with its reason in numbers and a command that
fixes it. Only metadata is read, so big files inspect fast.

Images (an ImageFolder tree, as a folder or in a ZIP, or a ZIP of images labelled by its
dataset.json) are counted per format (JPEG, PNG, WebP, and the ones that do not decode, by
name), CMYK and progressive JPEGs, by their shorter side (to choose resize), with the spread
of widths and heights and the images per class. Every image's header is read for that.

examples:
  packread inspect train.h5
  packread inspect data/npz/ --json | jq '.advice[].code'
  packread inspect imagenet/train/ --json | jq '.images.shorter_side'
"""

_CONVERT = """\
Conversions: HDF5 -> HDF5 (rechunked), folder of .npy or .npz -> HDF5 or uncompressed ZIP,
ZIP -> HDF5, ImageFolder tree -> uncompressed ZIP (the image files as they are, named
<class>/<file> in ImageFolder's order, and a dataset.json with the labels and classes, which
packread.ImageReader reads). The output format follows DST's suffix (.h5/.hdf5 or .zip).
SOURCE is only read; DST is written as DST.partial and renamed when complete, and an
interrupted run continues with --resume. HDF5 output needs h5py and hdf5plugin
(pip install 'packread[convert]').

codecs (each decoded natively by packread):
  none, gzip[:LEVEL], lzf, zstd[:LEVEL], lz4, blosc:{blosclz,lz4,lz4hc,zlib,zstd}[:LEVEL],
  bitshuffle:lz4, bitshuffle:zstd[:LEVEL]

examples:
  packread convert train.h5 train-1.h5 --samples-per-chunk 1 --codec lz4
  packread convert data/npz/ train.zip
  packread convert imagenet/train/ train.zip
  packread convert images.zip images.h5 --members 'img/*.raw' --dtype uint8 --shape 3 256 256
"""

_BENCH = """\
Reads random batches of SOURCE with packread and with the plain loop people write (h5py
`d[i]`, numpy.load, zipfile), then runs DataLoader passes over PackDataset and over a
map-style Dataset built on that loop, for every batch size and worker count given.
Prints samples/s per configuration and, with --chart, draws them (pip install
'packread[bench]' for matplotlib; the DataLoader passes need torch).

With --headspace, it answers instead how much faster training could run if loading were
free: the step (--step MODULE:FUNCTION, called with each batch, or --step-ms, a sleep as long
as a GPU step) is timed over DataLoader(PackDataset(SOURCE)) and over its first batches
replayed from memory, and the loader's statistics say where the time goes.

examples:
  packread bench train.h5 --batch-size 32 64 --workers 0 2 --chart bench.png
  packread bench images.zip --members 'img/*.raw' --dtype uint8 --shape 3 256 256
  packread bench train.h5 --headspace --step-ms 25 --workers 0 2
  packread bench train.h5 --headspace --step mymodel:train_step
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="packread",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"packread {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    raw = argparse.RawDescriptionHelpFormatter

    i = sub.add_parser(
        "inspect", help="layout and advice", description=_INSPECT, formatter_class=raw
    )
    i.add_argument("source", metavar="SOURCE", help="file or folder to inspect")
    i.add_argument("--json", action="store_true", help="print the report as JSON")
    i.add_argument("--ascii", action="store_true", help="draw the tree with ASCII only")
    i.add_argument(
        "--clips",
        action="store_true",
        help="inspect as clips (frame folders, a ZIP of them, HDF5 sequences): videos, "
        "frames per video, frame sizes; whether HDF5 chunks fit a clip",
    )

    c = sub.add_parser(
        "convert",
        help="rewrite into a layout for training reads",
        description=_CONVERT,
        formatter_class=raw,
    )
    c.add_argument(
        "source",
        metavar="SOURCE",
        help="HDF5 file, ZIP archive, folder of .npy/.npz, ImageFolder tree",
    )
    c.add_argument("dst", metavar="DST", help="output: .h5/.hdf5 or .zip")
    c.add_argument(
        "--samples-per-chunk",
        "-k",
        type=int,
        metavar="K",
        help="samples per HDF5 chunk (default: 1, or enough small samples to fill 4 KiB)",
    )
    c.add_argument("--codec", default="none", help="HDF5 codec (default: none; see above)")
    c.add_argument(
        "--shuffle",
        choices=("auto", "none", "byte", "bit"),
        default="auto",
        help="shuffle filter: auto = byte shuffle for items wider than one byte; bit: blosc only",
    )
    c.add_argument("--arrays", nargs="+", metavar="NAME", help="HDF5 datasets to keep")
    _renamed(c, "--datasets", nargs="+")
    c.add_argument("--members", metavar="GLOB", help="ZIP members to convert")
    c.add_argument("--dtype", help="dtype of raw ZIP members (e.g. uint8, <f4)")
    c.add_argument("--shape", type=int, nargs="+", metavar="N", help="shape of raw ZIP members")
    c.add_argument(
        "--name", default="data", help="dataset made from a .npy folder or a ZIP (default: data)"
    )
    c.add_argument("--force", action="store_true", help="replace DST if it exists")
    c.add_argument("--resume", action="store_true", help="continue an interrupted conversion")
    c.add_argument("--verify", action="store_true", help="read DST back and compare with SOURCE")
    c.add_argument(
        "--memory",
        type=int,
        default=256,
        metavar="MIB",
        help="about how much memory one block of samples takes (default: 256 MiB)",
    )
    c.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")

    b = sub.add_parser(
        "bench", help="packread against the plain loop", description=_BENCH, formatter_class=raw
    )
    b.add_argument("source", metavar="SOURCE", help="file or folder to read")
    b.add_argument(
        "--batch-size", "-b", type=int, nargs="+", default=[64], metavar="N", help="(default 64)"
    )
    b.add_argument(
        "--workers",
        "-w",
        type=int,
        nargs="+",
        default=[0, 2],
        metavar="N",
        help="DataLoader worker counts (default: 0 2)",
    )
    b.add_argument(
        "--batches", type=int, default=20, help="batches read per configuration and round"
    )
    b.add_argument("--rounds", type=int, default=3, help="rounds (median reported; default 3)")
    b.add_argument(
        "--num-threads", type=int, metavar="N", help="packread threads (default: packread's)"
    )
    _renamed(b, "--threads", type=int)
    b.add_argument("--arrays", nargs="+", metavar="NAME", help="HDF5 datasets or NPZ keys")
    _renamed(b, "--datasets", nargs="+")
    b.add_argument("--members", metavar="GLOB", help="ZIP members to read")
    b.add_argument("--dtype", help="dtype of raw ZIP members")
    b.add_argument("--shape", type=int, nargs="+", metavar="N", help="shape of raw ZIP members")
    b.add_argument("--no-loader", action="store_true", help="skip the DataLoader passes")
    b.add_argument("--chart", metavar="PNG", help="write a bar chart of samples/s")
    b.add_argument("--json", action="store_true", help="print the results as JSON")
    b.add_argument("--seed", type=int, default=0, help="seed of the random batches")
    b.add_argument(
        "--headspace",
        action="store_true",
        help="time a training step with loading and from memory (see above)",
    )
    b.add_argument(
        "--step", metavar="MODULE:FUNCTION", help="with --headspace: the step, given each batch"
    )
    b.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="with --headspace and no --step: a step that sleeps MS milliseconds",
    )
    return p


#: Flags of earlier releases -> the flag each became. The old one still works for this release,
#: with a note on stderr (docs/cli.md, the CHANGELOG); giving both is an error.
RENAMED_FLAGS = {"--datasets": "--arrays", "--threads": "--num-threads"}


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _renamed(parser: argparse.ArgumentParser, old: str, **kwargs: Any) -> None:
    """Takes the flag ``old`` of an earlier release, hidden from ``--help``."""
    parser.add_argument(old, dest=f"renamed_{_dest(old)}", help=argparse.SUPPRESS, **kwargs)


def _fold_renamed(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Moves the value of each old flag given to its new flag's, with a note on stderr."""
    for old, new in RENAMED_FLAGS.items():
        value = getattr(args, f"renamed_{_dest(old)}", None)
        if value is None:
            continue
        print(
            f"packread {args.command}: note: {old} is deprecated; use {new} "
            "(it will be removed in the next release)",
            file=sys.stderr,
        )
        if getattr(args, _dest(new)) is not None:
            parser.error(f"{old} and {new} are one option: give {new} only")
        setattr(args, _dest(new), value)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``packread`` command line with ``argv`` (default: ``sys.argv[1:]``) and returns
    its exit status: 0 on success, 1 on an error (printed), 2 on bad arguments, 130 when
    interrupted.

    >>> main(["--version"])
    Traceback (most recent call last):
    ...
    SystemExit: 0
    """
    parser = _parser()
    args = parser.parse_args(argv)
    _fold_renamed(parser, args)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "inspect":
            return _inspect(args)
        if args.command == "convert":
            return _convert(args)
        return _bench(args)
    except BrokenPipeError:  # `packread inspect ... | head`: the reader left, nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        if args.command == "convert":
            print(
                f"\ninterrupted: the samples written so far are kept in {args.dst}.partial; "
                "run the same command with --resume to continue",
                file=sys.stderr,
            )
        return 130
    except (PackreadError, OSError, ValueError, TypeError) as e:
        print(f"packread {args.command}: error: {e}", file=sys.stderr)
        return 1


def _inspect(args: argparse.Namespace) -> int:
    from .inspect import inspect

    report = inspect(args.source, clips=args.clips)
    if args.json:
        print(report.to_json())
    else:
        print(report.render(ascii_only=args.ascii or not _utf8(sys.stdout)))
    return 0


def _utf8(stream: object) -> bool:
    encoding = getattr(stream, "encoding", None) or ""
    return encoding.lower().replace("-", "") in ("utf8", "utf16", "utf32")


def _convert(args: argparse.Namespace) -> int:
    from ._format import human_bytes
    from .convert import convert

    result = convert(
        args.source,
        args.dst,
        codec=args.codec,
        samples_per_chunk=args.samples_per_chunk,
        shuffle=args.shuffle,
        name=args.name,
        force=args.force,
        resume=args.resume,
        memory_bytes=args.memory << 20,
        **_source_options(args),
        verify=args.verify,
        progress=not args.quiet,
    )
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if not args.quiet:
        what = ", ".join(
            (
                f"{n} {d['members']} in {d['classes']:,} classes, labels in {d['labels']}"
                if "classes" in d
                else f"{n} {d['dtype']} {tuple(d['sample_shape'])}"
            )
            + (f" chunks {tuple(d['chunks'])} {d['codec']}" if d.get("chunks") else "")
            for n, d in result.datasets.items()
        )
        resumed = f", resumed at sample {result.resumed_from:,}" if result.resumed_from else ""
        # A compressed tar's conversion copies members (several a sample), not arrays.
        count = f"{result.samples:,} samples ({what})" if what else f"{result.samples:,} members"
        print(
            f"{result.dst}: {count}, "
            f"{human_bytes(result.dst_bytes)}, {result.seconds:.1f} s{resumed}"
        )
        if result.copied:
            print(f"copied as they are: {', '.join(result.copied)}")
        if args.verify:
            print("verified: every sample of DST equals SOURCE")
    return 0


def _source_options(args: argparse.Namespace) -> dict[str, Any]:
    """What SOURCE holds, as ``convert``, ``bench`` and ``--headspace`` take it: the arrays,
    the members, and raw members' dtype and shape."""
    return {
        "arrays": args.arrays,
        "members": args.members,
        "dtype": args.dtype,
        "shape": tuple(args.shape) if args.shape else None,
    }


def _step(args: argparse.Namespace) -> Any:
    """The step ``--step`` names (``MODULE:FUNCTION``), or a sleep of ``--step-ms``."""
    if args.step is None:
        seconds = args.step_ms / 1e3
        return lambda batch: time.sleep(seconds) if seconds > 0 else None
    module, sep, name = args.step.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"--step takes MODULE:FUNCTION, not {args.step!r}")
    sys.path.insert(0, os.getcwd())
    try:
        func = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"--step {args.step}: {e}") from e
    if not callable(func):
        raise ValueError(f"--step {args.step} is not callable")
    return func


def _headspace(args: argparse.Namespace) -> int:
    from .bench import headspace_bench

    rows = headspace_bench(
        args.source,
        _step(args),
        batch_sizes=args.batch_size,
        workers=args.workers,
        steps=args.batches,
        seed=args.seed,
        num_threads=args.num_threads,
        log=None,
        **_source_options(args),
    )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(
            f"batch {r['batch_size']}, {r['workers']} workers: step {1e3 * r['loaded_s']:.3g} ms "
            f"with loading, {1e3 * r['replayed_s']:.3g} ms from memory: {r['speedup']:.2f}x "
            "faster if loading were free"
        )
        print(f"  {r['verdict']}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from .bench import bench

    if args.headspace:
        return _headspace(args)
    if args.step is not None or args.step_ms:
        raise ValueError("--step and --step-ms go with --headspace")

    result = bench(
        args.source,
        batch_sizes=args.batch_size,
        workers=[] if args.no_loader else args.workers,
        batches=args.batches,
        rounds=args.rounds,
        num_threads=args.num_threads,
        seed=args.seed,
        log=(lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr)),
        **_source_options(args),
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result.table())
        for note in result.notes:
            print(f"note: {note}")
    if args.chart:
        result.chart(args.chart)
        if not args.json:
            print(f"chart: {os.path.abspath(args.chart)}")
    return 0
