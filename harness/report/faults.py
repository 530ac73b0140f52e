"""``scenario results table faults``: runtime-fault items (fsync-eio, dust-scrub,
flakey-drop-remount) grouped by filesystem, fault and the items' own fields.

Each item of a ``faults`` run is one row of the store's ``observations`` table; the
table counts their verdicts per group and summarises the one time each kind measures
(``metrics.seconds``: dust-scrub's scrub, drop-remount's recovery mount; fsync-eio
measures none, so its groups show counts only).
"""

from __future__ import annotations

from harness.report import query

SOURCE = (
    "SELECT o.run_id, o.item, o.cell, o.metrics, o.outcome,"
    " json_extract(o.metrics, '$.seconds') AS seconds,"
    " json_extract(r.params, '$.experiment') AS experiment,"
    " json_extract(r.params, '$.experiment') || ' ' || json_extract(r.params, '$.fault.mode')"
    " AS fault"
    " FROM observations o JOIN runs r ON r.id = o.run_id WHERE r.kind = 'faults'"
)

TABLE = query.TableKind(
    name="faults",
    help="runtime faults (dm-flakey, dm-dust): verdicts per filesystem and fault",
    source=SOURCE,
    fields={
        "fs": "json_extract(o.cell, '$.type')",
        "cell": "COALESCE(json_extract(o.cell, '$.name'), o.item)",
        "mount_options": "json_extract(o.cell, '$.mount_options')",
        "fault": "o.fault",
        "experiment": "o.experiment",
        "at": "json_extract(o.cell, '$.at')",
        "agree": "json_extract(o.metrics, '$.agree')",
        "outcome": "o.outcome",
    },
    value="seconds",
    counts_source=SOURCE,
    default_by=("fs", "fault"),
    empty_hint="no runtime-fault items stored yet: `scenario run fsync-eio` makes some",
)
