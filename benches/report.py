"""Markdown tables from a pytest-benchmark JSON file written by the ``benches/`` comparisons.

Usage: ``python benches/report.py .bench/latest.json``

Each comparison (``conftest.compare``) stores its variants' per-call times, interleaved in one
run, in ``extra_info['variants']``; pytest-benchmark's own statistics for it time the whole run
and are not used. For every comparison (benchmark group and ``extra_info['case']``) this prints
one row per variant: median time per call, interquartile range (as a percentage of the median),
samples/s and GB/s (array bytes) from the median, minor page faults per call, timed rounds,
``x baseline`` (baseline median / this median: above 1 is faster), ``x reference`` (the same
against the ``reference`` row, the seed users' own loader or SPDL, where there is one),
``x fastest reference`` (against the fastest ``reference`` row, where there are several: the
image groups' other loaders), ``x anchor`` (against the two-thread ``preadv`` row, where there
is one) and ``% of limit``
(the fastest ``limit`` row's median / this median: how close this row comes to a numpy
gather-copy of the same bytes from RAM). A summary first gives, per comparison, the first
``packread`` row (the plain call) against the others. The image groups (``images-*``) count
images/s; their epoch table adds the DataLoader worker processes' CPU and all CPU per image,
the per-core group states packread's images/s over simplejpeg's, and peers that were not
installed are listed as left out.

``python benches/report.py --criterion target/criterion`` prints the medians that ``cargo bench``
saved, grouped, with ``x baseline`` against the group's ``baseline_*`` benchmark and ``% of limit``
against its fastest ``limit_*`` one.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROLE_ORDER = {"baseline": 0, "variant": 1, "reference": 2, "anchor": 3, "limit": 4, "packread": 5}


def _time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.2f} µs"
    return f"{seconds * 1e9:.0f} ns"


def _rate(per_second: float) -> str:
    if per_second >= 1e6:
        return f"{per_second / 1e6:.2f} M"
    if per_second >= 1e3:
        return f"{per_second / 1e3:.1f} k"
    return f"{per_second:.0f}"


def _machine(data: dict[str, Any]) -> list[str]:
    m = data.get("machine_info", {})
    cpu = m.get("cpu", {}) or {}
    items = [
        ("date", data.get("datetime", "?")),
        ("cpu", cpu.get("brand_raw") or m.get("processor") or "?"),
        ("cpu count", m.get("cpu_count", "?")),
        ("usable cpus", m.get("cpu_affinity", "?")),
        ("L3 cache", m.get("l3_cache", "?")),
        ("memory", f"{m.get('mem_total_gib', '?')} GiB"),
        ("python", f"{m.get('python_implementation', '')} {m.get('python_version', '?')}".strip()),
        ("numpy", m.get("numpy_version", "?")),
        ("torch", m.get("torch_version", "?")),
        (
            "packread",
            f"{m.get('packread_version', '?')} ({m.get('packread_threads', '?')} threads)",
        ),
        ("malloc", m.get("malloc", "?")),
        ("pytest-benchmark", data.get("version", "?")),
        ("system", f"{m.get('system', '?')} {m.get('release', '')}".strip()),
    ]
    return [f"- {k}: {v}" for k, v in items]


def _rows(bench: dict[str, Any]) -> list[dict[str, Any]]:
    """The comparison's variants with their medians, in report order (roles, then as listed)."""
    rows = []
    for pos, v in enumerate(bench["extra_info"].get("variants", [])):
        times = v.get("times") or []
        if not times:
            continue
        q1, _, q3 = statistics.quantiles(times, n=4) if len(times) > 1 else (times[0],) * 3
        med = statistics.median(times)
        rows.append({**v, "median": med, "iqr": (q3 - q1) / med, "rounds": len(times), "pos": pos})
    return sorted(rows, key=lambda r: (ROLE_ORDER.get(r["role"], 9), r["pos"]))


def _first(rows: list[dict[str, Any]], role: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["role"] == role), None)


