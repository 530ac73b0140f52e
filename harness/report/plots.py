"""PNG charts from the store (matplotlib, headless Agg backend).

* ``recovery``: the distribution (box plot) of each recovery phase's seconds per group;
* ``crashmap``: the outcome of every crash state of one run along the write log, with the
  flush, FUA and mark positions underneath;
* ``resilver``: resilver (or scrub) seconds against pool fill, one line per layout;
* ``resilver-progress``: one run's scans as curves (% examined over time, ETA error).

The log positions of flushes/FUAs/marks come from the ``log_events`` table; when a log
has none there yet, they are read from the log file the run kept (if it is still there)
and stored, so the chart survives the work directory being cleaned.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.outcome import COLOURS, Outcome
from harness.report import query
from harness.store.db import Store
from harness.store.logevents import log_events


class NoData(Exception):
    """Nothing to plot; the message says why and what to run first."""


def pyplot() -> Any:
    """matplotlib's pyplot on the headless Agg backend, imported when a chart is drawn:
    the kinds' records list the charts, and loading a kind must not load matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(by: Sequence[str], key: tuple[Any, ...]) -> str:
    return "\n".join("-" if v is None else str(v) for v in key) if by else "all"


def plot_recovery(store: Store, by: Sequence[str], out: Path, runs: Sequence[str] = ()) -> Path:
    """Box plots of each recovery phase's seconds, one box per group.

    :raise InputError: unknown field or run. :raise NoData: no recovery times stored.
    """
    k = query.kind("recovery")
    values, _ = query.collect(store, k, query.resolve_fields(store, k, by), runs)
    if not values:
        raise NoData(k.empty_hint)
    splits = query.ordered_splits(k, values)
    keys = sorted(values, key=query.sort_key)
    ncols = min(3, len(splits))
    nrows = -(-len(splits) // ncols)
    width = max(6.0, min(18.0, 1.2 * len(keys) * ncols + 2))
    fig, axes = pyplot().subplots(nrows, ncols, figsize=(width, 4.2 * nrows), squeeze=False)
    for ax, phase in zip(axes.flat, splits, strict=False):
        data = [values[key].get(phase, []) for key in keys]
        present = [(key, d) for key, d in zip(keys, data, strict=True) if d]
        ax.boxplot(
            [d for _, d in present],
            tick_labels=[_label(by, key) for key, _ in present],
            showfliers=True,
            flierprops={"markersize": 3},
        )
        for i, (_, d) in enumerate(present, start=1):
            ax.annotate(
                f"n={len(d)}",
                (i, 1.0),
                xycoords=("data", "axes fraction"),
                ha="center",
                va="bottom",
                fontsize=7,
            )
        ax.set_title(phase, pad=14)
        ax.set_ylabel("seconds")
        ax.set_xlabel(", ".join(by) if by else "")
        ax.grid(axis="y", alpha=0.3)
        ax.tick_params(axis="x", labelsize=8)
    for ax in list(axes.flat)[len(splits) :]:
        ax.set_visible(False)
    fig.suptitle(f"Crash-state recovery time by {', '.join(by) or 'nothing'} (seconds per phase)")
    return _save(fig, out)


def plot_crashmap(store: Store, run: str, out: Path) -> Path:
    """Outcome of every crash state of ``run`` at its log position, events underneath.

    :raise InputError: unknown run. :raise NoData: the run has no crash states.
    """
    r = store.run(run)
    states = store.state_prefixes(r.id)
    if not states:
        raise NoData(f"run {r.id} has no crash states")
    events = log_events(store, r.id)
    rank = {str(o): o.severity for o in Outcome}
    outcomes = sorted({str(o) for _, o in states}, key=lambda o: rank.get(o, -1))
    fig, (ax, ev) = pyplot().subplots(
        2,
        1,
        figsize=(12, 2.2 + 0.45 * len(outcomes) + 1.6),
        sharex=True,
        gridspec_kw={"height_ratios": [max(1, len(outcomes)), 1.6]},
    )
    for y, o in enumerate(outcomes):
        xs = [int(p) for p, oo in states if oo == o]
        ax.scatter(
            xs,
            [y] * len(xs),
            s=36,
            color=COLOURS.get(o, "#7f7f7f"),
            edgecolor="black",
            linewidth=0.4,
            label=f"{o} ({len(xs)})",
            zorder=3,
        )
    ax.set_yticks(range(len(outcomes)), outcomes)
    ax.set_ylim(-0.6, len(outcomes) - 0.4)
    ax.set_ylabel("verdict")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="outcome (states)")
    ax.set_title(
        f"Crash map of run {r.id} ({r.scenario}): verdict of each crash state along the write log"
    )
    rows = [("flush", "#555555"), ("fua", "#1f77b4"), ("mark", "#2ca02c")]
    for y, (kind, colour) in enumerate(rows):
        # A state with prefix p applies entries [0, p): an event at entry i is inside
        # every state whose prefix is > i, so it is drawn at i + 1.
        xs = [i + 1 for i in events[kind]]
        ev.vlines(xs, y - 0.35, y + 0.35, color=colour, linewidth=0.8, label=f"{kind} ({len(xs)})")
    ev.set_yticks(range(len(rows)), [k.upper() if k == "fua" else k for k, _ in rows])
    ev.set_ylim(-0.6, len(rows) - 0.4)
    ev.set_xlabel("log position (log entries applied = crash-state prefix)")
    if not any(events.values()):
        ev.text(
            0.5,
            0.5,
            "flush/FUA/mark positions unknown: the run's log is gone",
            transform=ev.transAxes,
            ha="center",
            va="center",
            fontsize=9,
            color="#777777",
        )
    ev.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="log events")
    return _save(fig, out)


