"""Recovery-time runs (kind ``recovery``): the end-of-run summary (a row per item, the
linear fits, what the seeds claimed next to what was measured) and the plot of recovery
time against size, one line per filesystem and feature set."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from harness.experiments import lifecycle
from harness.experiments.recovery_fit import PHASE_WORDS, PHASES, claims, fits
from harness.report.markup import esc
from harness.report.plots import NoData, _save
from harness.store.db import Store


def print_body(console: Console, r: lifecycle.Report) -> None:
    with Store.open(r.db, create=False) as st:
        obs = st.observations(r.run_id)
    t = Table("cell", "size", "files", "inodes used", "mount s", "fsck s", "e2fsck -fy s",
              "item s", "verdict")  # fmt: skip
    for o in obs:
        m = o["metrics"]
        ph = m.get("phases", {})
        pop = m.get("population", {})
        verdict = o["outcome"] + (" (no journal: expected)" if m.get("expected") else "")
        t.add_row(
            esc(o["cell"]["cell"]),
            f"{o['cell']['size']:g}G",
            str(pop.get("files", "-")),
            str(pop.get("inodes_used", "-")),
            *(f"{ph[p]:.3f}" if p in ph else "-" for p in PHASES),
            f"{m.get('item_seconds', 0):.0f}",
            esc(verdict),
        )
    console.print(t)
    f = fits(obs)
    if f:
        ft = Table("cell", "phase", "n", "s / GiB", "R²", "s / M inodes", "R²")
        for row in f:
            ft.add_row(
                esc(row["cell"]),
                PHASE_WORDS[row["phase"]],
                str(row["n"]),
                f"{row['s_per_gib']:.4f}",
                f"{row['r2_size']:.3f}",
                f"{row['s_per_minodes']:.4f}" if "s_per_minodes" in row else "-",
                f"{row['r2_inodes']:.3f}" if "r2_inodes" in row else "-",
            )
        console.print(ft)
    for c in claims(obs):
        console.print(f"measured: {c}", markup=False)


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
    import matplotlib.pyplot as plt  # after plots set the headless backend

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
    fig.suptitle("Recovery time after a crash (SIGKILL of the guest, or a dm-log-writes replay)"
                 " against size: mean, min-max")
    return _save(fig, out)


def _line(ax: Any, cell: str, by_size: Mapping[float, list[float]]) -> None:
    xs = sorted(by_size)
    mean = [sum(by_size[x]) / len(by_size[x]) for x in xs]
    lo = [m - min(by_size[x]) for m, x in zip(mean, xs, strict=True)]
    hi = [max(by_size[x]) - m for m, x in zip(mean, xs, strict=True)]
    ax.errorbar(xs, mean, yerr=[lo, hi], marker="o", capsize=4, label=cell)
