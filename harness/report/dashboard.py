"""The results page as a dashboard: a canned query per ``results table`` kind, and the
lab's charts drawn in the page from the store (``scenario results serve``, /-/dashboards/lab).

The SQL is never written twice: a kind's canned queries and its chart come from the
kind's own registered source and fields (``query.kind_sql``), the bug clusters from
``search.CLUSTERS_SQL``, the crash-verdict chart from its canned query.

The charts are Vega-Lite specifications for the ``datasette-dashboards`` plugin, which
ships Vega, Vega-Lite and vega-embed in its wheel: the page draws without the internet.
They render as SVG (``usermeta.embedOptions``), so a test finds the marks in the DOM.
"""

from __future__ import annotations

import json
from typing import Any

from harness.outcome import COLOURS
from harness.report import query
from harness.report.patterns import CLASSES
from harness.store.db import Store

SLUG = "lab"

# One row per campaign execution (a nightly run is one): its elements, and the findings
# and harness failures of their runs, oldest first.
FINDINGS_PER_CAMPAIGN = """SELECT c.name AS campaign, c.id AS campaign_id, c.started_at, c.status,
       count(*) AS elements,
       sum(e.status = 'done') AS done,
       sum(e.status IN ('failed', 'quarantined')) AS failed,
       COALESCE(sum(v.findings), 0) AS findings,
       COALESCE(sum(v.harness_failures), 0) AS harness_failures
  FROM campaigns c
  JOIN campaign_elements e ON e.campaign_id = c.id
  LEFT JOIN v_runs v ON v.run_id = e.run_id
 GROUP BY c.id
 ORDER BY c.started_at"""


# The crash states' outcomes per filesystem, from the runs' stored accounts (what
# `results show` prints), not counted again from the verdicts: an outcome the kind's rule
# expects (ext2's repaired) is its own row. Runs with crash states only.
OUTCOMES_BY_FS_MODE = """SELECT r.fs, r.data_mode, o.outcome, o.expected, o.counts_as,
       sum(o.n) AS states
  FROM v_run_outcomes o
  JOIN v_runs r ON r.run_id = o.run_id
 WHERE EXISTS (SELECT 1 FROM verdicts v WHERE v.run_id = o.run_id)
 GROUP BY r.fs, r.data_mode, o.outcome, o.expected, o.counts_as
 ORDER BY r.fs, r.data_mode, states DESC"""


def kind_queries(store: Store) -> dict[str, tuple[str, str, str]]:
    """Canned queries (name -> title, description, SQL): ``table_KIND`` (n, mean, min,
    max per group) and ``table_KIND_outcomes`` (items per group and outcome) for every
    kind, grouped by its default fields."""
    out: dict[str, tuple[str, str, str]] = {}
    for name, k in sorted(query.table_kinds().items()):
        sql = query.kind_sql(store, name)
        by = ", ".join(sql.by) or "nothing"
        see = f"`scenario results table {name} --by {','.join(sql.by)}`"
        # recovery: seconds per phase; io, the ZFS scans: one value per metric
        what = f"{k.value} per {k.split}" if k.unit else f"each {k.split}"
        what = what if k.split else k.value
        out[f"table_{name}"] = (
            f"{name}: {what} by {by}",
            f"{k.help[:1].upper()}{k.help[1:]}. n, mean, min, max of {k.value}"
            f" ({k.unit or 'per metric'}); p50 and p95: {see}.",
            sql.stats,
        )
        if sql.counts:
            out[f"table_{name}_outcomes"] = (
                f"{name}: outcomes by {by}",
                f"How many items of each group ended in each outcome ({see}).",
                sql.counts,
            )
    return out


def _vl(mark: dict[str, Any], encoding: dict[str, Any], **more: Any) -> dict[str, Any]:
    """A Vega-Lite chart drawn as SVG."""
    return {
        "mark": {"tooltip": True, **mark},
        "encoding": encoding,
        "usermeta": {"embedOptions": {"renderer": "svg", "actions": False}},
        **more,
    }


def _where(sql: str, condition: str) -> str:
    return f"SELECT * FROM ({sql}) WHERE {condition}"


def _label(*fields: str) -> dict[str, Any]:
    # a group's fields as one axis label (a null field left out)
    parts = " + ' ' + ".join(f"(datum['{f}'] == null ? '' : datum['{f}'])" for f in fields)
    return {"calculate": parts, "as": "group"}


def _q(field: str, title: str, **more: Any) -> dict[str, Any]:
    return {"field": field, "type": "quantitative", "title": title, **more}


def _n(field: str, title: str, **more: Any) -> dict[str, Any]:
    return {"field": field, "type": "nominal", "title": title, **more}


_BARS = {"type": "bar"}
_LINE = {"type": "line", "point": True}
Chart = tuple[str, str, dict[str, Any]]  # title, SQL, Vega-Lite spec


def _outcomes(outcomes_sql: str) -> Chart:
    order = [str(o) for o in COLOURS]
    return (
        "Crash states per outcome, by filesystem and data mode",
        outcomes_sql,
        _vl(
            _BARS,
            {
                "x": _n("group", "filesystem, data mode"),
                "y": _q("states", "crash states", aggregate="sum"),
                "color": _n(
                    "outcome", "outcome", scale={"domain": order, "range": list(COLOURS.values())}
                ),
                "order": {"field": "rank"},
                # what the kind's rule expects: the outcome's colour, faded
                "opacity": {"condition": {"test": "datum.expected", "value": 0.35}, "value": 1},
                "detail": _n("expected", "expected"),
            },
            transform=[
                _label("fs", "data_mode"),
                {"calculate": f"indexof({json.dumps(order)}, datum.outcome)", "as": "rank"},
            ],
        ),
    )


