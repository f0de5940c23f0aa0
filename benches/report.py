"""Markdown tables from a pytest-benchmark JSON file: packread beside each group's baseline.

Usage: ``python benches/report.py .bench/latest.json``

``python benches/report.py --criterion target/criterion`` prints the medians that
``cargo bench`` saved instead (one row per criterion benchmark, with its throughput).

Entries are paired by benchmark group and ``extra_info['case']``. In each pair the entry with
``extra_info['role'] == 'baseline'`` is the baseline; ``ratio`` is baseline median / entry
median (above 1: faster than the baseline). A ``reference`` entry (the seed users' own Dataset
loop, or SPDL's loader) gets its own ratio column; ``variant`` entries (other spellings of the
baseline) are listed after the baseline. ``extra_info['compression']`` and
``extra_info['note']``, where present, are printed under the table.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROLE_ORDER = {"baseline": 0, "variant": 1, "reference": 2, "packread": 3}


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


def _table(entries: list[dict[str, Any]]) -> list[str]:
    entries = sorted(
        entries, key=lambda b: (ROLE_ORDER.get(b["extra_info"].get("role"), 9), b["name"])
    )
    base = next((b for b in entries if b["extra_info"].get("role") == "baseline"), None)
    ref = next((b for b in entries if b["extra_info"].get("role") == "reference"), None)
    head = ["variant", "role", "median", "samples/s", "GB/s", "faults/call", "rounds"]
    head += ["ratio vs baseline"]
    if ref is not None:
        head.append("ratio vs reference")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for b in entries:
        info, med = b["extra_info"], b["stats"]["median"]
        samples = info.get("samples_per_call", 1)
        nbytes = info.get("bytes_per_call", 0)
        row = [
            f"`{info.get('label', b['name'])}`",
            info.get("role", "?"),
            _time(med),
            _rate(samples / med),
            f"{nbytes / med / 1e9:.3g}" if nbytes else "-",
            str(info.get("minor_faults_per_call", "-")),
            str(b["stats"]["rounds"]),
            f"{base['stats']['median'] / med:.2f}x" if base is not None else "-",
        ]
        if ref is not None:
            row.append(f"{ref['stats']['median'] / med:.2f}x")
        lines.append("| " + " | ".join(row) + " |")
    if base is None:
        lines.append("")
        lines.append("(no baseline entry in this group)")
    ratios = {b["extra_info"]["compression"] for b in entries if "compression" in b["extra_info"]}
    notes = [
        f"- `{b['extra_info'].get('label', b['name'])}`: {b['extra_info']['note']}"
        for b in entries
        if b["extra_info"].get("note")
    ]
    if ratios or notes:
        lines.append("")
    if ratios:
        shown = ", ".join(f"{r}x" for r in sorted(ratios))
        lines.append(f"Compression ratio (array bytes / stored bytes): {shown}")
    lines += notes
    return lines


def report(data: dict[str, Any]) -> str:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for b in data.get("benchmarks", []):
        if not b.get("stats"):
            continue
        groups[(b.get("group") or "", b["extra_info"].get("case", ""))].append(b)
    out = ["## Machine", "", *_machine(data), ""]
    out += [
        "Median time per call; samples/s and GB/s (array bytes) from the median; faults/call:",
        "minor page faults per call; ratio: other median / this median (above 1: faster).",
        "",
    ]
    if not groups:
        out.append("No timed benchmarks in this file (was it run with --benchmark-disable?).")
    for (group, case), entries in sorted(groups.items()):
        title = f"{group} ({case})" if case else group
        out += [f"## {title}", "", *_table(entries), ""]
    return "\n".join(out)


def criterion_report(root: Path) -> str:
    """Medians of the criterion benchmarks saved under ``root`` (``target/criterion``)."""
    lines = [
        "| benchmark | median | 95% CI of the median | throughput |",
        "|---|---|---|---|",
    ]
    for est_path in sorted(root.glob("**/new/estimates.json")):
        est = json.loads(est_path.read_text())["median"]
        bench = json.loads((est_path.parent / "benchmark.json").read_text())
        med = est["point_estimate"] * 1e-9
        ci = est["confidence_interval"]
        thr = bench.get("throughput") or {}
        if "Bytes" in thr:
            rate = f"{thr['Bytes'] / med / 2**30:.2f} GiB/s"
        elif "Elements" in thr:
            rate = f"{_rate(thr['Elements'] / med)} elements/s"
        else:
            rate = "-"
        lo, hi = _time(ci["lower_bound"] * 1e-9), _time(ci["upper_bound"] * 1e-9)
        lines.append(f"| `{bench['full_id']}` | {_time(med)} | {lo} - {hi} | {rate} |")
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
