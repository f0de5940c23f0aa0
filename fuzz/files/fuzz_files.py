"""Whole-file fuzzing of packread's public Python API against the reference readers.

Seeds are written at start by the real writers (h5py + hdf5plugin with every codec, PyTables
blosc/blosc2 CArrays, a Table and VLArrays, h5py variable-length data, zipfile archives,
numpy.savez/savez_compressed, np.save); each run mutates one seed (deterministically from
``--seed`` and the run number), reads it with packread as users do (``HDF5Reader`` and its
batches, ragged reads, ``ZipReader``, ``load_npz``/``NpzReader``, ``load_npy``/``NpyReader``)
in one worker process and with h5py / PyTables / zipfile / numpy in another, and compares.

A crash or a hang of packread's worker, an exception that is not a ``PackreadError``, or data
different from what the reference read without error fails the run (exit status 1); the
input is saved under ``--out`` with a replay command. Refusals where the reference read the
input are *differences*: counted, a few examples kept, not failures.

    python fuzz/files/fuzz_files.py --seconds 120
    python fuzz/files/fuzz_files.py --runs 5000 --seed 7 --formats hdf5 zip
    python fuzz/files/fuzz_files.py --replay fuzz/artifacts/files/mismatch-....h5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _compare as cmp
from _mutate import mutate
from _seeds import EXTENSIONS, FORMATS, Seed, write_image_containers, write_seeds
from _workers import Worker

REPO = Path(__file__).resolve().parents[2]
SCRIPT = "fuzz/files/fuzz_files.py"
COLUMNS = (
    cmp.OK,
    cmp.BOTH,
    cmp.PR_REFUSED,
    cmp.REF_REFUSED,
    cmp.REF_DEFECT,
    "FAILED",
)
#: Saved inputs per failure class and per difference class.
KEEP_FAILURES = 5
KEEP_DIFFERENCES = 3


def _plan(fmt: str, rng: random.Random) -> dict[str, Any]:
    """How packread is called on this input: the index lists' seed and, for HDF5, whether the
    file is read from its path, with ``in_memory=True``, from bytes or a file object; for ZIP,
    from its path or a file object."""
    plan: dict[str, Any] = {"rng": rng.getrandbits(32)}
    if fmt in ("hdf5", "pytables"):
        plan["via"] = rng.choices(
            ("path", "in_memory", "bytes", "file object"), weights=(60, 15, 10, 15)
        )[0]
    if fmt == "zip":
        plan["via"] = rng.choices(("path", "file object"), weights=(75, 25))[0]
    return plan


def _failed_reference(fmt: str, status: str, detail: Any) -> dict[str, Any]:
    """A reference result saying the reference read nothing (it crashed or hung)."""
    err = (f"reference.{status}", False, str(detail)[:300])
    if fmt in ("hdf5", "pytables"):
        return {"open_error": err, "datasets": {}}
    if fmt == "zip":
        return {"open_error": err, "names": [], "infos": [], "raw": {}, "npy": {}}
    if fmt == "npz":
        return {"open_error": err, "keys": [], "values": {}}
    if fmt == "images":
        return {"damaged": err, "goods": {0: err, 2: err}}
    return {"open_error": err, "value": None}


def _normalize(text: str, path: str) -> str:
    """A message as a class: the input's name and the numbers taken out."""
    text = text.replace(path, "<file>").replace("<buffer>", "<file>")
    text = text.replace("<HDF5 bytes>", "<file>")
    text = re.sub(r"\b(bytes|shape|dtype) (differ|\(|[<>|]).*", r"\1 differ", text)  # not how
    text = re.sub(r"\b(0x[0-9a-fA-F]+|\d+)\b", "N", text)
    return re.sub(r"\s+", " ", text)[:150]


@dataclass
class Input:
    """One input: which seed, how mutated, how it is read."""

    fmt: str
    seed_name: str
    data: bytes
    mutations: list[str]
    plan: dict[str, Any]
    run: int | None  # None: an unmutated seed, or a replayed file
    seed: int | None


@dataclass
class Result:
    verdict: str
    detail: str
    ops: list[tuple[str, str, str, str]] = field(default_factory=list)  # label, kind, verdict, why
    worker: dict[str, Any] | None = None


