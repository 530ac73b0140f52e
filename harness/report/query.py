"""Grouped tables over the store: ``scenario results table KIND --by FIELD,...``.

A *table kind* is one registered record (``TableKind``): the SQL that yields one
observation per row (it must have a ``run_id`` column; call its rows ``o``), the
observation's own groupable fields (name -> SQL over ``o``; a correlated subquery is
fine, it only runs when that field is asked for), the numeric column summarised (n,
mean, stdev, min, p50, p95, max), an optional column that splits the statistics
(recovery: ``phase``) and an optional SQL whose rows are counted per outcome
(recovery: one verdict per crash state; the fields must work over it too). Every kind
can also be grouped by any property of its run: the ``runs`` columns in ``RUN_FIELDS`` and every
leaf of the stored scenario parameters (``fs.disk_size``, ``workload.ops``, or just
``ops`` when the leaf name is unique).

A table kind belongs to the experiment kind whose items it reads: its record
(``harness/experiments/<kind>/kind.py`` ``KIND.tables``) lists it, and ``table_kinds()``
finds every one there -- the one list. Adding a table (the ZFS scans, say) is one record
in that tuple::

    query.TableKind(
        name="resilver",
        help="resilver time per pool layout and fill",
        source="SELECT run_id, layout, fill, repetition, seconds"
               " FROM zfs_scans WHERE kind = 'resilver'",
        fields={"layout": "o.layout", "fill": "o.fill", "repetition": "o.repetition"},
        value="seconds",
        default_by=("layout", "fill"),
    )

Run-level fields are computed once per run, not per row; SQLite hands back each
(run, fields, split)'s values as one ``group_concat`` string, and the percentiles
(SQLite has none) are computed in Python after one sort per group. That keeps 100,000
crash states with three phases each at about a quarter of a second
(``bench/bench_query.py``).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.outcome import Outcome
from harness.store.db import Phase, PhaseStats, Store, phase_stats
from harness.store.queries import counts_statement, stats_statement

# Properties of a run every table kind can be grouped by: name -> SQL over `runs r`.
RUN_FIELDS: dict[str, str] = {
    "scenario": "r.scenario",
    "kind": "r.kind",
    "fs": "r.fs",
    "data_mode": "COALESCE(json_extract(r.params, '$.fs.data_mode'),"
    " json_extract(r.params, '$.data_mode'))",
    "kernel": "r.guest_kernel",
    "accelerator": "r.accelerator",
    "host": "r.host",
    "seed": "r.seed",
    "status": "r.status",
    "run": "r.id",
    "image": "r.image_hash",
    "qemu": "r.qemu_version",
}


@dataclass(frozen=True)
class TableKind:
    """One kind of grouped table; see the module docstring for an example."""

    name: str
    help: str
    source: str  # SELECT with a run_id column, one row per observation
    value: str  # the numeric column summarised
    fields: Mapping[str, str] = field(default_factory=dict)  # name -> SQL over `o`
    split: str | None = None  # statistics per distinct value of this column
    split_order: tuple[str, ...] = ()  # how the split values are listed (others after)
    counts_source: str | None = None  # SELECT with run_id, the fields, and `outcome`
    unit: str = "s"
    default_by: tuple[str, ...] = ("scenario",)
    empty_hint: str = "no rows yet"
    outcome_order: tuple[str, ...] = ()  # how counted outcomes are listed (default: severity)
    # Fields every grouping gets (io: the accelerator, so TCG and KVM numbers never mix).
    always_by: tuple[str, ...] = ()
    # A table of its own instead of render.print_grouped: (console, GroupedTable) -> None.
    printer: Callable[[Any, Any], None] | None = None


@dataclass(frozen=True)
class Plot:
    """A ``results plot`` chart, listed by its experiment kind's record like its tables:
    ``draw(store, by, out, runs)`` writes the PNG ``out`` (``by``: --by, else
    ``default_by``; ``runs``: RUN if given, which ``needs_run`` charts require)."""

    name: str
    draw: Callable[[Store, Sequence[str], Path, Sequence[str]], Path]
    default_by: tuple[str, ...] = ()
    needs_run: bool = False


@dataclass(frozen=True)
class Panel:
    """A chart of the dashboard (``results serve``), listed by its experiment kind's
    record: ``build(store)`` gives its title, its SQL and its Vega-Lite spec."""

    slug: str
    build: Callable[[Store], tuple[str, str, dict[str, Any]]]
    make: str  # the command that makes its first data (what an empty chart says)


# The one way up from report/, and why: a table, a chart or a panel belongs to the
# experiment kind whose items it reads, so the kinds' records are the one list (a plugin
# lookup, as the scenario loader's; tests/test_layout.py allows these and no other).


def table_kinds() -> dict[str, TableKind]:
    """Every ``results table`` kind, by name, as the experiment kinds' records list them."""
    from harness.experiments import registry

    return {t.name: t for k in registry.kinds().values() for t in k.tables}


