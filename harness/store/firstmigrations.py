"""Migrations 1 to 5: the store's tables as the lab first laid them out -- runs, logs,
crash states, checks and verdicts (1); campaigns, log events and the views (2); the ZFS
lab's scans (3, 5) and one lifecycle's observations (4). Applied, so never edited: kept
apart from ``schema.py`` (the later migrations, the list and the tables a store must
have) so that each file reads in one sitting."""

from __future__ import annotations

from collections.abc import Iterable

from harness.outcome import FINDINGS, HARNESS, Outcome, by_severity


def _sql_set(outcomes: Iterable[Outcome]) -> str:
    """An SQL list of outcomes, least severe first. Migrations 2 and 6 take their sets
    from harness/outcome.py (the same text they always had); migration 9 replaced their
    views with ones that read the stored ``outcome_classes``."""
    return "(" + ", ".join(f"'{o}'" for o in by_severity(outcomes)) + ")"


_FINDINGS_IN = _sql_set(FINDINGS)
_HARNESS_IN = _sql_set(HARNESS)

# Each migration is a list of statements run in one transaction with the version bump.
# Never edit a released migration: append a new one (in schema.py).
_MIGRATION_1 = [
    """
    CREATE TABLE runs (
        id            TEXT PRIMARY KEY,
        scenario      TEXT NOT NULL,
        kind          TEXT NOT NULL,
        params        TEXT NOT NULL CHECK (json_valid(params)),
        seed          INTEGER,
        started_at    TEXT NOT NULL,
        finished_at   TEXT,
        status        TEXT NOT NULL DEFAULT 'running'
                      CHECK (status IN ('running', 'done', 'failed', 'interrupted')),
        host          TEXT,
        pid           INTEGER,
        accelerator   TEXT,
        guest_kernel  TEXT,
        qemu_version  TEXT,
        tool_versions TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(tool_versions)),
        image_hash    TEXT,
        fs            TEXT,
        summary       TEXT CHECK (summary IS NULL OR json_valid(summary))
    )
    """,
    "CREATE INDEX runs_started ON runs (started_at)",
    "CREATE INDEX runs_resume ON runs (scenario, seed, status)",
    """
    CREATE TABLE logs (
        hash      TEXT PRIMARY KEY,
        path      TEXT NOT NULL,
        entries   INTEGER NOT NULL,
        flushes   INTEGER NOT NULL,
        fuas      INTEGER NOT NULL,
        marks     INTEGER NOT NULL,
        discards  INTEGER NOT NULL,
        bytes     INTEGER NOT NULL,
        added_at  TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE run_logs (
        run_id    TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        log_hash  TEXT NOT NULL REFERENCES logs (hash),
        role      TEXT NOT NULL,
        PRIMARY KEY (run_id, log_hash, role)
    )
    """,
    # A state id is chosen by its generator (e.g. "fua-0042") and is unique per run, so
    # the same id in two runs names the same cut of the same workload.
    """
    CREATE TABLE crash_states (
        run_id       TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        id           TEXT NOT NULL,
        log_hash     TEXT NOT NULL REFERENCES logs (hash),
        generator    TEXT NOT NULL,
        params       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(params)),
        prefix       INTEGER NOT NULL,
        last_mark    TEXT,
        description  TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (run_id, id)
    )
    """,
    """
    CREATE TABLE checks (
        id           INTEGER PRIMARY KEY,
        run_id       TEXT NOT NULL,
        state_id     TEXT NOT NULL,
        stage        TEXT NOT NULL CHECK (stage IN ('host', 'guest')),
        checker      TEXT NOT NULL,
        outcome      TEXT NOT NULL,
        exit_status  INTEGER,
        seconds      REAL NOT NULL,
        output       TEXT NOT NULL DEFAULT '',
        created_at   TEXT NOT NULL,
        FOREIGN KEY (run_id, state_id) REFERENCES crash_states (run_id, id) ON DELETE CASCADE
    )
    """,
    "CREATE INDEX checks_state ON checks (run_id, state_id)",
    """
    CREATE TABLE recovery_times (
        run_id    TEXT NOT NULL,
        state_id  TEXT NOT NULL,
        phase     TEXT NOT NULL,
        seconds   REAL NOT NULL,
        PRIMARY KEY (run_id, state_id, phase),
        FOREIGN KEY (run_id, state_id) REFERENCES crash_states (run_id, id) ON DELETE CASCADE
    )
    """,
    # A verdict row is written last in a state's transaction: its presence means
    # "this state is done", which is what resume relies on.
    """
    CREATE TABLE verdicts (
        run_id      TEXT NOT NULL,
        state_id    TEXT NOT NULL,
        outcome     TEXT NOT NULL,
        decided_at  TEXT NOT NULL,
        PRIMARY KEY (run_id, state_id),
        FOREIGN KEY (run_id, state_id) REFERENCES crash_states (run_id, id) ON DELETE CASCADE
    )
    """,
    # Placeholder for the ZFS experiments; they will migrate it as they learn more.
    """
    CREATE TABLE zfs_scans (
        id          INTEGER PRIMARY KEY,
        run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        repetition  INTEGER NOT NULL,
        kind        TEXT NOT NULL CHECK (kind IN ('scrub', 'resilver')),
        layout      TEXT NOT NULL,
        fill        REAL,
        seconds     REAL NOT NULL,
        examined    INTEGER,
        issued      INTEGER,
        repaired    INTEGER,
        errors      TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(errors)),
        created_at  TEXT NOT NULL
    )
    """,
    """
    CREATE VIEW v_state_outcomes AS
    SELECT r.id AS run_id, r.scenario, r.fs, v.state_id, v.outcome,
           s.generator, s.last_mark, s.description
      FROM verdicts v
      JOIN runs r ON r.id = v.run_id
      JOIN crash_states s ON s.run_id = v.run_id AND s.id = v.state_id
    """,
    # data_mode is a resolved scenario parameter (ext4 data=ordered|journal|writeback).
    """
    CREATE VIEW v_recovery AS
    SELECT r.id AS run_id, r.scenario, r.fs,
           COALESCE(json_extract(r.params, '$.fs.data_mode'),
                    json_extract(r.params, '$.data_mode')) AS data_mode,
           t.state_id, t.phase, t.seconds
      FROM recovery_times t
      JOIN runs r ON r.id = t.run_id
    """,
]

