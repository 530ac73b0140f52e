"""Application update patterns (``workload.type = "app"``): what crash states left of
each target file, counted per cell.

The crash experiment stores one observation per (crash state, target) with the target's
class (``harness/guest/apppat.py``: new, old, partial, empty, zeros, missing, garbage; SQLite:
committed, rolled-back, corrupt, missing). This module makes them

* a grouped table: ``scenario results table patterns --by fs,mount_options,pattern``
  (per cell, how many crash states left each class; the size found, in bytes);
* a stacked-bar chart: ``scenario results plot patterns --by ...``;
* one line per cell in the run summary ("ext4 data=ordered,noauto_da_alloc, rename
  without fsync: 37 of 60 (state, file) pairs left the target empty").

Which classes are findings is not decided here: the oracle and the SQLite promise did
that per state (``data_loss``); these counts are the measurement.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.report import query
from harness.store.db import Store

# Best first; a class not listed here comes after these.
CLASSES = (
    "new", "committed", "old", "rolled-back", "partial", "empty", "zeros", "missing", "garbage",
    "corrupt",
)  # fmt: skip
# What a class means, in the summary's words.
SAID = {
    "new": "held the new content",
    "committed": "held every committed transaction",
    "old": "held the old content",
    "rolled-back": "lost committed transactions",
    "partial": "held a partial write",
    "empty": "left the file empty",
    "zeros": "left NUL bytes where data was due",
    "missing": "lost the file's name",
    "garbage": "left garbage in the file",
    "corrupt": "left the database corrupt",
}

DEFAULT_BY = ("fs", "mount_options", "pattern")
_SOURCE = (
    "SELECT run_id, json_extract(cell, '$.pattern') AS pattern,"
    " json_extract(cell, '$.mount_options') AS mount_options,"
    " json_extract(cell, '$.workload') AS workload, json_extract(cell, '$.target') AS target,"
    " json_extract(metrics, '$.class') AS outcome, json_extract(metrics, '$.size') AS size"
    " FROM observations WHERE json_extract(metrics, '$.class') IS NOT NULL"
)

TABLE = query.TableKind(
    name="patterns",
    help="application update patterns: crash states per class of each target file",
    source=_SOURCE,
    fields={
        "pattern": "o.pattern",
        "mount_options": "o.mount_options",
        "workload": "o.workload",
        "target": "o.target",
        "class": "o.outcome",
    },
    value="size",
    counts_source=_SOURCE,
    unit="B",
    default_by=DEFAULT_BY,
    outcome_order=CLASSES,
    empty_hint="no pattern classes stored yet: `scenario run replace-rename`",
)


def cells(store: Store, run_id: str) -> list[tuple[tuple[Any, ...], dict[str, int]]]:
    """One run's (fs, mount options, pattern) cells and their class counts."""
    table = query.grouped(store, "patterns", list(DEFAULT_BY), [run_id])
    return [(g.key, dict(g.counts)) for g in table.groups]


def summary_lines(store: Store, run_id: str) -> list[str]:
    """One line per cell: what most of its states left, and the worst class seen."""
    lines = []
    for (fs, opts, pattern), counts in cells(store, run_id):
        n = sum(counts.values())
        ranked = sorted(counts, key=_rank)
        worst = ranked[-1]
        # One count per (crash state, target file): a case has workload.files targets.
        said = f"{counts[worst]} of {n} (state, file) pairs {SAID.get(worst, 'were ' + worst)}"
        if worst != ranked[0]:
            said += f" ({', '.join(f'{c} {counts[c]}' for c in ranked)})"
        lines.append(f"{fs} {opts}, {pattern}: {said}")
    return lines


def _rank(c: str) -> int:
    return CLASSES.index(c) if c in CLASSES else len(CLASSES)


def plot_patterns(store: Store, by: Sequence[str], out: Path, runs: Sequence[str] = ()) -> Path:
    """Stacked bars: per cell, how many crash states left each class.

    :raise InputError: unknown field or run. :raise plots.NoData: nothing stored.
    """
    from harness.report import plots

    plt = plots.pyplot()

    table = query.grouped(store, "patterns", list(by), runs)
    if not table.groups:
        raise plots.NoData(table.kind.empty_hint)
    labels = [plots._label(table.by, g.key) for g in table.groups]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(labels) + 2), 5.5))
    bottom = [0] * len(labels)
    colours = plt.get_cmap("RdYlGn_r")  # one colour per class, whichever are present
    for cls in sorted(table.outcomes, key=_rank):
        heights = [g.counts.get(cls, 0) for g in table.groups]
        ax.bar(labels, heights, bottom=bottom, label=cls, color=colours(_rank(cls) / len(CLASSES)))
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_ylabel("(crash state, file) pairs")
    ax.set_title("what crash states left of each target, by " + ", ".join(table.by))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.tick_params(axis="x", labelsize=7, rotation=90)
    return plots._save(fig, out)


def _plot(store: Store, by: Sequence[str], out: Path, runs: Sequence[str]) -> Path:
    return plot_patterns(store, by or DEFAULT_BY, out, runs)  # --by "": the default too


PLOT = query.Plot("patterns", _plot, DEFAULT_BY)
