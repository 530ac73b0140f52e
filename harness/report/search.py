"""Search runs: findings clustered by symptom (``scenario results bugs RUN``) and the
workloads table (``scenario results table workloads --by fs,op_class``).

A cluster is one symptom -- filesystem, outcome, oracle rule, the broken name's role,
op classes -- over every workload that showed it, listed with its smallest workload
first (fewest ops, then shortest): the one a developer reads and reproduces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from harness.report import query
from harness.store.db import Store

KEY = ("fs", "outcome", "rule", "role", "op_class")


@dataclass
class Cluster:
    symptom: dict[str, str]
    states: list[str] = field(default_factory=list)
    workloads: dict[str, str] = field(default_factory=dict)  # id -> ops

    @property
    def smallest(self) -> tuple[str, str]:
        return min(self.workloads.items(), key=lambda w: (w[1].count(";"), len(w[1]), w[0]))

    @property
    def to_triage(self) -> str:
        """A state of the smallest workload: what ``scenario triage`` takes apart."""
        wid = self.smallest[0]
        return min(s for s in self.states if s.startswith(f"{wid}/"))

    def to_json(self) -> dict[str, Any]:
        wid, ops = self.smallest
        return {
            **self.symptom,
            "states": len(self.states),
            "workloads": len(self.workloads),
            "smallest": {"workload": wid, "ops": ops, "state": self.to_triage},
            "state_ids": self.states,
        }


def clusters(st: Store, run_id: str) -> list[Cluster]:
    """The run's findings by symptom, the commonest first."""
    out: dict[tuple[str, ...], Cluster] = {}
    for o in st.observations(st.resolve_run_id(run_id)):
        if not o["item"].startswith("bug:"):
            continue
        cell, m = o["cell"], o["metrics"]
        key = tuple(str(cell.get(k, "-")) for k in KEY)
        c = out.setdefault(key, Cluster(dict(zip(KEY, key, strict=True))))
        c.states.append(o["item"].removeprefix("bug:"))
        c.workloads[m["workload"]] = m["ops"]
    return sorted(out.values(), key=lambda c: (-len(c.workloads), -len(c.states)))


# The clusters as one statement, over every search run or those whose id starts with
# ``:run`` (``results serve``'s canned query): the same symptom key, and the smallest
# workload by the order of ``Cluster.smallest`` (op count, length, id) -- SQLite takes
# the bare columns of a group from the row its one min() picked.
_OPS, _WID = "json_extract(metrics, '$.ops')", "json_extract(metrics, '$.workload')"
CLUSTERS_SQL = (
    "SELECT "
    + "".join(f"COALESCE(json_extract(cell, '$.{k}'), '-') AS {k}, " for k in KEY)
    + f"count(DISTINCT {_WID}) AS workloads, count(*) AS states,"
    " count(DISTINCT run_id) AS runs,"
    f" {_WID} AS smallest_workload, {_OPS} AS smallest_ops,"
    f" min(printf('%06d %06d %s', length({_OPS}) - length(replace({_OPS}, ';', '')),"
    f" length({_OPS}), {_WID})) AS smallest_key"
    " FROM observations WHERE item LIKE 'bug:%' AND (:run = '' OR run_id LIKE :run || '%')"
    f" GROUP BY {', '.join(str(i + 1) for i in range(len(KEY)))}"
    " ORDER BY workloads DESC, states DESC"
)


def print_clusters(console: Console, found: list[Cluster], limit: int | None = None) -> None:
    if not found:
        console.print("no findings: no cluster", markup=False)
        return
    t = Table("#", *KEY, "workloads", "states", "smallest workload")
    for i, c in enumerate(found[:limit] if limit else found, 1):
        wid, ops = c.smallest
        t.add_row(
            str(i), *(c.symptom[k] for k in KEY), str(len(c.workloads)), str(len(c.states)),
            f"{wid}: {ops}",
        )  # fmt: skip
    console.print(t)
    if limit and len(found) > limit:
        console.print(f"... and {len(found) - limit} more clusters", markup=False)
    shown = found[:limit] if limit else found
    console.print("a state of each smallest workload, for `scenario triage STATE-ID`:")
    for i, c in enumerate(shown, 1):
        console.print(f"  {i}: {c.to_triage}", markup=False)


# One row per recorded workload; its states' verdicts are counted per outcome.
_WORKLOADS = (
    "SELECT run_id, json_extract(cell, '$.op_class') AS op_class,"
    " json_extract(cell, '$.persistence') AS persistence, json_extract(cell, '$.seq') AS seq,"
    " json_extract(metrics, '$.status') AS status, item,"
    " json_extract(metrics, '$.record_seconds') AS record_seconds"
    " FROM observations WHERE item LIKE 'workload:%'"
)
# ... and each state is also counted as checked or reused (an identical image judged
# before: docs/verdicts.md), so `--by op_class,judged` shows what checking cost.
_STATES = (
    "SELECT v.run_id, w.op_class, w.persistence, w.seq, w.status, v.outcome,"
    " CASE WHEN s.reused_from IS NULL THEN 'checked' ELSE 'reused' END AS judged"
    " FROM verdicts v JOIN (" + _WORKLOADS + ") w ON w.run_id = v.run_id"
    " AND w.item = 'workload:' || substr(v.state_id, 1, instr(v.state_id, '/') - 1)"
    " JOIN crash_states s ON s.run_id = v.run_id AND s.id = v.state_id"
)

TABLE = query.TableKind(
    name="workloads",
    help="search runs: workloads per op class, their recording time, their states' verdicts",
    source=_WORKLOADS,
    fields={
        "op_class": "o.op_class",
        "persistence": "o.persistence",
        "seq": "o.seq",
        "status": "o.status",
        "judged": "o.judged",
    },
    value="record_seconds",
    counts_source=_STATES,
    default_by=("fs", "op_class"),
    empty_hint="no search runs stored yet: `scenario run ace-seq1-ci`",
)
