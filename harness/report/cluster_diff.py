"""``scenario results diff A B [C ...] --by cluster``: the findings of search runs (or of
campaigns of searches) side by side, cluster by cluster.

Each argument is a run or a campaign. A run is one column; a campaign is one column per
kernel its runs booted (a campaign of one search over several kernels runs the same
seeded workloads on each, so its kernels compare directly; one campaign alone is then
enough). A column's clusters are ``search.clusters`` of each of its runs -- the grouping
``results bugs`` prints, by symptom -- merged by symptom across the column's runs (one
search per filesystem: the filesystem is in the symptom). Per cluster and column: how many
workloads and states show it, and a state of its smallest workload to triage, with its
run. What a column lacks is the question the diff answers: a finding on one kernel and
not the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from harness.errors import InputError
from harness.report import known, search
from harness.store.db import Store

Key = tuple[str, ...]


@dataclass
class Column:
    label: str  # what the user named, and the kernel
    kernel: str
    runs: list[str] = field(default_factory=list)
    found: dict[Key, list[tuple[str, search.Cluster]]] = field(default_factory=dict)

    def add(self, run_id: str, clusters: Sequence[search.Cluster]) -> None:
        self.runs.append(run_id)
        for c in clusters:
            key = tuple(c.symptom[k] for k in search.KEY)
            self.found.setdefault(key, []).append((run_id, c))

    def cell(self, key: Key) -> dict[str, Any] | None:
        """The cluster's counts in this column and a state to triage (of the smallest
        workload among its runs, in ``Cluster.smallest``'s order); None: absent."""
        got = self.found.get(key)
        if not got:
            return None
        run, best = min(got, key=lambda rc: _order(rc[1]))
        wid, ops = best.smallest
        return {
            "workloads": sum(len(c.workloads) for _, c in got),
            "states": sum(len(c.states) for _, c in got),
            "smallest": {"workload": wid, "ops": ops, "state": best.to_triage, "run": run},
        }


def _order(c: search.Cluster) -> tuple[int, int, str]:
    wid, ops = c.smallest
    return ops.count(";"), len(ops), wid


@dataclass(frozen=True)
class ClusterDiff:
    columns: Sequence[Column]
    rows: Sequence[tuple[dict[str, str], list[dict[str, Any] | None]]]
    notes: Sequence[str]

    @property
    def common(self) -> int:
        return sum(all(cells) for _, cells in self.rows)

    def only(self, i: int) -> int:
        """Clusters in column ``i`` and no other."""
        return sum(
            bool(cells[i]) and not any(c for j, c in enumerate(cells) if j != i)
            for _, cells in self.rows
        )

    def to_json(self) -> dict[str, Any]:
        labels = [c.label for c in self.columns]
        return {
            "columns": [
                {"label": c.label, "kernel": c.kernel, "runs": c.runs} for c in self.columns
            ],
            "clusters": [
                {**sym, "in": dict(zip(labels, cells, strict=True)), "known": known.to_json(sym)}
                for sym, cells in self.rows
            ],
            "common": self.common,
            "only": {c.label: self.only(i) for i, c in enumerate(self.columns)},
            "notes": list(self.notes),
        }


def columns(store: Store, names: Sequence[str]) -> tuple[list[Column], list[str]]:
    """The columns the arguments name (runs or campaigns, ids or unique prefixes), each
    with its runs' clusters; and notes on runs that cannot have any.

    :raise InputError: an unknown or ambiguous id.
    """
    cols: list[Column] = []
    notes: list[str] = []
    for name in names:
        ids = store.resolve_campaign_id(name)
        if len(ids) > 1:
            raise InputError(
                f"campaign id {name!r} is ambiguous", hint="it matches " + ", ".join(ids[:8])
            )
        if ids:
            runs = [str(r.run_id) for r in store.campaign_runs(ids[0]) if r.run_id]
            if not runs:
                notes.append(f"campaign {ids[0]} has no run yet")
            by_kernel: dict[str, Column] = {}
            for run_id in runs:
                k = store.run(run_id).guest_kernel or "-"
                col = by_kernel.setdefault(k, Column(f"{ids[0][:8]} {k}", k))
                _add(store, col, run_id, notes)
            cols += by_kernel.values()
        else:
            run = store.run(name)
            col = Column(f"{run.id[:8]} {run.guest_kernel or '-'}", run.guest_kernel or "-")
            _add(store, col, run.id, notes)
            cols.append(col)
    return cols, notes


