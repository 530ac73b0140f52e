"""What a sweep's scans say together: scan time against bytes scanned, per layout.

A scan's time is a fixed cost (starting the scan, the metadata walk, the last txg) plus
bytes over a rate, so a straight line through (bytes, seconds) gives the rate as its
slope (reported as MB/s) and the fixed cost as its intercept, and R² says how well the
sweep's cells fit that story; a cell whose repetitions spread widely is flagged, because
one noisy spell can make a monotonic table look otherwise (seed 003's "zpool status is
too coarse" is the same problem one level down). The harness's share is the time a
repetition spent outside the scan, over the scan's time.

Stdlib ``statistics`` (``linear_regression``, ``correlation``) does the fitting: no new
dependency for two formulas.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from harness.report.zfs import eta_errors
from harness.store.db import Store

# A cell whose repetitions span more than this fraction of their median is flagged.
SPREAD = 0.25
MB = 1e6


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> dict[str, float] | None:
    """Slope, intercept and R² of ys against xs; None with fewer than two distinct xs."""
    if len(set(xs)) < 2:
        return None
    slope, intercept = statistics.linear_regression(xs, ys)
    r = statistics.correlation(xs, ys) if len(set(ys)) > 1 else 1.0
    return {"slope": slope, "intercept": intercept, "r2": r * r, "n": float(len(xs))}


def rows(st: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's scans: cell, layout, seconds, bytes moved and the harness phases."""
    out = []
    found = st.scan_rows(run_id)
    cells = [json.loads(c or "{}") for *_, c in found]
    for (item, kind, layout, fill, seconds, issued, processed, phases, curve, _), cell in zip(
        found, cells, strict=True
    ):
        moved = processed if kind == "resilver" else issued
        out.append(
            {
                "cell": cell_label(layout, fill, cell, cells),
                "line": cell_label(layout, None, cell, cells),
                "layout": layout,
                "item": item,
                "seconds": float(seconds),
                "moved": float(moved or 0),
                "phases": json.loads(phases or "{}"),
                "progress": json.loads(curve or "[]"),
            }
        )
    return out


def cell_label(
    layout: str, fill: float | None, cell: Mapping[str, Any], cells: Sequence[Mapping[str, Any]]
) -> str:
    """``layout fill N%``, plus every other key of the cell whose value differs between the
    run's cells (a width or cache sweep), so repetitions are grouped by their own cell."""
    varying = [
        k
        for k in cell
        if k not in ("layout", "fill") and len({json.dumps(c.get(k)) for c in cells}) > 1
    ]
    base = f"{layout} fill {fill:g}%" if fill is not None else layout
    return " ".join([base, *(f"{k}={cell[k]}" for k in sorted(varying))])


def sweep_summary(scans: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The fits per line (a layout, and whatever else varies in the run but the fill:
    pools of other widths are not one line), the cells whose repetitions spread, the
    harness's share."""
    by_line: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    by_cell: dict[str, list[float]] = defaultdict(list)
    for s in scans:
        by_line[s.get("line", s["layout"])].append(s)
        by_cell[s["cell"]].append(s["seconds"])
    fits = {}
    for layout, ss in sorted(by_line.items()):
        if len({s["cell"] for s in ss}) < 2 or len(ss) < 3:
            continue  # repetitions of one cell are no line: nothing to fit
        fit = linear_fit([s["moved"] / MB for s in ss], [s["seconds"] for s in ss])
        if fit is not None:
            fits[layout] = {
                "MB/s": round(1 / fit["slope"], 2) if fit["slope"] > 0 else None,
                "fixed_seconds": round(fit["intercept"], 3),
                "r2": round(fit["r2"], 4),
                "n": int(fit["n"]),
            }
    spread = {}
    for cell, secs in sorted(by_cell.items()):
        if len(secs) > 1 and (med := statistics.median(secs)) > 0:
            ratio = (max(secs) - min(secs)) / med
            if ratio > SPREAD:
                spread[cell] = {"min": min(secs), "median": med, "max": max(secs)}
    shares = [
        (sum(s["phases"].values()) - s["phases"].get("scan", 0.0)) / s["seconds"]
        for s in scans
        if s["seconds"] > 0 and s["phases"]
    ]
    out: dict[str, Any] = {"fits": fits, "spread_flagged": spread}
    errors = [abs(e) for s in scans for e in eta_errors(s.get("progress", []))]
    if errors:
        # how wrong "... to go" was, over every estimate zpool status printed
        out["eta_abs_error_seconds"] = {
            "median": round(statistics.median(errors), 2),
            "max": round(max(errors), 2),
            "n": len(errors),
        }
    if shares:
        out["harness_per_scan_second"] = round(statistics.median(shares), 2)
    return out
