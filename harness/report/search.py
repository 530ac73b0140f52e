"""Search runs: findings clustered by symptom (``scenario results bugs RUN``) and the
workloads table (``scenario results table workloads --by fs,op_class``).

A cluster is one symptom -- filesystem, outcome, oracle rule, the broken name's role,
op classes -- over every workload that showed it, listed with its smallest workload
first (fewest ops, then shortest): the one a developer reads and reproduces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from harness.outcome import Outcome
from harness.report import known, query
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

    @property
    def known(self) -> known.Known | None:
        """The triaged finding it matches (docs/findings/known.toml); None: new."""
        return known.label(self.symptom)

    def to_json(self) -> dict[str, Any]:
        wid, ops = self.smallest
        return {
            **self.symptom,
            "states": len(self.states),
            "workloads": len(self.workloads),
            "smallest": {"workload": wid, "ops": ops, "state": self.to_triage},
            "known": known.to_json(self.symptom),
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
    t = Table("#", *KEY, "workloads", "states", "smallest workload", "known")
    for i, c in enumerate(found[:limit] if limit else found, 1):
        wid, ops = c.smallest
        k = c.known
        t.add_row(
            str(i), *(c.symptom[k] for k in KEY), str(len(c.workloads)), str(len(c.states)),
            f"{wid}: {ops}", k.name if k else "new",
        )  # fmt: skip
    console.print(t)
    if limit and len(found) > limit:
        console.print(f"... and {len(found) - limit} more clusters", markup=False)
    shown = found[:limit] if limit else found
    console.print("a state of each smallest workload, for `scenario triage STATE-ID`:")
    for i, c in enumerate(shown, 1):
        console.print(f"  {i}: {c.to_triage}", markup=False)
    known.print_labels(console, [c.symptom for c in shown])


# One row per recorded workload; its states' verdicts are counted per outcome.
_WORKLOADS = (
    "SELECT run_id, json_extract(cell, '$.op_class') AS op_class,"
    " json_extract(cell, '$.persistence') AS persistence, json_extract(cell, '$.seq') AS seq,"
    " json_extract(metrics, '$.status') AS status, item,"
    " json_extract(metrics, '$.record_seconds') AS record_seconds"
    " FROM observations WHERE item LIKE 'workload:%'"
)
_COLS = "w.op_class, w.persistence, w.seq, w.status"


def _of_workload(alias: str, column: str) -> str:
    """Join the workload a state (``WID/STATE``) or phase item (``KIND:WID``) is of."""
    wid = (
        f"substr({alias}.{column}, 1, instr({alias}.{column}, '/') - 1)"
        if column == "state_id"
        else f"substr({alias}.{column}, instr({alias}.{column}, ':') + 1)"
    )
    return "(" + _WORKLOADS + f") w ON w.run_id = {alias}.run_id AND w.item = 'workload:' || {wid}"


# The phases' seconds, one row each: a workload's recording (its observation), each host
# and guest check of its states (``checks``; a reused state's are 0 s), and what no item
# row holds (``run_phases``: the recording guests' boots, the cutting of each workload's
# states; none in stores before migration 11).
_PHASES = (
    "SELECT run_id, op_class, persistence, seq, status, NULL AS judged, 'record' AS phase,"
    " record_seconds AS seconds FROM (" + _WORKLOADS + ")"
    f" UNION ALL SELECT c.run_id, {_COLS}, 'checked', c.stage || ' check', c.seconds"
    " FROM checks c JOIN " + _of_workload("c", "state_id") + ""
    f" UNION ALL SELECT p.run_id, {_COLS}, NULL, p.phase, p.seconds"
    " FROM run_phases p LEFT JOIN " + _of_workload("p", "item") + " AND p.phase = 'cut'"
)
PHASES = ("record", "boot", "cut", "host check", "guest check")
# Counted per group: the workloads; their states generated (stored), distinct (no earlier
# state had the same image: checked, not reused), checked (by checks of their own) and
# findings (``counts_as`` from the store's outcome classes: harness/outcome.py's rule,
# the kind's expected items applied); then each state outcome, and `--by judged` splits
# them into checked and reused (an identical image judged before: docs/verdicts.md).
_STATE_ROWS = (
    f"SELECT v.run_id, {_COLS}, v.outcome, v.state_id,"
    " CASE WHEN s.reused_from IS NULL THEN 'checked' ELSE 'reused' END AS judged,"
    " s.reused_from, vs.counts_as"
    " FROM verdicts v JOIN " + _of_workload("v", "state_id") + ""
    " JOIN crash_states s ON s.run_id = v.run_id AND s.id = v.state_id"
    " LEFT JOIN v_states vs ON vs.run_id = v.run_id AND vs.state_id = v.state_id"
)
COUNTED = ("workloads", "generated", "distinct", "checked", "findings")
_COUNTS = (
    "SELECT run_id, op_class, persistence, seq, status, NULL AS judged, 'workloads' AS outcome"
    " FROM (" + _WORKLOADS + ")"
    " UNION ALL SELECT run_id, op_class, persistence, seq, status, judged, outcome"
    " FROM (" + _STATE_ROWS + ")"
    " UNION ALL SELECT run_id, op_class, persistence, seq, status, judged, 'generated'"
    " FROM (" + _STATE_ROWS + ")"
    " UNION ALL SELECT run_id, op_class, persistence, seq, status, judged, 'distinct'"
    " FROM (" + _STATE_ROWS + ") WHERE reused_from IS NULL"
    " UNION ALL SELECT x.run_id, x.op_class, x.persistence, x.seq, x.status, x.judged, 'checked'"
    " FROM (" + _STATE_ROWS + ") x WHERE x.reused_from IS NULL AND EXISTS (SELECT 1 FROM"
    " checks k WHERE k.run_id = x.run_id AND k.state_id = x.state_id AND k.checker != 'reused')"
    " UNION ALL SELECT run_id, op_class, persistence, seq, status, judged, 'findings'"
    " FROM (" + _STATE_ROWS + ") WHERE counts_as = 'finding'"
)
# An older file's `relog = true` is the family 'relog'; a run of no family is 'all'.
_FAMILY = (
    "(SELECT CASE WHEN COALESCE(json_extract(r.params, '$.workload.family'), '') != ''"
    " THEN json_extract(r.params, '$.workload.family')"
    " WHEN json_extract(r.params, '$.workload.relog') THEN 'relog' ELSE 'all' END"
    " FROM runs r WHERE r.id = o.run_id)"
)


def print_workloads(console: Console, result: query.GroupedTable) -> None:
    """One row per group: the counts, then each phase's total seconds (``-``: not
    stored, e.g. boot and cut in a store before migration 11), then the state outcomes."""
    by = list(result.by) or ["all"]
    t = Table(title="workloads: " + ", ".join(by), title_justify="left", box=box.SIMPLE_HEAD)
    outcomes = [o for o in result.outcomes if o not in COUNTED]
    for col in (*by, *COUNTED, *(f"{p} s" for p in PHASES), *outcomes):
        t.add_column(col, justify="left" if col in by else "right")
    for g in result.groups:
        keys = [str(v) if v is not None else "-" for v in g.key] or ["all"]
        secs = [f"{g.stats[p].n * g.stats[p].mean:,.1f}" if p in g.stats else "-" for p in PHASES]
        counts = [f"{g.counts.get(c, 0):,}" for c in (*COUNTED, *outcomes)]
        t.add_row(*keys, *counts[: len(COUNTED)], *secs, *counts[len(COUNTED) :])
    console.print(t)


TABLE = query.TableKind(
    name="workloads",
    help="search runs: workloads, states generated / distinct / checked, findings and the"
    " phases' seconds (record, boot, cut, host check, guest check), per op class or family",
    source=_PHASES,
    fields={
        "op_class": "o.op_class",
        "persistence": "o.persistence",
        "seq": "o.seq",
        "status": "o.status",
        "judged": "o.judged",
        "family": _FAMILY,
    },
    value="seconds",
    split="phase",
    split_order=PHASES,
    counts_source=_COUNTS,
    outcome_order=(*COUNTED, *(str(o) for o in sorted(Outcome, key=lambda o: o.severity))),
    default_by=("fs", "op_class"),
    empty_hint="no search runs stored yet: `scenario run ace-seq1-ci`",
    printer=print_workloads,
)