def _add(store: Store, col: Column, run_id: str, notes: list[str]) -> None:
    run = store.run(run_id)
    if run.kind != "search":
        # one note per column and kind: a campaign of crash runs has dozens
        note = f"{col.label}: {run.kind} runs have no search findings to cluster:"
        at = next((i for i, n in enumerate(notes) if n.startswith(note)), None)
        if at is None:
            notes.append(f"{note} {run.id}")
        else:
            notes[at] += f" {run.id}"
    elif str(run.status) != "done":
        notes.append(f"run {run.id} ({run.scenario}) is {run.status}: its findings so far")
    col.add(run.id, search.clusters(store, run.id) if run.kind == "search" else [])


def diff_clusters(store: Store, names: Sequence[str]) -> ClusterDiff:
    """Every cluster of the columns ``names`` make, commonest first, with its cells.

    :raise InputError: an unknown id, or fewer than two columns to compare.
    """
    cols, notes = columns(store, names)
    if len(cols) < 2:
        raise InputError(
            f"{' '.join(names)}: one column to compare ({cols[0].label if cols else 'none'})",
            hint="give two runs or campaigns, or one campaign whose runs booted two kernels",
        )
    keys = sorted({k for c in cols for k in c.found})
    rows = [(dict(zip(search.KEY, k, strict=True)), [c.cell(k) for c in cols]) for k in keys]
    # In the most columns first, then by the most workloads: what is common leads, and
    # a cluster only one side has follows in the order `results bugs` gives it.
    rows.sort(key=lambda r: (-sum(map(bool, r[1])), -sum(c["workloads"] for c in r[1] if c)))
    return ClusterDiff(cols, rows, notes)


def print_diff(console: Console, d: ClusterDiff) -> None:
    """A line per column, a table of clusters (each column: workloads, states), the
    states to triage, and the counts common / only in each column."""
    for i, c in enumerate(d.columns):
        console.print(
            f"{_tag(i)}: {c.label} ({len(c.runs)} run(s): {' '.join(c.runs)})", markup=False
        )
    for note in d.notes:
        console.print(f"note: {note}", markup=False)
    if not d.rows:
        console.print("no findings in any column: no cluster", markup=False)
        return
    t = Table(
        "#", *search.KEY, *(_tag(i) for i in range(len(d.columns))), "smallest workload", "known"
    )
    for n, (sym, cells) in enumerate(d.rows, 1):
        shown = [f"{c['workloads']} wl / {c['states']} st" if c else "-" for c in cells]
        smallest = min(
            (c["smallest"] for c in cells if c), key=lambda s: (s["ops"].count(";"), len(s["ops"]))
        )
        t.add_row(
            str(n),
            *(sym[k] for k in search.KEY),
            *shown,
            f"{smallest['workload']}: {smallest['ops']}",
            k.name if (k := known.label(sym)) else "new",
        )
    console.print(t)
    console.print(
        "a state to triage (`scenario triage STATE-ID`), per cluster and column:", markup=False
    )
    for n, (_, cells) in enumerate(d.rows, 1):
        for i, cell in enumerate(cells):
            s = cell["smallest"] if cell else None
            where = f"{s['state']} (run {s['run']})" if s else "absent"
            console.print(f"  {n} {_tag(i)}: {where}", markup=False)
    counts = [f"{d.common} common to all"] + [
        f"{d.only(i)} only in {_tag(i)}" for i in range(len(d.columns))
    ]
    console.print(f"{len(d.rows)} clusters: " + ", ".join(counts), markup=False)
    known.print_labels(console, [sym for sym, _ in d.rows])


def _tag(i: int) -> str:
    """A column's short name in the table: A, B, C ..."""
    return chr(ord("A") + i) if i < 26 else f"#{i + 1}"
