"""The store's schema: ordered migrations (``PRAGMA user_version`` counts the ones
applied; 1 to 5 are ``firstmigrations.py``'s) and the set of tables a crashlab store must
have. A change to the schema is a new migration appended here, never an edit of an
applied one."""

from __future__ import annotations

from harness.store.firstmigrations import (
    _FINDINGS_IN,
    _HARNESS_IN,
    _MIGRATION_1,
    _MIGRATION_2,
    _MIGRATION_3,
    _MIGRATION_4,
    _MIGRATION_5,
)

# v_runs as migration 6 made it and migration 9 kept it, up to its account's columns.
_V_RUNS_SINCE_6 = """
    CREATE VIEW v_runs AS
    SELECT r.id AS run_id, r.scenario, r.kind, r.fs,
           COALESCE(json_extract(r.params, '$.fs.data_mode'),
                    json_extract(r.params, '$.data_mode')) AS data_mode,
           r.seed, r.status, r.exit_status, r.expect, r.guest_kernel AS kernel,
           r.accelerator, r.host,
           r.started_at, r.finished_at,
           round((julianday(r.finished_at) - julianday(r.started_at)) * 86400, 1)
               AS duration_seconds,
           (SELECT count(*) FROM verdicts v WHERE v.run_id = r.id) AS states,
           (SELECT COALESCE(sum(o.n), 0) FROM v_run_outcomes o WHERE o.run_id = r.id) AS items,
"""

# Each migration is a list of statements run in one transaction with the version bump.
# Never edit a released migration: append a new one.

# 6: one account of every outcome (harness/outcome.py ``Account``). Every kind keeps its
# items where it always did (verdicts, observations, zfs_scans); ``v_item_outcomes`` is
# their one view, and the lifecycle writes each run's account from it -- counts by
# outcome, split by whether the kind's rule expects the outcome -- with the run's exit
# status, after every item. Campaigns, ``results`` and the controls read these, never a
# kind's own table. Runs stored before this migration get their counts (nothing marked
# expected: the rules need the scenario, which SQL does not have) and no exit status.
_MIGRATION_6 = [
    "ALTER TABLE runs ADD COLUMN exit_status INTEGER",
    # A known-answer control's answer ("findings" | "clean"): part of the account.
    "ALTER TABLE runs ADD COLUMN expect TEXT",
    "UPDATE runs SET expect = json_extract(summary, '$.expect') WHERE summary IS NOT NULL",
    """
    CREATE TABLE run_outcomes (
        run_id    TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        outcome   TEXT NOT NULL,
        expected  INTEGER NOT NULL CHECK (expected IN (0, 1)),
        n         INTEGER NOT NULL,
        PRIMARY KEY (run_id, outcome, expected)
    )
    """,
    """
    CREATE VIEW v_item_outcomes AS
    SELECT v.run_id, v.state_id AS item, v.outcome, s.params AS detail, 'verdicts' AS source
      FROM verdicts v
      JOIN crash_states s ON s.run_id = v.run_id AND s.id = v.state_id
    UNION ALL
    SELECT run_id, item, outcome,
           json_object('cell', json(cell), 'metrics', json(metrics)), 'observations'
      FROM observations WHERE outcome IS NOT NULL
    UNION ALL
    SELECT run_id, COALESCE(item, 'scan-' || id), outcome,
           json_object('expected_loss', expected_loss, 'cell', json(cell)), 'zfs_scans'
      FROM zfs_scans WHERE outcome IS NOT NULL
    """,
    """
    INSERT INTO run_outcomes (run_id, outcome, expected, n)
    SELECT run_id, outcome, 0, count(*) FROM v_item_outcomes GROUP BY run_id, outcome
    """,
    # What every reader counts: the lifecycle's account of a run, or, for a run it never
    # accounted for (written by a tool or a test), its items with nothing expected.
    """
    CREATE VIEW v_run_outcomes AS
    SELECT run_id, outcome, expected, n FROM run_outcomes
    UNION ALL
    SELECT i.run_id, i.outcome, 0, count(*) FROM v_item_outcomes i
     WHERE NOT EXISTS (SELECT 1 FROM run_outcomes o WHERE o.run_id = i.run_id)
     GROUP BY i.run_id, i.outcome
    """,
    "DROP VIEW v_runs",
    _V_RUNS_SINCE_6
    + f"""           (SELECT COALESCE(sum(o.n), 0) FROM v_run_outcomes o WHERE o.run_id = r.id
                AND o.expected = 0 AND o.outcome
                IN {_FINDINGS_IN}) AS findings,
           (SELECT COALESCE(sum(o.n), 0) FROM v_run_outcomes o WHERE o.run_id = r.id
                AND o.expected = 1) AS expected_outcomes,
           (SELECT COALESCE(sum(o.n), 0) FROM v_run_outcomes o WHERE o.run_id = r.id
                AND o.outcome IN {_HARNESS_IN}) AS harness_failures
      FROM runs r
    """,
]