class Fuzzer:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.tmp = tmp
        self.out = Path(args.out)
        self.inputs_dir = tmp / "inputs"
        self.inputs_dir.mkdir(parents=True, exist_ok=True)
        self.packread = Worker("packread", tmp)
        self.reference = Worker("reference", tmp)
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)
        self.buckets: dict[str, Counter[tuple[str, ...]]] = defaultdict(Counter)
        self.bucket_calls: dict[tuple[str, ...], set[str]] = defaultdict(set)
        self.baseline: Counter[str] = Counter()
        self.examples: dict[tuple[str, ...], list[str]] = defaultdict(list)
        self.failures: list[tuple[str, str, str]] = []  # verdict, file, detail
        self.reference_trouble: Counter[str] = Counter()
        self.runs = 0
        self.seconds: dict[str, float] = defaultdict(float)  # in each worker, with the pipe

    def close(self) -> None:
        self.packread.stop()
        self.reference.stop()

    # -- one input

    def read(self, item: Input) -> Result:
        path = self.inputs_dir / f"{item.seed_name}-r{item.run}{EXTENSIONS[item.fmt]}"
        path.write_bytes(item.data)
        if item.fmt == "images":  # the containers it is read in, beside it
            write_image_containers(str(path), item.data)
        try:
            return self._read(item, str(path))
        finally:
            path.unlink(missing_ok=True)
            shutil.rmtree(f"{path}.d", ignore_errors=True)

    def _read(self, item: Input, path: str) -> Result:
        t0 = time.monotonic()
        status, ops = self.packread.call(item.fmt, path, item.plan, self.args.timeout)
        self.seconds["packread"] += time.monotonic() - t0
        if status in ("crash", "hang"):
            if status == "crash":
                what = ops.get("signal") or f"exit code {ops.get('exitcode')}"
            else:
                what = f"no answer in {ops['seconds']} s"
            op = re.findall(r"^op (.*)$", ops.get("log", ""), re.M)
            where = f" in {op[-1]}" if op else ""
            # Would the reference have read it? (Said in the report; the failure stands.)
            request: dict[str, list[int]] | None = None
            if item.fmt in ("hdf5", "pytables"):
                request = {}
            rstatus, ref = self.reference.call(item.fmt, path, request, self.args.ref_timeout)
            if rstatus == "ok":
                read = cmp.reference_read_all(item.fmt, ref)
                ops["reference"] = "read it" if read else "refused it"
            else:
                ops["reference"] = rstatus
            detail = f"{what}{where}; the reference {ops['reference']}"
            return Result(f"FAIL:{status}", detail, worker=ops)
        if status != "ok":
            return Result("FAIL:harness", f"packread worker: {ops}")
        request = cmp.hdf5_request(ops) if item.fmt in ("hdf5", "pytables") else None
        t0 = time.monotonic()
        rstatus, ref = self.reference.call(item.fmt, path, request, self.args.ref_timeout)
        self.seconds["reference"] += time.monotonic() - t0
        if rstatus == "harness-error":
            return Result("FAIL:harness", f"reference worker: {ref}")
        if rstatus != "ok":
            self.reference_trouble[f"{item.fmt} reference {rstatus}"] += 1
            ref = _failed_reference(item.fmt, rstatus, ref)
        verdicts = cmp.judge(item.fmt, ops, ref)
        verdict, detail = cmp.overall(verdicts)
        rows = []
        for op, (v, why) in zip(ops, verdicts, strict=True):
            rows.append((op["label"], op["kind"], v, why))
        return Result(verdict, detail, rows)

    # -- bookkeeping

    def _name(self, prefix: str, item: Input) -> str:
        run = "seed" if item.run is None else f"s{item.seed}-r{item.run}"
        return f"{prefix}-{item.seed_name}-{run}{EXTENSIONS[item.fmt]}"

    def _save(self, folder: Path, name: str, item: Input, result: Result) -> str:
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / name
        target.write_bytes(item.data)
        replay = f"{sys.executable} {SCRIPT} --replay {target}"
        info = {
            "format": item.fmt,
            "seed_file": item.seed_name,
            "seed": item.seed,
            "run": item.run,
            "mutations": item.mutations,
            "plan": item.plan,
            "verdict": result.verdict,
            "detail": result.detail,
            "ops": result.ops,
            "worker": result.worker,
            "replay": replay,
        }
        Path(f"{target}.json").write_text(json.dumps(info, indent=1, default=str))
        try:
            return str(target.relative_to(REPO))
        except ValueError:
            return str(target)

    def record(self, item: Input, result: Result, path_hint: str) -> None:
        column = "FAILED" if result.verdict.startswith("FAIL") else result.verdict
        if item.run is None:
            self.baseline[result.verdict] += 1
        else:
            self.counts[item.fmt][column] += 1
        seen: set[tuple[str, ...]] = set()
        for _label, kind, verdict, why in result.ops:
            if verdict in (cmp.PR_REFUSED, cmp.REF_REFUSED, cmp.REF_DEFECT):
                key = (verdict, item.fmt, _normalize(why, path_hint))
                self.bucket_calls[key].add(kind)
                if key not in seen:
                    seen.add(key)
                    self.buckets[verdict][key] += 1
                    if len(self.examples[key]) < KEEP_DIFFERENCES:
                        folder = self.out / "differences"
                        prefix = verdict.replace("-", "_")
                        name = self._name(prefix, item)
                        self.examples[key].append(self._save(folder, name, item, result))
        if column == "FAILED":
            kind = next((k for _, k, v, _ in result.ops if v == result.verdict), "")
            key = (result.verdict, item.fmt, _normalize(result.detail, path_hint))
            self.bucket_calls[key].add(kind)
            self.buckets["FAILED"][key] += 1
            saved = ""
            if len(self.examples[key]) < KEEP_FAILURES:
                name = self._name(result.verdict.split(":")[1], item)
                saved = self._save(self.out, name, item, result)
                self.examples[key].append(saved)
            self.failures.append((result.verdict, saved, f"{item.fmt} {result.detail}"))

    def run_one(self, item: Input) -> Result:
        result = self.read(item)
        hint = str(self.inputs_dir / f"{item.seed_name}-r{item.run}{EXTENSIONS[item.fmt]}")
        if item.run is None and result.verdict != cmp.OK:
            # An unmutated seed must read equal: anything else is a bug (packread's or ours).
            result = Result(f"FAIL:seed-{result.verdict}", result.detail, result.ops, result.worker)
        self.record(item, result, hint)
        return result


