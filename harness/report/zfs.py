"""What a person sees of the ZFS lab: the end-of-run summary and ``results table``.

``aggregate()`` is a pure function of stored scan rows (``Store.zfs_scans``), so the
table and its ``--json`` come from the same numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from harness.errors import EXIT_OK, InputError
from harness.experiments import lifecycle
from harness.experiments.zfs.crash import ZfsCrash
from harness.experiments.zfs.scan import ZfsScan, overhead
from harness.outcome import Outcome
from harness.paths import default_db
from harness.report import query
from harness.report.markup import cells, esc
from harness.store.db import ScanKind, Store

MiB = 1 << 20
# What ``--by`` may group on: the cell's parameters, plus the scenario.
BY_KEYS = ("layout", "fill", "disks", "disk_size", "ashift", "recordsize", "scenario")


def _mb(n: float | None) -> str:
    return "-" if n is None else f"{n / MiB:.1f}"


def print_scan_body(console: Console, r: lifecycle.Report) -> None:
    """The end-of-run table of a scrub or resilver run."""
    exp = r.experiment
    assert isinstance(exp, ZfsScan)
    sc = r.scenario
    console.print(
        f"{sc.experiment}, fault {sc.fault.kind} on disk(s) {list(sc.fault.disks)} "
        f"({sc.fault.when})",
        markup=False,
    )
    if exp.measurements:
        m0 = exp.measurements[0]
        console.print(
            f"ZFS {m0.zfs_version}, guest kernel {m0.guest_kernel}, {m0.accelerator}; "
            f"event clock tick {m0.tick_ns / 1e6:g} ms",
            markup=False,  # versions as the guest printed them
        )
    t = Table(box=box.SIMPLE_HEAD)
    for col in (
        "cell",
        "rep",
        "fill %",
        "seconds",
        "scans",
        "status s",
        "wall s",
        "MB/s",
        "examined MiB",
        "repaired MiB",
        "cksum err",
        "data err",
        "pool",
        "verdict",
    ):
        t.add_column(col, justify="left" if col in ("cell", "pool", "verdict") else "right")
    for m in exp.measurements:
        s = m.scan
        cksum = sum(v.checksum for v in m.status.leaves())
        bps = m.bytes_per_second
        verdict = str(m.outcome)
        style = "green" if m.outcome is Outcome.CONSISTENT else "red"
        if m.outcome is Outcome.DATA_LOSS and m.expected_loss:
            style, verdict = "yellow", "data errors (expected)"
        t.add_row(
            esc(m.cell.label().replace(f" fill {m.cell.fill:g}%", "")),
            str(m.repetition + 1),
            f"{m.fill:.1f}",
            f"{m.seconds:.3f}" + ("" if m.seconds_source == "events" else " (status)"),
            " ".join("-" if w.seconds is None else f"{w.seconds:.2f}" for w in m.windows) or "-",
            "-" if s.status_seconds is None else str(s.status_seconds),
            f"{m.wall_seconds:.3f}",
            "-" if bps is None else f"{bps / 1e6:.1f}",
            _mb(s.examined),
            _mb(s.processed),
            str(cksum),
            str(m.status.error_count),
            esc(m.status.state),
            f"[{style}]{esc(verdict)}[/]",
        )
    console.print(t)
    if exp.measurements:
        oh = overhead(exp.measurements)
        console.print(
            "mean seconds per repetition: " + ", ".join(f"{k} {v:.1f}" for k, v in oh.items())
        )
    print_sweep_fits(console, r.summary)


def print_sweep_fits(console: Console, summary: dict[str, Any]) -> None:
    """The sweep as a whole: scan time against bytes per layout, spread, harness share."""
    for layout, f in summary.get("fits", {}).items():
        console.print(
            f"{layout}: {f['MB/s']} MB/s + {f['fixed_seconds']:.2f} s fixed "
            f"(R² {f['r2']:.3f}, n {f['n']})",
            markup=False,
        )
    for cell, spread in summary.get("spread_flagged", {}).items():
        console.print(
            f"[yellow]spread[/] {esc(cell)}: {spread['min']:.2f}..{spread['max']:.2f} s "
            f"around {spread['median']:.2f} s: repeat it on a quieter host"
        )
    if eta := summary.get("eta_abs_error_seconds"):
        console.print(
            f"zpool status's ETA was off by {eta['median']} s (median; max {eta['max']} s,"
            f" {eta['n']} estimates)"
        )
    if "harness_per_scan_second" in summary:
        console.print(
            f"harness time per second of scan: {summary['harness_per_scan_second']} s"
            " (boot, import, copies, collection)"
        )


def print_crash_body(console: Console, r: lifecycle.Report) -> None:
    """The end-of-run table of a pool's crash states."""
    exp = r.experiment
    assert isinstance(exp, ZfsCrash)
    sc = r.scenario
    rec = exp.recording
    console.print(f"crash states of {sc.pool.layout} x{sc.pool.disks}: {len(exp.states)}")
    console.print(
        f"ZFS {rec.zfs_version}, guest kernel {rec.guest_kernel}, {rec.accelerator}; recording "
        + ", ".join(f"{k} {v:.1f}s" for k, v in rec.seconds.items()),
        markup=False,  # versions as the guest printed them
    )
    t = Table(box=box.SIMPLE_HEAD)
    for col in (
        "state",
        "model",
        "mark",
        "cuts",
        "import s",
        "scrub s",
        "repaired",
        "cksum",
        "data err",
        "files",
        "verdict",
    ):
        t.add_column(
            col, justify="left" if col in ("state", "model", "mark", "cuts", "verdict") else "right"
        )
    for s in exp.states:
        c = exp.results.get(s.id)
        if c is None:
            continue
        v = c.verify or {}
        style = "green" if c.outcome is Outcome.CONSISTENT else "red" if s.honest else "dim"
        t.add_row(
            *cells(
                s.id,
                s.generator if s.honest else f"{s.generator} ({s.model})",
                s.mark.removeprefix("crashlab:"),
                " ".join(map(str, s.cuts)),
            ),
            f"{c.phases.get('mount', 0.0):.2f}",
            f"{c.phases.get('fsck_after', 0.0):.2f}" if "fsck_after" in c.phases else "-",
            str(c.repaired),
            str(c.checksum_errors),
            str(c.status.error_count) if c.status else "-",
            f"{v.get('checked', 0) - len(v.get('missing', [])) - len(v.get('mismatched', []))}"
            f"/{v.get('checked', 0)}"
            if v
            else "-",
            f"[{style}]{esc(c.outcome)}[/]" + ("" if s.honest else " [dim](not counted)[/]"),
        )
    console.print(t)
    counts = r.account.counts
    console.print(
        "verdicts: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())), markup=False
    )
    if exp.lying:
        lying = r.account.expected
        console.print(
            f"{len(exp.lying)} states modelled disks that lose acknowledged writes "
            "(crash.torn_model = any); their verdicts are not counted as findings: "
            + ", ".join(f"{k} {n}" for k, n in sorted(lying.items())),
            markup=False,
        )