def plot_scans(
    store: Store,
    by: Sequence[str],
    out: Path,
    kind_name: str = "resilver",
    runs: Sequence[str] = (),
) -> Path:
    """ZFS scan seconds against fill (x) per layout (one line each), mean with min-max bars.

    ``by`` is (layout field, fill field), e.g. ``("layout", "fill")``; ``runs``: only
    these (else every run: disks of other sizes would share a line).

    :raise NoData: no scans of this kind stored.
    """
    if len(by) != 2:
        raise InputError(
            f"plot {kind_name} wants --by LINE,X (e.g. layout,fill), not {','.join(by)!r}"
        )
    line_field, x_field = by
    if kind_name in (kinds := query.table_kinds()):
        k = kinds[kind_name]
        values, _ = query.collect(store, k, query.resolve_fields(store, k, by), runs)
        # a kind may split its values (seconds, MB/s): plot the seconds
        split = "seconds" if k.split else k.value
        points = {key: v[split] for key, v in values.items() if v.get(split)}
    else:
        cols = {"layout", "fill", "repetition"}
        for f in by:
            if f not in cols:
                raise InputError(f"unknown field {f!r}", hint="fields: " + ", ".join(sorted(cols)))
        points = {}
        ids = [store.resolve_run_id(r) for r in runs]
        for a, b, s in store.zfs_scan_points(kind_name, line_field, x_field, ids):
            points.setdefault((a, b), []).append(float(s))
    points = {key: v for key, v in points.items() if key[1] is not None}
    if not points:
        raise NoData(
            f"no {kind_name} measurements in the store yet (table zfs_scans is empty for"
            f" kind {kind_name!r}): run a ZFS {kind_name} scenario first"
        )
    fig, ax = pyplot().subplots(figsize=(8, 5))
    lines = sorted({key[0] for key in points}, key=lambda v: str(v))
    for line in lines:
        xs = sorted((key[1], v) for key, v in points.items() if key[0] == line)
        x = [float(p[0]) for p in xs]
        mean = [sum(v) / len(v) for _, v in xs]
        lo = [m - min(v) for m, (_, v) in zip(mean, xs, strict=True)]
        hi = [max(v) - m for m, (_, v) in zip(mean, xs, strict=True)]
        ax.errorbar(x, mean, yerr=[lo, hi], marker="o", capsize=4, label=str(line))
    ax.set_xlabel(f"{x_field} (% of pool capacity)" if x_field == "fill" else x_field)
    ax.set_ylabel(f"{kind_name} time (seconds)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(title=line_field)
    ax.set_title(f"ZFS {kind_name} time against {x_field}, per {line_field} (mean, min-max)")
    return _save(fig, out)


def plot_progress(store: Store, run: str, out: Path) -> Path:
    """One run's scans as curves: % done against seconds (left), and how far each
    ETA ``zpool status`` printed was from the real finish (right).

    :raise NoData: the run's scans have no samples (progress_interval = 0, or an old run).
    """
    import json

    from harness.report.zfs import eta_errors

    run_id = store.resolve_run_id(run)
    rows = store.scan_progress(run_id)
    curves = [(f"{lay} {fill:g}% #{rep + 1}", json.loads(p)) for _, lay, fill, rep, p in rows]
    curves = [(label, c) for label, c in curves if c]
    if not curves:
        raise NoData(f"run {run_id} has no scan samples (progress_interval = 0, or no scans)")
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(12, 5))
    for label, c in curves:
        # zpool status's "% done": bytes issued over bytes to examine (the metadata walk
        # "examines" everything early; issuing the I/O is the progress)
        pct = [100 * p["issued"] / p["to_examine"] if p["to_examine"] else 0 for p in c]
        (line,) = left.plot([p["t"] for p in c], pct, marker=".", label=label)
        with_eta = [p for p in c if p["eta"] is not None]
        errors = eta_errors(c)
        if errors:
            right.plot(
                [p["t"] for p in with_eta][: len(errors)], errors, "o-", color=line.get_color()
            )
    left.set_xlabel("seconds since the first sample")
    left.set_ylabel("% done (issued / to examine)")
    left.set_ylim(0, 105)
    left.grid(alpha=0.3)
    left.legend(fontsize="small")
    right.axhline(0, color="black", lw=0.8)
    right.set_xlabel("seconds since the first sample")
    right.set_ylabel("ETA error, s (predicted finish - real finish)")
    right.grid(alpha=0.3)
    fig.suptitle(f"ZFS scans of run {run_id}: progress and zpool status's ETA")
    return _save(fig, out)


def _save(fig: Any, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    pyplot().close(fig)
    return out


def _crashmap(store: Store, by: Sequence[str], out: Path, runs: Sequence[str]) -> Path:
    return plot_crashmap(store, runs[0], out)


def _progress(store: Store, by: Sequence[str], out: Path, runs: Sequence[str]) -> Path:
    return plot_progress(store, runs[0], out)


def _scans(kind_name: str, store: Store, by: Sequence[str], out: Path, runs: Sequence[str]) -> Path:
    return plot_scans(store, by, out, kind_name, runs)


# The charts above, as their kinds' records list them (harness/experiments/*/kind.py).
RECOVERY = query.Plot("recovery", plot_recovery, ("fs", "data_mode"))
CRASHMAP = query.Plot("crashmap", _crashmap, needs_run=True)
RESILVER = query.Plot("resilver", functools.partial(_scans, "resilver"), ("layout", "fill"))
SCRUB = query.Plot("scrub", functools.partial(_scans, "scrub"), ("layout", "fill"))
PROGRESS = query.Plot("resilver-progress", _progress, needs_run=True)