def plots() -> dict[str, Plot]:
    """Every ``results plot`` chart, by name, as the experiment kinds' records list them."""
    from harness.experiments import registry

    return {p.name: p for k in registry.kinds().values() for p in k.plots}


def panels() -> list[Panel]:
    """Every kind's dashboard chart, in the kinds' order."""
    from harness.experiments import registry

    return [p for k in registry.kinds().values() for p in k.panels]


# Recovery phases come from two places: crash-replay states (``recovery_times``, one row
# per state and phase) and recovery-time runs (``observations`` of kind ``recovery``, one
# row per item with its phases and its cell as JSON). Both read as (run, item, phase,
# seconds) plus the item's cell and metrics, NULL for crash states.
_RECOVERY_OBS = " FROM observations b JOIN runs rr ON rr.id = b.run_id AND rr.kind = 'recovery'"
RECOVERY = TableKind(
    name="recovery",
    help="recovery time of crash states (journal replay, fsck, mount, ...) and verdicts",
    source="SELECT run_id, state_id, phase, seconds, NULL AS cell, NULL AS facts"
    " FROM recovery_times UNION ALL"
    " SELECT b.run_id, b.item, p.key, p.value, b.cell, b.metrics"
    + _RECOVERY_OBS
    + ", json_each(b.metrics, '$.phases') p",
    fields={
        "generator": "(SELECT s.generator FROM crash_states s"
        " WHERE s.run_id = o.run_id AND s.id = o.state_id)",
        "outcome": "(SELECT v.outcome FROM verdicts v"
        " WHERE v.run_id = o.run_id AND v.state_id = o.state_id)",
        "phase": "o.phase",
        # recovery runs: the item's cell; crash states: their run's filesystem
        "fs": "COALESCE(json_extract(o.cell, '$.fs'),"
        " (SELECT r.fs FROM runs r WHERE r.id = o.run_id))",
        "features": "json_extract(o.cell, '$.features')",
        "size": "json_extract(o.cell, '$.size')",
        "cell": "json_extract(o.cell, '$.cell')",
        # how a recovery run's crash state was made (rows before methods: sigkill)
        "method": "CASE WHEN o.cell IS NOT NULL"
        " THEN COALESCE(json_extract(o.cell, '$.method'), 'sigkill') END",
        "files": "json_extract(o.facts, '$.population.files')",
        "inodes": "json_extract(o.facts, '$.population.inodes_used')",
    },
    value="seconds",
    split="phase",
    split_order=tuple(str(p) for p in Phase),
    counts_source="SELECT run_id, state_id, outcome, NULL AS phase, NULL AS cell,"
    " NULL AS facts FROM verdicts UNION ALL"
    " SELECT b.run_id, b.item, b.outcome, NULL, b.cell, b.metrics" + _RECOVERY_OBS,
    default_by=("fs", "data_mode"),
    empty_hint="no recovery times stored yet: run a crash or recovery scenario"
    " (`scenario run NAME`)",
)


@dataclass(frozen=True)
class Group:
    key: tuple[Any, ...]
    counted: int  # rows of counts_source (crash states for recovery); 0 without one
    counts: Mapping[str, int]
    stats: Mapping[str, PhaseStats]  # split value (or the value column's name) -> stats


@dataclass(frozen=True)
class GroupedTable:
    kind: TableKind
    by: tuple[str, ...]
    groups: Sequence[Group]
    splits: Sequence[str] = field(default_factory=list)
    outcomes: Sequence[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.name,
            "by": list(self.by),
            "unit": self.kind.unit,
            "groups": [
                {
                    "key": dict(zip(self.by, g.key, strict=True)),
                    "count": g.counted,
                    "outcomes": dict(g.counts),
                    "stats": {
                        name: {k: v for k, v in s.__dict__.items() if k != "phase"}
                        for name, s in g.stats.items()
                    },
                }
                for g in self.groups
            ],
        }


def kind(name: str) -> TableKind:
    """The registered table kind ``name``.

    :raise InputError: no such kind (the message lists the known ones).
    """
    kinds = table_kinds()
    if name not in kinds:
        raise InputError(
            f"unknown table {name!r}",
            hint=_did_you_mean(name, kinds) + "tables: " + ", ".join(sorted(kinds)),
        )
    return kinds[name]


