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
from rich.table import Table

from harness.errors import EXIT_OK, InputError
from harness.paths import default_db
from harness.report import markup, query
from harness.report.markup import esc
from harness.store.db import ScanKind, Store

MiB = 1 << 20
# What ``--by`` may group on: the cell's parameters, plus the scenario.
BY_KEYS = (
    "layout", "fill", "disks", "disk_size", "ashift", "recordsize", "media", "cache", "scenario"
)  # fmt: skip


def mib(n: float | None) -> str:
    return "-" if n is None else f"{n / MiB:.1f}"


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
            k: f"(SELECT {col} FROM zfs_scans z WHERE z.id = o.id)"
            for k, col in (
                ("layout", "z.layout"),
                ("fill", "z.fill_target"),
                ("disks", "z.disks"),
                ("disk_size", "z.disk_size"),
                ("repetition", "z.repetition"),
                ("pool_state", "z.pool_state"),
                ("outcome", "z.outcome"),
                # seed 003's other factors, from the stored cell
                *(
                    (k, f"json_extract(z.cell, '$.{k}')")
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


# ``results table resilver|scrub``
TABLES = tuple(_table_kind(scan) for scan in ScanKind)


def register(rsub: Any, common: argparse.ArgumentParser) -> None:
    """``results table resilver|scrub`` (the lead's grouped tables: n, mean, p50, p95,
    max) and ``results zfs resilver|scrub`` (n, mean ± stdev, min, max of seconds and MB/s,
    the form the issue asks for)."""
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
    console = markup.console()
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


def eta_errors(samples: list[dict[str, Any]]) -> list[float]:
    """For each sample with an ETA, predicted finish minus the finish the curve shows
    (the first sample in state FINISHED): positive = zpool was pessimistic."""
    end = next((p["t"] for p in samples if p["state"] == "FINISHED"), None)
    if end is None:
        return []
    return [p["t"] + p["eta"] - end for p in samples if p["eta"] is not None and p["t"] < end]
