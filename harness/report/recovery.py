"""Recovery-time runs (kind ``recovery``): the end-of-run summary (a row per item, the
linear fits, what the seeds claimed next to what was measured) and the plot of recovery
time against size, one line per filesystem and feature set."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.report import query
from harness.report.plots import NoData, _save, pyplot
from harness.report.recovery_fit import PHASE_WORDS, PHASES
from harness.store.db import Store


def recovery_points(
    store: Store, runs: Sequence[str] = ()
) -> dict[str, dict[str, dict[float, list[float]]]]:
    """phase -> cell -> size GiB -> seconds, over the recovery runs (or ``runs``)."""
    ids = [store.resolve_run_id(r) for r in runs]
    out: dict[str, dict[str, dict[float, list[float]]]] = {}
    for cell, size, phase, seconds in store.recovery_phase_points(ids):
        out.setdefault(str(phase), {}).setdefault(str(cell), {}).setdefault(float(size), []).append(
            float(seconds)
        )
    return out


def plot_vs_size(store: Store, out: Path, runs: Sequence[str] = ()) -> Path:
    """Recovery seconds against size, one panel per phase, one line per cell: mean with
    min-max bars.

    :raise NoData: no recovery runs stored.
    """
    points = recovery_points(store, runs)
    phases = [p for p in PHASES if p in points]
    if not phases:
        raise NoData("no recovery-time runs stored yet: scenario run recovery-vs-size")
    plt = pyplot()

    fig, axes = plt.subplots(1, len(phases), figsize=(6 * len(phases), 4.8), squeeze=False)
    for ax, phase in zip(axes.flat, phases, strict=True):
        for cell, by_size in sorted(points[phase].items()):
            _line(ax, cell, by_size)
        sizes = {x for by_size in points[phase].values() for x in by_size}
        if max(sizes) >= 8 * min(sizes):
            ax.set_xscale("log", base=2)  # 1, 4, 16, 64 GiB: evenly spaced
        ax.set_title(PHASE_WORDS[phase])
        ax.set_xlabel("filesystem size (GiB)")
        ax.set_ylabel("seconds")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        "Recovery time after a crash (SIGKILL of the guest, or a dm-log-writes replay)"
        " against size: mean, min-max"
    )
    return _save(fig, out)


def _line(ax: Any, cell: str, by_size: Mapping[float, list[float]]) -> None:
    xs = sorted(by_size)
    mean = [sum(by_size[x]) / len(by_size[x]) for x in xs]
    lo = [m - min(by_size[x]) for m, x in zip(mean, xs, strict=True)]
    hi = [max(by_size[x]) - m for m, x in zip(mean, xs, strict=True)]
    ax.errorbar(xs, mean, yerr=[lo, hi], marker="o", capsize=4, label=cell)


def _vs_size(store: Store, by: Sequence[str], out: Path, runs: Sequence[str]) -> Path:
    return plot_vs_size(store, out, runs)


VS_SIZE = query.Plot("recovery-vs-size", _vs_size)