def param_fields(store: Store) -> dict[str, str]:
    """Every leaf of the stored scenario parameters: field name -> SQL over ``runs r``.

    Dotted paths always work (``workload.ops``); a leaf name alone (``ops``) works when
    no other path ends in it.
    """
    paths = store.param_paths()
    # Each label quoted: SQLite's JSON paths take "mount_options" where a bare label with
    # an underscore is not matched the same way in every version.
    out = {
        p: "json_extract(r.params, '$." + ".".join(f'"{x}"' for x in p.split(".")) + "')"
        for p in paths
    }
    leaves: dict[str, list[str]] = {}
    for p in paths:
        leaves.setdefault(p.rpartition(".")[2], []).append(p)
    for leaf, full in leaves.items():
        if len(full) == 1 and leaf not in out:
            out[leaf] = out[full[0]]
    return out


def valid_fields(store: Store, k: TableKind) -> dict[str, str]:
    """Field name -> SQL expression (over ``o``, the kind's source, and ``r``, its run)."""
    fields = dict(k.fields)
    fields |= {f: e for f, e in RUN_FIELDS.items() if f not in fields}
    fields |= {f: e for f, e in param_fields(store).items() if f not in fields}
    return fields


def resolve_fields(store: Store, k: TableKind, by: Sequence[str]) -> list[tuple[str, str]]:
    """``by`` as (name, SQL) pairs.

    :raise InputError: an unknown field (the hint lists the valid ones).
    """
    valid = valid_fields(store, k)
    out = []
    for name in by:
        if name not in valid:
            local = [*k.fields, *RUN_FIELDS]
            params = sorted(f for f in valid if f not in local)
            raise InputError(
                f"unknown field {name!r} for table {k.name!r}",
                hint=_did_you_mean(name, valid)
                + "valid fields: "
                + ", ".join(local)
                + (("; parameters: " + ", ".join(params)) if params else ""),
            )
        out.append((name, valid[name]))
    return out


@dataclass(frozen=True)
class KindSQL:
    """A kind's grouping as SQL text (``results serve``'s canned queries and charts)."""

    by: tuple[str, ...]
    stats: str  # a row per group and split: n, mean, min, max
    counts: str | None  # a row per group and outcome: n


def kind_sql(store: Store, name: str, by: Sequence[str] | None = None) -> KindSQL:
    """``results table NAME --by ...`` as SQL: ``by`` (default: the kind's default
    fields), less the fields ``store`` has no value for (a parameter no run has).

    :raise InputError: unknown kind.
    """
    k = kind(name)
    valid = valid_fields(store, k)
    wanted = [*(k.default_by if by is None else by), *k.always_by]
    fields = [(f, valid[f]) for f in dict.fromkeys(wanted) if f in valid and f != k.split]
    counts = counts_statement(k.counts_source, fields) if k.counts_source else None
    return KindSQL(
        tuple(n for n, _ in fields), stats_statement(k.source, fields, k.split, k.value), counts
    )


def parse_by(text: str) -> list[str]:
    return [f.strip() for f in text.split(",") if f.strip()]


def grouped(store: Store, name: str, by: Sequence[str], runs: Sequence[str] = ()) -> GroupedTable:
    """The table ``name`` grouped by ``by``, optionally only over the runs ``runs``.

    :raise InputError: unknown kind, field or run id.
    """
    k = kind(name)
    # The split field already splits the statistics; as a key it would also split the
    # outcome counts, which are per item, not per phase, into rows of n = 0.
    by = [f for f in by if f != k.split]
    by = [*by, *(f for f in k.always_by if f not in by)]
    fields = resolve_fields(store, k, by)
    values, counts = collect(store, k, fields, runs)
    outcome_rank = {str(o): o.severity for o in Outcome}
    outcome_rank |= {o: i for i, o in enumerate(k.outcome_order)}
    outcomes = sorted(
        {o for c in counts.values() for o in c}, key=lambda o: (outcome_rank.get(o, 99), o)
    )
    splits = ordered_splits(k, values)
    groups = []
    for key in sorted(set(values) | set(counts), key=sort_key):
        per = values.get(key, {})
        c = counts.get(key, {})
        groups.append(
            Group(
                key=key,
                counted=sum(c.values()),
                counts={o: c[o] for o in outcomes if o in c},
                stats={s: summarise(s, per[s]) for s in splits if s in per},
            )
        )
    return GroupedTable(k, tuple(n for n, _ in fields), groups, splits, outcomes)


Values = dict[tuple[Any, ...], dict[str, list[float]]]
Counts = dict[tuple[Any, ...], dict[str, int]]


def ordered_splits(k: TableKind, values: Values) -> list[str]:
    rank = {s: i for i, s in enumerate(k.split_order)}
    return sorted({s for v in values.values() for s in v}, key=lambda s: (rank.get(s, 999), s))