# --- results table ------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    n: int
    mean: float
    stdev: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat | None:
        vs = [v for v in values if v is not None and not math.isnan(v)]
        if not vs:
            return None
        sd = statistics.stdev(vs) if len(vs) > 1 else 0.0
        return cls(len(vs), statistics.fmean(vs), sd, min(vs), max(vs))

    def text(self, digits: int) -> str:
        return f"{self.mean:.{digits}f} ± {self.stdev:.{digits}f}"


def _key(row: Mapping[str, Any], by: Sequence[str]) -> tuple[Any, ...]:
    cell = row.get("cell") or {}
    out = []
    for k in by:
        if k == "scenario":
            out.append(row["scenario"])
        elif k == "fill":
            out.append(
                row.get("fill_target") if row.get("fill_target") is not None else cell.get("fill")
            )
        else:
            out.append(cell.get(k, row.get(k)))
    return tuple(out)


def aggregate(rows: Sequence[Mapping[str, Any]], by: Sequence[str]) -> list[dict[str, Any]]:
    """One dict per cell: the ``by`` values, n, and stats of seconds and MB/s."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(_key(row, by), []).append(row)
    out = []
    for key in sorted(
        groups, key=lambda k: tuple((v is None, str(v) if isinstance(v, str) else v) for v in k)
    ):
        g = groups[key]
        secs = Stat.of([float(r["seconds"]) for r in g])
        mbs = Stat.of([r["bytes_per_second"] / 1e6 for r in g if r.get("bytes_per_second")])
        fills = Stat.of([float(r["fill"]) for r in g if r.get("fill") is not None])
        out.append(
            {
                **dict(zip(by, key, strict=True)),
                "n": len(g),
                "seconds": None if secs is None else secs.__dict__,
                "mb_per_s": None if mbs is None else mbs.__dict__,
                "fill_achieved": None if fills is None else fills.__dict__,
                "data_errors": sum(int(r.get("data_errors") or 0) for r in g),
            }
        )
    return out


def _table_kind(scan: ScanKind) -> query.TableKind:
    # One observation per scan and metric, so one table shows time and throughput.
    where = f"FROM zfs_scans WHERE kind = '{scan}'"
    return query.TableKind(
        name=str(scan),
        help=f"{scan} seconds and MB/s per pool layout and fill (ZFS lab)",
        source=f"SELECT run_id, id, 'seconds' AS metric, seconds AS value {where}"
        f" UNION ALL SELECT run_id, id, 'MB/s', bytes_per_second / 1e6 {where}"
        " AND bytes_per_second IS NOT NULL",
        fields={
            k: f"(SELECT z.{col} FROM zfs_scans z WHERE z.id = o.id)"
            for k, col in (
                ("layout", "layout"),
                ("fill", "fill_target"),
                ("disks", "disks"),
                ("disk_size", "disk_size"),
                ("repetition", "repetition"),
                ("pool_state", "pool_state"),
                ("outcome", "outcome"),
                # seed 003's other factors, from the stored cell
                *(
                    (k, f"json_extract(cell, '$.{k}')")
                    for k in ("recordsize", "ashift", "cache", "log", "load", "sequential")
                ),
            )
        },
        value="value",
        split="metric",
        split_order=("seconds", "MB/s"),
        unit="",
        default_by=("layout", "fill"),
        empty_hint=f"no {scan} scans stored yet: `scenario run resilver-75pct` makes some",
    )


def register(rsub: Any, common: argparse.ArgumentParser) -> None:
    """``results table resilver|scrub`` (the lead's grouped tables: n, mean, p50, p95,
    max) and ``results zfs resilver|scrub`` (n, mean ± stdev, min, max of seconds and MB/s,
    the form the issue asks for)."""
    for scan in ScanKind:
        query.register_table(_table_kind(scan))
    p = rsub.add_parser(
        "zfs",
        parents=[common],
        help="ZFS scans: n, mean ± stdev, min, max of seconds and MB/s per cell",
    )
    p.add_argument("scan", choices=[str(k) for k in ScanKind], help="resilver or scrub")
    p.add_argument(
        "--by",
        default="layout,fill",
        metavar="KEYS",
        help="comma-separated cell keys: " + ", ".join(BY_KEYS) + " (default layout,fill)",
    )
    p.add_argument("--scenario", default=None, help="only scans of this scenario")
    p.set_defaults(func=cmd_table)


def cmd_table(args: argparse.Namespace) -> int:
    by = [k.strip() for k in args.by.split(",") if k.strip()]
    for k in by:
        if k not in BY_KEYS:
            raise InputError(f"--by {args.by}: unknown key {k!r}", hint="use " + ", ".join(BY_KEYS))
    db: Path = args.db or default_db()
    with Store.open(db, create=False) as st:
        rows = st.zfs_scans(ScanKind(args.scan))
    if args.scenario:
        rows = [r for r in rows if r["scenario"] == args.scenario]
    cells = aggregate(rows, by)
    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console.width = max(console.width, 160)  # piped: do not fold the numbers
    if args.json:
        console.out(
            json.dumps({"db": str(db), "scan": args.scan, "by": by, "cells": cells}, indent=2)
        )
        return EXIT_OK
    if not cells:
        console.print(f"no {args.scan} scans in {db}", markup=False)
        return EXIT_OK
    t = Table(title=esc(f"{args.scan} in {db}"), title_justify="left", box=box.SIMPLE_HEAD)
    for k in by:
        t.add_column(esc(k))
    for col in (
        "n",
        "seconds mean ± sd",
        "min",
        "max",
        "MB/s mean ± sd",
        "min",
        "max",
        "fill %",
        "data err",
    ):
        t.add_column(col, justify="right")
    for c in cells:
        s, r, f = c["seconds"], c["mb_per_s"], c["fill_achieved"]
        t.add_row(
            *(_cell_text(k, c[k]) for k in by),
            str(c["n"]),
            "-" if s is None else f"{s['mean']:.3f} ± {s['stdev']:.3f}",
            "-" if s is None else f"{s['min']:.3f}",
            "-" if s is None else f"{s['max']:.3f}",
            "-" if r is None else f"{r['mean']:.1f} ± {r['stdev']:.1f}",
            "-" if r is None else f"{r['min']:.1f}",
            "-" if r is None else f"{r['max']:.1f}",
            "-" if f is None else f"{f['mean']:.1f}",
            str(c["data_errors"]),
        )
    console.print(t)
    return EXIT_OK


def _cell_text(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key in ("disk_size", "recordsize") and isinstance(value, int):
        return f"{value // MiB}M" if value >= MiB else f"{value // 1024}K"
    if isinstance(value, float):
        return f"{value:g}"
    return esc(value)