# 7: every distinct crash state is checked once (issue 23). ``identity`` is the replayed
# image's content identity (harness/replay/replayer.py ``Identity``) and ``check_key``
# everything else a verdict depends on (harness/crashstate/reuse.py says what);
# a state whose (check_key, identity) was judged before takes that verdict, and
# ``reused_from`` names the "run_id/state_id" that was checked. NULL: not known (states
# stored before this migration, kinds that keep no identity), never reused.
_MIGRATION_7 = [
    "ALTER TABLE crash_states ADD COLUMN identity TEXT",
    "ALTER TABLE crash_states ADD COLUMN check_key TEXT",
    "ALTER TABLE crash_states ADD COLUMN reused_from TEXT",
    "CREATE INDEX crash_states_identity ON crash_states (identity, check_key)",
]

# 8: a crash during recovery (harness/crashstate/recoverycrash.py): a state cut
# from the log of the filesystem's recovery of another state of the run names that
# state, ``parent``, so a finding names both. NULL: an ordinary crash state.
_MIGRATION_8 = ["ALTER TABLE crash_states ADD COLUMN parent TEXT"]

# 9: the account's classification, stored (issue 36). ``outcome_classes`` says how every
# outcome counts in a run's account, expected or not -- a finding, expected, the lab's
# (harness), clean or skipped -- as harness/outcome.py ``classes()`` decides; the store
# rewrites its rows whenever outcome.py's differ (harness/store/opening.py), so this
# migration leaves it empty. ``expected_items`` names the items a kind's rule marked
# expected, written with the account. The views read both instead of restating which
# outcomes are findings: ``v_run_outcomes`` and ``v_states`` gain ``counts_as``, ``v_runs``
# counts by it. Runs stored before this migration keep their counts (``run_outcomes``),
# but none of their items is marked expected in ``v_states``.
_MIGRATION_9 = [
    """
    CREATE TABLE outcome_classes (
        outcome    TEXT NOT NULL,
        expected   INTEGER NOT NULL CHECK (expected IN (0, 1)),
        severity   INTEGER NOT NULL,
        counts_as  TEXT NOT NULL
                   CHECK (counts_as IN ('finding', 'expected', 'harness', 'clean', 'skipped')),
        PRIMARY KEY (outcome, expected)
    )
    """,
    """
    CREATE TABLE expected_items (
        run_id  TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        item    TEXT NOT NULL,
        PRIMARY KEY (run_id, item)
    )
    """,
    "DROP VIEW v_runs",
    "DROP VIEW v_run_outcomes",
    "DROP VIEW v_states",
    """
    CREATE VIEW v_run_outcomes AS
    SELECT o.run_id, o.outcome, o.expected, o.n, c.counts_as
      FROM (SELECT run_id, outcome, expected, n FROM run_outcomes
            UNION ALL
            SELECT i.run_id, i.outcome, 0, count(*) FROM v_item_outcomes i
             WHERE NOT EXISTS (SELECT 1 FROM run_outcomes r WHERE r.run_id = i.run_id)
             GROUP BY i.run_id, i.outcome) o
      LEFT JOIN outcome_classes c ON c.outcome = o.outcome AND c.expected = o.expected
    """,
    _V_RUNS_SINCE_6
    + """           (SELECT COALESCE(sum(o.n), 0) FROM v_run_outcomes o WHERE o.run_id = r.id
                AND o.counts_as = 'finding') AS findings,
           (SELECT COALESCE(sum(o.n), 0) FROM v_run_outcomes o WHERE o.run_id = r.id
                AND o.expected = 1) AS expected_outcomes,
           (SELECT COALESCE(sum(o.n), 0) FROM v_run_outcomes o WHERE o.run_id = r.id
                AND o.counts_as = 'harness') AS harness_failures
      FROM runs r
    """,
    """
    CREATE VIEW v_states AS
    SELECT r.id AS run_id, r.scenario, r.fs,
           COALESCE(json_extract(r.params, '$.fs.data_mode'),
                    json_extract(r.params, '$.data_mode')) AS data_mode,
           r.guest_kernel AS kernel, r.accelerator, r.seed,
           s.id AS state_id, s.generator, s.prefix, s.last_mark, v.outcome,
           (SELECT sum(t.seconds) FROM recovery_times t
             WHERE t.run_id = s.run_id AND t.state_id = s.id) AS recovery_seconds,
           s.description,
           (x.item IS NOT NULL) AS expected, c.counts_as
      FROM crash_states s
      JOIN runs r ON r.id = s.run_id
      LEFT JOIN verdicts v ON v.run_id = s.run_id AND v.state_id = s.id
      LEFT JOIN expected_items x ON x.run_id = s.run_id AND x.item = s.id
      LEFT JOIN outcome_classes c ON c.outcome = v.outcome AND c.expected = (x.item IS NOT NULL)
    """,
]