def collect(
    store: Store, k: TableKind, fields: Sequence[tuple[str, str]], runs: Sequence[str] = ()
) -> tuple[Values, Counts]:
    """The raw values (group key -> split -> values) and outcome counts of a kind."""
    run_ids = [store.resolve_run_id(r) for r in runs]
    # Run-level fields once per run; the rest per row, in SQL.
    run_part = [i for i, (n, _) in enumerate(fields) if n not in k.fields]
    row_part = [i for i, (n, _) in enumerate(fields) if n in k.fields]
    run_keys = store.run_fields([fields[i][1] for i in run_part])

    def full_key(run_id: str, local: Sequence[Any]) -> tuple[Any, ...]:
        rk = run_keys.get(run_id, ())
        key: list[Any] = [None] * len(fields)
        for j, i in enumerate(run_part):
            key[i] = rk[j]
        for j, i in enumerate(row_part):
            key[i] = local[j]
        return tuple(key)

    local = [fields[i][1] for i in row_part]
    nlocal = len(row_part)
    values: Values = {}
    for row in store.grouped_values(k.source, local, k.split, k.value, run_ids):
        if row[-1] is None:
            continue
        s = k.value if k.split is None else str(row[-2])
        values.setdefault(full_key(row[0], row[1 : 1 + nlocal]), {}).setdefault(s, []).extend(
            map(float, str(row[-1]).split(","))
        )

    counts: Counts = {}
    if k.counts_source:
        for row in store.grouped_counts(k.counts_source, local, run_ids):
            c = counts.setdefault(full_key(row[0], row[1 : 1 + nlocal]), {})
            c[str(row[-2])] = c.get(str(row[-2]), 0) + int(row[-1])
    return values, counts


def summarise(name: str, values: list[float]) -> PhaseStats:
    """n, mean, stdev, min, p50, p95 and max of ``values`` (sorted in place); needs one."""
    values.sort()
    return phase_stats(name, values)


def sort_key(key: tuple[Any, ...]) -> tuple[tuple[int, Any], ...]:
    # None last, numbers numerically, everything else as text.
    return tuple(
        (2, "") if v is None else (0, v) if isinstance(v, int | float) else (1, str(v)) for v in key
    )


def _did_you_mean(name: str, choices: Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6)
    return ("did you mean " + " or ".join(repr(c) for c in close) + "? ") if close else ""


# --- export -------------------------------------------------------------------------

EXPORT_COLUMNS = (
    "run_id",
    "scenario",
    "fs",
    "data_mode",
    "kernel",
    "accelerator",
    "seed",
    "state_id",
    "generator",
    "prefix",
    "last_mark",
    "outcome",
)


def export_states(store: Store, runs: Sequence[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """One row per crash state of ``runs``: the columns of ``v_states`` plus one
    ``<phase>_seconds`` column per recovery phase present; returns (columns, rows).

    :raise InputError: an unknown or ambiguous run id.
    """
    ids = list(dict.fromkeys(store.resolve_run_id(r) for r in runs))
    rows: list[dict[str, Any]] = [
        dict(zip(EXPORT_COLUMNS, row, strict=True)) for row in store.state_rows(EXPORT_COLUMNS, ids)
    ]
    # Keep the order the runs were asked for.
    order = {r: i for i, r in enumerate(ids)}
    rows.sort(key=lambda r: order[r["run_id"]])
    times: dict[tuple[str, str], dict[str, float]] = {}
    for run_id, state_id, phase, seconds in store.recovery_times(ids):
        times.setdefault((run_id, state_id), {})[f"{phase}_seconds"] = float(seconds)
    rank = {f"{p}_seconds": i for i, p in enumerate(Phase)}
    phases = sorted({p for t in times.values() for p in t}, key=lambda p: (rank.get(p, 99), p))
    for r in rows:
        t = times.get((r["run_id"], r["state_id"]), {})
        r.update({p: t.get(p) for p in phases})
    return [*EXPORT_COLUMNS, *phases], rows


def export_observations(
    store: Store, runs: Sequence[str]
) -> tuple[list[str], list[dict[str, Any]]]:
    """One row per observation of ``runs`` (the items of kinds that store no crash-state
    table of their own, and the per-target classes of the application patterns): run_id,
    item and outcome, then every key of the item's cell and metrics as a column of its own
    (a cell key wins over a metric of the same name; nested values as JSON text).

    :raise InputError: an unknown or ambiguous run id.
    """
    rows: list[dict[str, Any]] = []
    for run_id in dict.fromkeys(store.resolve_run_id(r) for r in runs):
        for o in store.observations(run_id):
            flat = {k: _scalar(v) for k, v in (o["metrics"] | o["cell"]).items()}
            rows.append({"run_id": run_id, "item": o["item"], "outcome": o["outcome"]} | flat)
    columns = list(dict.fromkeys(k for r in rows for k in r)) or ["run_id", "item", "outcome"]
    return columns, rows


def _scalar(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else value
