"""What the benchmark scripts (``bench_*.py``) say about where they ran: whether a peer
imports, the versions of the packages they compare, and the machine."""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def missing(module: str) -> str | None:
    """Why ``module`` does not import here (``None``: it does)."""
    try:
        __import__(module)
    except Exception as e:
        return f"{module}: {type(e).__name__}: {e}"
    return None


def versions(packages: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``{name: version}`` of each ``(name, module)``, ``"not installed"`` where it does not
    import."""
    out = {}
    for name, module in packages:
        try:
            out[name] = str(__import__(module, fromlist=["_"]).__version__)
        except Exception:
            out[name] = "not installed"
    return out


def machine() -> dict[str, Any]:
    """The facts a reader of the numbers needs: CPU, cores, caches, memory, load."""
    import packread

    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        l3 = Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
    except OSError:
        l3 = "?"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "l3_cache": l3,
        "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "packread_threads": packread.get_num_threads(),
    }


def write_json(path: str | os.PathLike[str], out: dict[str, Any]) -> None:
    """A benchmark's results as JSON at ``path`` (its folder made; numpy floats as floats)."""
    import json

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1, default=float))


def announce(packages: Iterable[tuple[str, str]]) -> tuple[dict[str, Any], dict[str, str]]:
    """The machine's facts and the packages' versions, each printed on a line as a run
    starts."""
    facts = machine()
    vers = versions(packages)
    print(" ".join(f"{k} {v}" for k, v in vers.items()))
    print(
        f"{facts['cpu']}, {facts['usable_cpus']}/{facts['cpu_count']} cpus, L3 "
        f"{facts['l3_cache']}, {facts['mem_gib']} GiB, load {facts['loadavg']}"
    )
    return facts, vers


def require(parser: Any, modules: Iterable[str]) -> None:
    """Stops the run (``parser.error``) naming the first of ``modules`` that does not import."""
    for module in modules:
        why = missing(module)
        if why:
            parser.error(f"needs {module}: {why}")


def print_results(text: str) -> None:
    """A run's Markdown for benches/RESULTS.md, under a banner that marks where it starts."""
    print("\n" + "-" * 30 + " for benches/RESULTS.md " + "-" * 30 + "\n")
    print(text)