# --------------------------------------------------------------------------------------------


def _summary(fz: Fuzzer, seeds: list[Seed], start: float, loop_start: float | None) -> None:
    now = time.monotonic()
    elapsed = now - start
    loop = now - loop_start if loop_start is not None else 0.0
    rate = fz.runs / loop if loop > 0 else 0.0
    p = print
    p(
        f"files: summary: seed {fz.args.seed}, {fz.runs} runs in {elapsed:.0f} s "
        f"({loop:.0f} s fuzzing, {rate:.1f} inputs/s)"
    )
    p(
        f"files: {len(seeds)} seed files, read unmutated first ({sum(fz.baseline.values())} "
        f"reads, HDF5 from path, in memory and bytes): {dict(fz.baseline)}"
    )
    p("files: inputs run per format and outcome:")
    head = f"  {'format':<9} {'runs':>6}" + "".join(f" {c:>17}" for c in COLUMNS)
    p(head)
    total: Counter[str] = Counter()
    for fmt in fz.args.formats:
        c = fz.counts[fmt]
        runs = sum(c.values())
        total.update(c)
        p(f"  {fmt:<9} {runs:>6}" + "".join(f" {c[k]:>17}" for k in COLUMNS))
    p(f"  {'total':<9} {sum(total.values()):>6}" + "".join(f" {total[k]:>17}" for k in COLUMNS))
    titles = {
        cmp.PR_REFUSED: "packread refused what the reference read (differences, not failures)",
        cmp.REF_REFUSED: "reference refused, packread read",
        cmp.REF_DEFECT: "reference defects (values differ by the reference's known fault)",
        "FAILED": "FAILURES",
    }
    for verdict, title in titles.items():
        bucket = fz.buckets.get(verdict)
        if not bucket:
            continue
        p(f"files: {title}: {sum(bucket.values())} inputs, by class (inputs, format, call, why):")
        for key, n in bucket.most_common(40 if verdict != cmp.REF_REFUSED else 15):
            calls = ",".join(sorted(fz.bucket_calls[key]))
            p(f"  {n:>5}  {key[1]:<8} {calls:<9} {key[2]}")
            for ex in fz.examples[key][:2]:
                p(f"         e.g. {ex}")
    if fz.reference_trouble:
        p(
            f"files: reference worker crashed or hung (not packread failures): "
            f"{dict(fz.reference_trouble)}"
        )
    p(
        f"files: worker restarts: packread {fz.packread.restarts}, reference "
        f"{fz.reference.restarts}; seconds in packread's worker {fz.seconds['packread']:.0f}, "
        f"in the reference's {fz.seconds['reference']:.0f}"
    )
    if fz.failures:
        p(f"files: {len(fz.failures)} FAILURES (replay: {SCRIPT} --replay FILE):")
        for verdict, saved, detail in fz.failures[:40]:
            where = saved or "(not saved: its class has examples)"
            p(f"  {verdict:<14} {where}  {detail[:160]}")
    else:
        p("files: no failures")
    p(f"files: Done {fz.runs} runs in {int(elapsed)} second(s)")