# 10: the promise a finding broke (issue 37): ``profile``, the oracle's guarantee profile
# the state was judged by (posix, fsync-names, ordered-metadata); ``promise``, the weakest
# of them a failed requirement broke (posix: the floor); ``rule``, the oracle rule or the
# checker that saw it (harness/check/promises.py). NULL: stored before this migration, a
# state no oracle judged, or (promise, rule) no finding.
_MIGRATION_10 = [
    "ALTER TABLE verdicts ADD COLUMN profile TEXT",
    "ALTER TABLE verdicts ADD COLUMN promise TEXT",
    "ALTER TABLE verdicts ADD COLUMN rule TEXT",
]

# 11: the seconds of a run's phases no item row holds (issue 38): a search's recording
# guest boots (one per batch, item "boot:N" counted from the batch's first workload),
# and the cutting of crash states (item "cut:WORKLOAD", the replay walk of that
# workload's states). Record seconds stay in each workload's observation, check seconds
# in ``checks``. Stores before this migration have no rows here: their boot and cut read
# as unknown, not as zero.
_MIGRATION_11 = [
    """
    CREATE TABLE run_phases (
        run_id   TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        item     TEXT NOT NULL,
        phase    TEXT NOT NULL,
        seconds  REAL NOT NULL,
        PRIMARY KEY (run_id, item, phase)
    )
    """,
]

# 12: promises a configuration waived (issue 46): ``expected_items.waiver`` names the
# option that gave up the promise an expected item's outcome breaks (harness/waivers.py:
# barrier=0 on a volatile cache, ...). NULL: the kind's own rule expected it (repaired
# without a journal), or stored before this migration.
_MIGRATION_12 = ["ALTER TABLE expected_items ADD COLUMN waiver TEXT"]

MIGRATIONS: list[list[str]] = [
    _MIGRATION_1,
    _MIGRATION_2,
    _MIGRATION_3,
    _MIGRATION_4,
    _MIGRATION_5,
    _MIGRATION_6,
    _MIGRATION_7,
    _MIGRATION_8,
    _MIGRATION_9,
    _MIGRATION_10,
    _MIGRATION_11,
    _MIGRATION_12,
]
SCHEMA_VERSION = len(MIGRATIONS)
ZFS_SCAN_EXTRA = frozenset(
    stmt.split("ADD COLUMN ")[1].split()[0]
    for stmt in (*_MIGRATION_3, *_MIGRATION_4, *_MIGRATION_5)
    if "ADD COLUMN" in stmt
)
_ZFS_JSON_COLUMNS = ("cell", "fault", "phases", "scans", "progress")
_TABLES = frozenset(
    {
        "runs",
        "logs",
        "run_logs",
        "crash_states",
        "checks",
        "recovery_times",
        "verdicts",
        "zfs_scans",
        "campaigns",
        "campaign_elements",
        "log_events",
        "observations",
        "run_outcomes",
        "outcome_classes",
        "expected_items",
        "run_phases",
    }
)