def _limit(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    limits = [r for r in rows if r["role"] == "limit"]
    return min(limits, key=lambda r: r["median"]) if limits else None


def _ratio(other: dict[str, Any] | None, row: dict[str, Any]) -> str:
    return f"{other['median'] / row['median']:.2f}x" if other else "-"


def _percent(limit: dict[str, Any] | None, row: dict[str, Any]) -> str:
    return f"{100 * limit['median'] / row['median']:.0f} %" if limit else "-"


def _table(bench: dict[str, Any]) -> list[str]:
    info = bench["extra_info"]
    rows = _rows(bench)
    base, ref = _first(rows, "baseline"), _first(rows, "reference")
    anchor, limit = _first(rows, "anchor"), _limit(rows)
    unit = info.get("unit", "samples")
    head = ["variant", "role", "median", "IQR", f"{unit}/s", "GB/s", "faults/call", "rounds"]
    head.append("x baseline")
    optional = [("x reference", ref), ("x anchor", anchor), ("% of limit", limit)]
    refs = [r for r in rows if r["role"] == "reference"]
    if len(refs) > 1:
        # Several other loaders (the image groups): also against the fastest of them.
        optional.insert(1, ("x fastest reference", min(refs, key=lambda r: r["median"])))
    head += [name for name, r in optional if r is not None]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    samples = info.get("samples_per_call", 1)
    nbytes = info.get("bytes_per_call", 0)
    for r in rows:
        med = r["median"]
        cells = [
            f"`{r['label']}`",
            r["role"],
            _time(med),
            f"{100 * r['iqr']:.0f} %",
            _rate(samples / med),
            f"{nbytes / med / 1e9:.3g}" if nbytes else "-",
            str(r.get("minor_faults_per_call", "-")),
            str(r["rounds"]),
            _ratio(base, r),
        ]
        for name, other in optional:
            if other is not None:
                cells.append(_percent(other, r) if name == "% of limit" else _ratio(other, r))
        lines.append("| " + " | ".join(cells) + " |")
    notes = []
    if "compression" in info:
        notes.append(f"Compression ratio (array bytes / stored bytes): {info['compression']}x")
    if info.get("note"):
        notes.append(info["note"])
    notes += [f"- `{r['label']}`: {r['note']}" for r in rows if r.get("note")]
    if info.get("per_core") and base is not None:
        notes += [
            f"Per core: `{r['label']}` / `{base['label']}`: {base['median'] / r['median']:.2f}x "
            f"the {unit}/s"
            for r in rows
            if r["role"] == "packread"
        ]
    notes += [f"Left out: `{label}`: {why}" for label, why in (info.get("skipped") or {}).items()]
    load = info.get("loadavg")
    if load:
        notes.append(f"Load average (1 min) before / after: {load[0]} / {load[3]}")
    if info.get("epochs"):
        lines += ["", *_epoch_table(info)]
    return [*lines, "", *notes] if notes else lines


def _epoch_table(info: dict[str, Any]) -> list[str]:
    """Per loader of a DataLoader-epoch comparison (``extra_info['epochs']``, medians over the
    timed epochs): CPU of the main process and of the loop's own thread, and with a simulated
    step, the share of the epoch spent waiting in ``next()``."""
    overlap = "step_s" in info
    # The image groups also count the DataLoader worker processes' CPU, and CPU per image.
    workers = any("workers_cpu_s" in e for e in info["epochs"].values())
    head = ["loader", "main-process CPU / epoch", "loop-thread CPU / epoch"]
    if workers:
        head += ["worker-process CPU / epoch", "all CPU per image"]
    if overlap:
        head += ["waiting in next()", "waiting after the first batch"]
    one_read = info.get("one_read_s")
    if one_read:
        head += ["first batch", "first batch / one read"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, e in info["epochs"].items():
        cells = [f"`{label}`", f"{e['main_cpu_s']:.2f} s", f"{e['loop_cpu_s']:.2f} s"]
        if workers:
            cells += [
                f"{e.get('workers_cpu_s', 0):.2f} s",
                f"{e.get('cpu_ms_per_image', 0):.2f} ms",
            ]
        if overlap:
            cells += [
                f"{100 * e['waiting_share']:.1f} %",
                f"{100 * e['waiting_share_after_first']:.1f} %",
            ]
        if one_read:
            first = e.get("first_wait_s", 0.0)
            cells += [f"{first * 1e3:.1f} ms", f"{first / one_read:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _title(bench: dict[str, Any]) -> str:
    case = bench["extra_info"].get("case", "")
    group = bench.get("group") or bench["name"]
    return f"{group} ({case})" if case else group


def _summary(benches: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| comparison | packread (plain call) | x baseline | x reference | % of limit |",
        "|---|---|---|---|---|",
    ]
    for b in benches:
        rows = _rows(b)
        pr = _first(rows, "packread")
        if pr is None:
            continue
        base, ref, limit = _first(rows, "baseline"), _first(rows, "reference"), _limit(rows)
        lines.append(
            f"| {_title(b)} | {_time(pr['median'])} | {_ratio(base, pr)} | "
            f"{_ratio(ref, pr)} | {_percent(limit, pr)} |"
        )
    return lines


def report(data: dict[str, Any]) -> str:
    benches = [b for b in data.get("benchmarks", []) if b["extra_info"].get("variants")]
    benches.sort(key=_title)
    out = ["## Machine", "", *_machine(data), ""]
    if not any(_rows(b) for b in benches):
        out.append("No timed comparisons in this file (was it run with --benchmark-disable?).")
        return "\n".join(out)
    out += ["## Summary", "", *_summary(benches), ""]
    out += [
        "Median time per call (variants interleaved round by round, a fresh random batch every",
        "call); IQR: interquartile range / median; samples/s and GB/s (array bytes) from the",
        "median; faults/call: minor page faults per call; x other: other median / this median",
        "(above 1: faster); % of limit: fastest numpy gather-copy from RAM / this median.",
        "",
    ]
    for b in benches:
        out += [f"## {_title(b)}", "", *_table(b), ""]
    return "\n".join(out)


def criterion_report(root: Path) -> str:
    """Medians of the criterion benchmarks saved under ``root`` (``target/criterion``), with
    ratios to each group's ``baseline_*`` and fastest ``limit_*`` benchmark."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for est_path in sorted(root.glob("**/new/estimates.json")):
        est = json.loads(est_path.read_text())["median"]
        bench = json.loads((est_path.parent / "benchmark.json").read_text())
        groups[bench["group_id"]].append({**bench, "est": est})
    lines = [
        "| benchmark | median | 95% CI of the median | throughput | x baseline | % of limit |",
        "|---|---|---|---|---|---|",
    ]
    for group, entries in sorted(groups.items()):
        med = {e["full_id"]: e["est"]["point_estimate"] * 1e-9 for e in entries}
        func = {e["full_id"]: e.get("function_id") or "" for e in entries}
        base = next((med[k] for k in med if func[k].startswith("baseline_")), None)
        limits = [med[k] for k in med if func[k].startswith("limit_")]
        limit = min(limits) if limits else None
        for e in sorted(entries, key=lambda e: e["full_id"]):
            m, ci = med[e["full_id"]], e["est"]["confidence_interval"]
            thr = e.get("throughput") or {}
            if "Bytes" in thr:
                rate = f"{thr['Bytes'] / m / 2**30:.2f} GiB/s"
            elif "Elements" in thr:
                rate = f"{_rate(thr['Elements'] / m)} elements/s"
            else:
                rate = "-"
            lo, hi = _time(ci["lower_bound"] * 1e-9), _time(ci["upper_bound"] * 1e-9)
            x_base = f"{base / m:.2f}x" if base else "-"
            pct = f"{100 * limit / m:.0f} %" if limit else "-"
            lines.append(
                f"| `{group}/{func[e['full_id']]}` | {_time(m)} | {lo} - {hi} | {rate} | "
                f"{x_base} | {pct} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--criterion":
        print(criterion_report(Path(argv[2])))
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        data = json.load(f)
    print(report(data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