def fuzz(args: argparse.Namespace) -> int:
    start = time.monotonic()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    tmp = Path(tempfile.mkdtemp(prefix="packread-fuzz-files-"))
    fz = Fuzzer(args, tmp)
    seeds: list[Seed] = []
    loop_start = None
    try:
        (tmp / "seeds").mkdir()
        seeds = write_seeds(str(tmp / "seeds"), tuple(args.formats))
        by_fmt: dict[str, list[Seed]] = defaultdict(list)
        for s in seeds:
            by_fmt[s.fmt].append(s)
        print(
            f"files: seed {args.seed}, {len(seeds)} seed files, formats {args.formats}, "
            f"{f'{args.runs} runs' if args.runs else 'no run cap'}, "
            f"{f'{args.seconds:g} s' if args.seconds else 'no time cap'}",
            file=sys.stderr,
        )
        # The seeds unmutated (HDF5 also in memory and from bytes): all must read equal.
        for s in seeds:
            vias = ("path", "in_memory", "bytes") if s.fmt in ("hdf5", "pytables") else ("path",)
            for via in vias:
                item = Input(s.fmt, s.name, s.data, [], {"rng": 0, "via": via}, None, args.seed)
                fz.run_one(item)
        last = loop_start = time.monotonic()
        run = args.first_run
        while True:
            if args.runs and fz.runs >= args.runs:
                break
            if args.seconds and time.monotonic() - start >= args.seconds:
                break
            fmt = args.formats[run % len(args.formats)]
            rng = random.Random(f"packread-files/{args.seed}/{run}")
            s = rng.choice(by_fmt[fmt])
            data, log = mutate(s, rng)
            item = Input(fmt, s.name, data, log, _plan(fmt, rng), run, args.seed)
            fz.run_one(item)
            fz.runs += 1
            run += 1
            if time.monotonic() - last >= 30:
                last = time.monotonic()
                elapsed = last - start
                print(
                    f"files: #{fz.runs} {fz.runs / elapsed:.1f} inputs/s, "
                    f"{len(fz.failures)} failures, "
                    f"{sum(fz.buckets[cmp.PR_REFUSED].values())} differences",
                    file=sys.stderr,
                )
    except KeyboardInterrupt:
        print("files: interrupted", file=sys.stderr)
    finally:
        fz.close()
        shutil.rmtree(tmp, ignore_errors=True)
    _summary(fz, seeds, start, loop_start)
    return 1 if fz.failures else 0


def _guess_format(path: Path) -> str:
    name = path.name
    for prefix, fmt in (
        ("h5py_", "hdf5"),
        ("pytables_", "pytables"),
        ("zip_", "zip"),
        ("npz_", "npz"),
        ("npy_", "npy"),
    ):
        if prefix in name:
            return fmt
    return {".h5": "hdf5", ".hdf5": "hdf5", ".zip": "zip", ".npz": "npz", ".npy": "npy"}.get(
        path.suffix, "hdf5"
    )


def replay(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="packread-fuzz-replay-"))
    fz = Fuzzer(args, tmp)
    failed = False
    try:
        for name in args.replay:
            path = Path(name)
            sidecar = Path(f"{path}.json")
            info = json.loads(sidecar.read_text()) if sidecar.exists() else {}
            fmt = args.format or info.get("format") or _guess_format(path)
            plan = info.get("plan") or {"rng": 0, "via": "path"}
            item = Input(
                fmt,
                "replay",
                path.read_bytes(),
                info.get("mutations", []),
                plan,
                info.get("run"),
                info.get("seed"),
            )
            result = fz.read(item)
            print(f"{path}: {fmt}, plan {plan}")
            for m in item.mutations:
                print(f"  mutation: {m}")
            for label, _kind, verdict, why in result.ops:
                print(f"  {verdict:<18} {label}  {why[:300]}")
            print(f"  => {result.verdict}: {result.detail[:500]}")
            if result.worker:
                print(
                    f"  worker: exit code {result.worker.get('exitcode')} "
                    f"{result.worker.get('signal', '')}\n{result.worker.get('log', '')}"
                )
            failed |= result.verdict.startswith("FAIL")
    finally:
        fz.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="stop after this long (0: no cap)")
    ap.add_argument("--runs", type=int, default=0, help="stop after this many inputs (0: no cap)")
    ap.add_argument("--seed", type=int, default=None, help="mutations' seed (default: random)")
    ap.add_argument("--first-run", type=int, default=0, help="number of the first run")
    ap.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    ap.add_argument("--out", default=str(REPO / "fuzz" / "artifacts" / "files"))
    ap.add_argument("--timeout", type=float, default=20.0, help="packread's seconds per input")
    ap.add_argument("--ref-timeout", type=float, default=10.0, help="the reference's, per input")
    ap.add_argument("--replay", nargs="+", metavar="FILE", help="read saved inputs and judge them")
    ap.add_argument("--format", choices=FORMATS, help="the format of --replay files")
    args = ap.parse_args(argv)
    if args.replay:
        return replay(args)
    return fuzz(args)


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