# 2: campaigns and their elements, flush/FUA/mark positions of a log (for crash maps),
# indexes for grouped tables, and views a researcher finds with `sqlite3 .tables`
# (documented in docs/results.md).
_MIGRATION_2 = [
    """
    CREATE TABLE campaigns (
        id          TEXT PRIMARY KEY,
        name        TEXT NOT NULL,
        path        TEXT NOT NULL,
        spec_hash   TEXT NOT NULL,
        spec        TEXT NOT NULL CHECK (json_valid(spec)),
        started_at  TEXT NOT NULL,
        finished_at TEXT,
        status      TEXT NOT NULL DEFAULT 'running'
                    CHECK (status IN ('running', 'done', 'interrupted')),
        host        TEXT,
        pid         INTEGER
    )
    """,
    "CREATE INDEX campaigns_resume ON campaigns (name, spec_hash, status)",
    # One row per (scenario, --set overrides, seed) of a campaign; `key` is their
    # canonical JSON, so an element is recorded once however often the campaign resumes.
    """
    CREATE TABLE campaign_elements (
        campaign_id   TEXT NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
        key           TEXT NOT NULL,
        position      INTEGER NOT NULL,
        scenario      TEXT NOT NULL,
        overrides     TEXT NOT NULL CHECK (json_valid(overrides)),
        seed          INTEGER,
        status        TEXT NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'running', 'done', 'failed', 'quarantined')),
        run_id        TEXT REFERENCES runs (id) ON DELETE SET NULL,
        failures      INTEGER NOT NULL DEFAULT 0,
        interruptions INTEGER NOT NULL DEFAULT 0,
        last_error    TEXT,
        pid           INTEGER,
        started_at    TEXT,
        finished_at   TEXT,
        seconds       REAL,
        PRIMARY KEY (campaign_id, key)
    )
    """,
    """
    CREATE TABLE log_events (
        log_hash  TEXT NOT NULL REFERENCES logs (hash) ON DELETE CASCADE,
        entry     INTEGER NOT NULL,
        kind      TEXT NOT NULL CHECK (kind IN ('flush', 'fua', 'mark')),
        mark      TEXT,
        PRIMARY KEY (log_hash, kind, entry)
    )
    """,
    "CREATE INDEX runs_scenario_status ON runs (scenario, status)",
    "CREATE INDEX recovery_run_phase ON recovery_times (run_id, phase)",
    f"""
    CREATE VIEW v_runs AS
    SELECT r.id AS run_id, r.scenario, r.kind, r.fs,
           COALESCE(json_extract(r.params, '$.fs.data_mode'),
                    json_extract(r.params, '$.data_mode')) AS data_mode,
           r.seed, r.status, r.guest_kernel AS kernel, r.accelerator, r.host,
           r.started_at, r.finished_at,
           round((julianday(r.finished_at) - julianday(r.started_at)) * 86400, 1)
               AS duration_seconds,
           (SELECT count(*) FROM verdicts v WHERE v.run_id = r.id) AS states,
           (SELECT count(*) FROM verdicts v WHERE v.run_id = r.id AND v.outcome
                IN {_FINDINGS_IN}) AS findings,
           (SELECT count(*) FROM verdicts v WHERE v.run_id = r.id AND v.outcome
                IN {_HARNESS_IN}) AS harness_failures
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
           s.description
      FROM crash_states s
      JOIN runs r ON r.id = s.run_id
      LEFT JOIN verdicts v ON v.run_id = s.run_id AND v.state_id = s.id
    """,
    """
    CREATE VIEW v_campaign_elements AS
    SELECT c.name AS campaign, c.id AS campaign_id, c.status AS campaign_status,
           e.position, e.scenario, e.overrides, e.seed, e.status, e.run_id,
           e.failures, e.interruptions, e.last_error, e.seconds
      FROM campaign_elements e
      JOIN campaigns c ON c.id = e.campaign_id
    """,
]