def _findings_per_nightly() -> Chart:
    return (
        "Findings per campaign run (nightly), oldest first",
        FINDINGS_PER_CAMPAIGN,
        _vl(
            _BARS,
            {
                "x": _n("started_at", "campaign started (UTC)", type="ordinal"),
                "y": _q("findings", "findings (unexpected, over the elements' runs)"),
                "color": _n("campaign", "campaign"),
            },
        ),
    )


def _recovery_vs_size(store: Store) -> Chart:
    recovery = query.kind_sql(store, "recovery", ["cell", "size"]).stats
    return (
        "Recovery time against filesystem size: mean per cell and phase",
        _where(recovery, "size IS NOT NULL"),
        _vl(
            _LINE,
            {
                "x": _q("size", "filesystem size (GiB)", scale={"type": "log", "base": 2}),
                "y": _q("mean", "seconds (mean)"),
                "color": _n("cell", "cell"),
                "strokeDash": _n("phase", "phase"),
            },
        ),
    )


def _resilver_vs_fill(store: Store) -> Chart:
    resilver = query.kind_sql(store, "resilver", ["layout", "fill"]).stats
    x, y = _q("fill", "pool fill (fraction)"), _q("mean", "resilver seconds (mean)")
    sql = _where(resilver, "metric = 'seconds' AND fill IS NOT NULL")
    spec = _vl(_LINE, {"x": x, "y": y, "color": _n("layout", "layout")})
    return "ZFS resilver time against pool fill, per layout", sql, spec


def _pattern_classes(store: Store) -> Chart:
    patterns = query.kind_sql(store, "patterns", ["fs", "mount_options", "pattern"]).counts
    assert patterns is not None  # the patterns kind counts classes
    return (
        "What crash states left of each target file, per cell",
        patterns,
        _vl(
            _BARS,
            {
                "x": _n("group", "filesystem, mount options, pattern"),
                "y": _q("n", "(crash state, file) pairs", aggregate="sum"),
                "color": _n("outcome", "class", scale={"domain": list(CLASSES)}),
            },
            transform=[_label("fs", "mount_options", "pattern")],
        ),
    )


def _io_per_cell(store: Store) -> Chart:
    io = query.kind_sql(store, "io", ["cell"]).stats
    return (
        "Workload throughput per cell (MB/s; compare within one accelerator)",
        _where(io, "metric IN ('write_mbps', 'read_mbps')"),
        _vl(
            _BARS,
            {
                "x": _n("group", "cell, accelerator"),
                "xOffset": _n("metric", "metric"),
                "y": _q("mean", "MB/s (mean)"),
                "color": _n("metric", "metric"),
            },
            transform=[_label("cell", "accelerator")],
        ),
    )


# The kinds' charts, as their records list them (harness/experiments/*/kind.py), each
# with the command that makes its first data.
RECOVERY_VS_SIZE = query.Panel(
    "recovery_vs_size", _recovery_vs_size, "scenario run recovery-vs-size"
)
RESILVER_VS_FILL = query.Panel("resilver_vs_fill", _resilver_vs_fill, "scenario run resilver-sweep")
PATTERN_CLASSES = query.Panel("pattern_classes", _pattern_classes, "scenario run replace-rename")
IO_PER_CELL = query.Panel("io_per_cell", _io_per_cell, "scenario run journal-cost")
# ... and the lab's own two.
_MAKE = {
    "outcomes": "scenario run ext4-ordered-fsync",
    "findings_per_nightly": "scenario campaign run campaigns/nightly.toml",
}


def charts(store: Store, db_name: str, outcomes_sql: str) -> dict[str, dict[str, Any]]:
    """slug -> the plugin's chart: title, database, SQL and Vega-Lite spec (``display``):
    the lab's two, then every kind's. A chart whose query has no row in ``store`` (the
    snapshot the page serves, so it stays true while served) is a note instead of empty
    axes: no runs of this kind yet, and the command that makes one."""
    out = {"outcomes": _outcomes(outcomes_sql), "findings_per_nightly": _findings_per_nightly()}
    make = dict(_MAKE)
    for p in query.panels():
        out[p.slug], make[p.slug] = p.build(store), p.make
    return {
        slug: (
            {"title": title, "db": db_name, "query": sql, "library": "vega-lite", "display": spec}
            if store.has_rows(sql)
            else {"title": title, "library": "markdown", "display": empty(title, make[slug])}
        )
        for slug, (title, sql, spec) in out.items()
    }


def empty(title: str, make: str) -> str:
    """What an empty chart says instead of empty axes."""
    return f"**{title}**\n\nNo runs of this kind yet. Make one with `{make}`."


def layout() -> list[list[str]]:
    """Two charts a row under the "about" row: the lab's, then the kinds' in their order."""
    slugs = ["outcomes", "findings_per_nightly", *(p.slug for p in query.panels())]
    rows = [slugs[i : i + 2] for i in range(0, len(slugs), 2)]
    return [["about", "about"], *([*r, r[0]] if len(r) == 1 else r for r in rows)]


def dashboard(store: Store, db_name: str, outcomes_sql: str, where: str) -> dict[str, Any]:
    """The ``datasette-dashboards`` plugin's configuration: one dashboard, ``lab``."""
    about = (
        f"{where} Each chart's title opens it alone; its numbers are canned queries of"
        f" [{db_name}](/{db_name}) (`table_KIND`: one per `scenario results table KIND`)."
    )
    return {
        SLUG: {
            "title": "crashlab: the lab at a glance",
            "description": "Charts drawn from the store's snapshot.",
            "layout": layout(),
            "charts": {
                "about": {"library": "markdown", "display": about},
                **charts(store, db_name, outcomes_sql),
            },
        }
    }
