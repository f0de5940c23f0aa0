"""What :func:`packread.cli.bench.bench` measured: one :class:`Row` per configuration, and
the :class:`BenchResult` that prints them as a table, draws them as a chart or gives them as
plain data (``--json``)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from .._format import human_rate, human_ratio, path_name


@dataclass
class Row:
    """One configuration's result.

    >>> row = Row("packread batch", "packread", 64, None, 12000.0, [11000.0, 12000.0, 13000.0])
    >>> row.label
    'packread batch, batch 64'
    """

    #: ``"loop"``, ``"packread batch"``, ``"DataLoader(loop Dataset)"`` or
    #: ``"DataLoader(PackDataset)"``.
    config: str
    #: ``"baseline"`` or ``"packread"``.
    side: str
    batch_size: int
    #: DataLoader workers (``None`` for batch reads).
    workers: int | None
    #: Median over the rounds.
    samples_per_s: float
    rates: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        """``"packread batch, batch 64"``, ``"DataLoader(PackDataset), batch 64, 2 workers"``.

        >>> Row("loop", "baseline", 64, None, 1.0).label
        'loop, batch 64'
        """
        plural = "" if self.workers == 1 else "s"
        workers = "" if self.workers is None else f", {self.workers} worker{plural}"
        return f"{self.config}, batch {self.batch_size}{workers}"


@dataclass
class BenchResult:
    """The rows of :func:`~packread.cli.bench.bench`, with a table and a chart of them.

    >>> rows = [Row("loop", "baseline", 8, None, 1000.0)]
    >>> rows.append(Row("packread batch", "packread", 8, None, 3000.0))
    >>> result = BenchResult("train.h5", "hdf5", 64, "h5py d[i]", rows)
    >>> result.format, result.loop
    ('hdf5', 'h5py d[i]')
    """

    path: str
    format: str
    samples: int
    #: How the baseline reads (:data:`~packread.cli.bench.baselines.LOOPS`).
    loop: str
    rows: list[Row]
    notes: list[str] = field(default_factory=list)

    def baseline_for(self, row: Row) -> Row | None:
        """The baseline row that ``row`` is compared with (same batch size and workers).

        >>> rows = [Row("loop", "baseline", 8, None, 1000.0)]
        >>> rows.append(Row("packread batch", "packread", 8, None, 3000.0))
        >>> result = BenchResult("train.h5", "hdf5", 64, "h5py d[i]", rows)
        >>> result.baseline_for(rows[1]).config
        'loop'
        """
        kind = "loop" if row.workers is None else "DataLoader(loop Dataset)"
        for r in self.rows:
            if r.config == kind and r.batch_size == row.batch_size and r.workers == row.workers:
                return r
        return None

    def table(self) -> str:
        """The rows as an aligned text table, each with its speed-up over its baseline.

        >>> rows = [Row("loop", "baseline", 8, None, 1000.0)]
        >>> rows.append(Row("packread batch", "packread", 8, None, 3000.0))
        >>> print(BenchResult("train.h5", "hdf5", 64, "h5py d[i]", rows).table())
        train.h5 (hdf5, 64 samples), baseline: h5py d[i]
        configuration   batch  workers  samples/s  vs baseline
        loop                8        -      1,000        1.00x
        packread batch      8        -      3,000        3.00x
        """
        head = ["configuration", "batch", "workers", "samples/s", "vs baseline"]
        body = []
        for r in self.rows:
            base = self.baseline_for(r)
            ratio = (
                human_ratio(r.samples_per_s / base.samples_per_s)
                if base and base.samples_per_s
                else ""
            )
            workers = "-" if r.workers is None else str(r.workers)
            body.append([r.config, str(r.batch_size), workers, human_rate(r.samples_per_s), ratio])
        widths = [max(len(x[c]) for x in [head, *body]) for c in range(5)]
        lines = [
            f"{path_name(self.path)} ({self.format}, "
            f"{self.samples:,} samples), baseline: {self.loop}"
        ]
        for x in [head, *body]:
            lines.append(
                "  ".join(
                    x[c].ljust(widths[c]) if c == 0 else x[c].rjust(widths[c]) for c in range(5)
                )
            )
        return "\n".join(lines)

    def chart(self, png: str | os.PathLike[str]) -> None:
        """Writes a horizontal bar chart of samples/s per configuration to ``png``
        (matplotlib: ``pip install 'packread[bench]'``).

        >>> rows = [Row("loop", "baseline", 8, None, 1000.0)]
        >>> rows.append(Row("packread batch", "packread", 8, None, 3000.0))
        >>> BenchResult("train.h5", "hdf5", 64, "h5py d[i]", rows).chart("bench.png")
        >>> open("bench.png", "rb").read(8) == b"\\x89PNG\\r\\n\\x1a\\n"
        True
        """
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError:
            raise ImportError("the chart needs matplotlib: pip install 'packread[bench]'") from None
        rows = list(reversed(self.rows))
        fig = Figure(figsize=(8, 1.2 + 0.35 * len(rows)), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        colors = ["#d95f02" if r.side == "packread" else "#7570b3" for r in rows]
        bars = ax.barh([r.label for r in rows], [r.samples_per_s for r in rows], color=colors)
        ax.bar_label(bars, labels=[human_rate(r.samples_per_s) for r in rows], padding=3)
        ax.set_xlabel("samples/s (median of rounds; higher is better)")
        ax.set_title(f"{path_name(self.path)}: packread (orange) vs {self.loop} (purple)")
        ax.margins(x=0.15)
        fig.savefig(os.fspath(png), dpi=100)

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain data (what ``--json`` prints).

        >>> rows = [Row("loop", "baseline", 8, None, 1000.0, [1000.0])]
        >>> sorted(BenchResult("train.h5", "hdf5", 64, "h5py d[i]", rows).to_dict()["rows"][0])
        ['batch_size', 'config', 'rates', 'samples_per_s', 'side', 'workers']
        """
        return asdict(self)