# 3: the ZFS lab's measurements (harness/experiments/zfs/): what a scan is compared by (the pool,
# the fill achieved, the fault) and what it measured, beside migration 1's columns.
# ``seconds`` stays the headline duration: from the events when they are there, else
# from ``zpool status``.
_MIGRATION_3 = [
    *(
        f"ALTER TABLE zfs_scans ADD COLUMN {col}"
        for col in (
            "cell TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(cell))",
            "disks INTEGER",
            "disk_size INTEGER",
            "fill_target REAL",
            "processed INTEGER",
            "scan_errors INTEGER",
            "data_errors INTEGER",
            "pool_state TEXT",
            "outcome TEXT",
            "start_ns INTEGER",
            "finish_ns INTEGER",
            "clock_tick_ns INTEGER",
            "status_seconds REAL",
            "wall_seconds REAL",
            "bytes_per_second REAL",
            "zfs_version TEXT",
            "guest_kernel TEXT",
            "fault TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(fault))",
            "phases TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(phases))",
        )
    ),
    "CREATE INDEX zfs_scans_run ON zfs_scans (run_id, repetition)",
]

# 4: one run lifecycle for every experiment kind (harness/experiments/lifecycle.py).
# zfs_scans: the item a row is (resume skips it), where ``seconds`` came from (``events``,
# to the kernel tick, or ``status``, whole seconds -- never mixed silently), every scan of
# the fault timed on its own, and whether this cell's parity makes data loss expected.
# ``observations``: the results of experiment kinds that need no table of their own (one
# row per item: its cell and its measurements as JSON, an outcome), so a new kind is a
# module and its scenarios, not a migration.
_MIGRATION_4 = [
    *(
        f"ALTER TABLE zfs_scans ADD COLUMN {col}"
        for col in (
            "item TEXT",
            "seconds_source TEXT CHECK (seconds_source IN ('events', 'status'))",
            "scans TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(scans))",
            "expected_loss INTEGER",
        )
    ),
    """
    CREATE TABLE observations (
        run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        item        TEXT NOT NULL,
        cell        TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(cell)),
        metrics     TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metrics)),
        outcome     TEXT,
        created_at  TEXT NOT NULL,
        PRIMARY KEY (run_id, item)
    )
    """,
]

# 5: the scan as a curve -- ``zpool status`` sampled while it ran (seconds since the
# start, examined / issued / repaired bytes, and the ETA zpool printed), so a table can
# say how wrong the ETA was and a plot can draw the progress.
_MIGRATION_5 = [
    "ALTER TABLE zfs_scans ADD COLUMN progress TEXT NOT NULL DEFAULT '[]'"
    " CHECK (json_valid(progress))",
]
