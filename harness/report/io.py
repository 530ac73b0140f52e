"""The workload experiments' results: ``results table io``, ``results plot io`` and the
end-of-run summary of a ``workload`` run.

The table is a registered ``query.TableKind`` (one row per observation and derived metric,
split by metric), so ``--by`` accepts every run field, scenario parameter and the cell's
own fields (fs, data_mode, cell, dedup, compression, recordsize, repetition); it is always
grouped by accelerator too, so TCG and KVM numbers never share a row, and printed wide:
one column per metric, the mean over the rows of the group (± stdev with more than one).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from harness.report import query
from harness.report.markup import cells, esc
from harness.store.db import Store

# (metric, column title, format)
COLUMNS = (
    ("write_mbps", "write MB/s", "{:.2f}"),
    ("read_mbps", "read MB/s", "{:.2f}"),
    ("write_iops", "write IOPS", "{:.0f}"),
    ("read_iops", "read IOPS", "{:.0f}"),
    ("write_p50_ms", "write p50 ms", "{:.3f}"),
    ("write_p99_ms", "write p99 ms", "{:.3f}"),
    ("read_p50_ms", "read p50 ms", "{:.3f}"),
    ("read_p99_ms", "read p99 ms", "{:.3f}"),
    ("cpu_busy_pct", "CPU %", "{:.1f}"),
    ("cpu_system_pct", "sys %", "{:.1f}"),
    ("cpu_iowait_pct", "iowait %", "{:.1f}"),
    ("write_amplification", "write ampl", "{:.2f}"),
    ("flushes_per_fsync", "flush/fsync", "{:.2f}"),
    ("space_used_mb", "space MB", "{:.1f}"),
    ("dedup_ratio", "dedup", "{:.2f}x"),
    ("compress_ratio", "compress", "{:.2f}x"),
    ("space_per_snapshot_mb", "MB/snapshot", "{:.2f}"),
)


def _value(stats: Any, fmt: str) -> str:
    if stats is None:
        return "-"
    text = fmt.format(stats.mean)
    return text + (f" ±{fmt.format(stats.stdev).rstrip('x')}" if stats.n > 1 else "")


def print_io(console: Console, result: query.GroupedTable) -> None:
    cols = [c for c in COLUMNS if any(c[0] in g.stats for g in result.groups)]
    accels = sorted({str(g.key[result.by.index("accelerator")]) for g in result.groups})
    t = Table(
        title=esc(
            f"io by {', '.join(result.by)} (measured under {', '.join(accels).upper()};"
            " compare cells within one accelerator and host)"
        ),
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for f in result.by:
        t.add_column(esc(f), no_wrap=True)
    t.add_column("n", justify="right")
    for _, title, _ in cols:
        t.add_column(title, justify="right")
    for g in result.groups:
        n = max((s.n for s in g.stats.values()), default=0)
        t.add_row(
            *cells(*("-" if v is None else v for v in g.key)),
            str(n),
            *(_value(g.stats.get(m), fmt) for m, _, fmt in cols),
        )
    console.print(t)


_CELL = "json_extract(o.cell, '$.{}')"
TABLE = query.TableKind(
    name="io",
    help="workload runs: throughput, latency, CPU, write amplification, space per cell",
    source="SELECT ob.run_id, ob.item, ob.cell, j.key AS metric, j.value AS value"
    " FROM observations ob, json_each(ob.metrics, '$.derived') j"
    " WHERE ob.run_id IN (SELECT id FROM runs WHERE kind = 'workload')",
    fields={
        "fs": _CELL.format("type"),
        "data_mode": _CELL.format("data_mode"),
        "cell": _CELL.format("name"),
        "repetition": _CELL.format("repetition"),
        **{p: _CELL.format(f"properties.{p}") for p in ("dedup", "compression", "recordsize")},
    },
    value="value",
    split="metric",
    split_order=tuple(c[0] for c in COLUMNS),
    unit="",
    default_by=("cell",),
    empty_hint="no workload runs stored yet: `scenario run journal-cost` makes some",
    always_by=("accelerator",),
    printer=print_io,
)


def plot_io(store: Store, by: Sequence[str], out: Path, runs: Sequence[str] = ()) -> Path:
    """Throughput, write amplification and CPU per group, as three bar panels (of
    ``runs`` only, if given)."""
    from matplotlib.figure import Figure

    from harness.report import plots

    result = query.grouped(store, "io", by, runs)
    if not result.groups:
        raise plots.NoData(TABLE.empty_hint)
    fig = Figure(figsize=(4 + 1.2 * len(result.groups), 4.5))
    axes = fig.subplots(1, 3)
    acc = result.by.index("accelerator")
    labels = [
        "\n".join(str(v).replace(" ", "\n") for i, v in enumerate(g.key) if i != acc and v)
        for g in result.groups
    ]
    accels = sorted({str(g.key[acc]).upper() for g in result.groups})
    fig.suptitle(f"measured under {', '.join(accels)}", fontsize=9)
    for ax, (metrics, title) in zip(
        axes,
        (
            (("write_mbps", "read_mbps"), "throughput MB/s"),
            (("write_amplification",), "write amplification (device / fio bytes)"),
            (("cpu_busy_pct",), "guest CPU busy %"),
        ),
        strict=True,
    ):
        width = 0.8 / len(metrics)
        for i, m in enumerate(metrics):
            vals = [g.stats[m].mean if m in g.stats else 0.0 for g in result.groups]
            xs = [x + i * width for x in range(len(vals))]
            ax.bar(xs, vals, width, label=m)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(labels))], labels, fontsize=6)
        ax.set_title(title, fontsize=9)
        if len(metrics) > 1:
            ax.legend(fontsize=7)
    return plots._save(fig, out)


PLOT = query.Plot("io", plot_io, ("cell",))
