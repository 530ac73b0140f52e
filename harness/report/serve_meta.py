"""What datasette shows of the store: canned queries, column descriptions, the stylesheet
and the metadata file. Data, not code; it follows docs/results.md so a researcher lands on
the ``v_*`` views and the queries, not on the raw tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.outcome import FINDINGS, HARNESS, Outcome, by_severity
from harness.report.dashboard import (
    FINDINGS_PER_CAMPAIGN,
    OUTCOMES_BY_FS_MODE,
    SLUG,
    dashboard,
    kind_queries,
)
from harness.report.search import CLUSTERS_SQL
from harness.store.db import Store


def _words(outcomes: frozenset[Outcome]) -> str:
    """The outcomes, least severe first, in prose (harness/outcome.py says which)."""
    return ", ".join(by_severity(outcomes))


_FINDING_WORDS = _words(FINDINGS)
_HARNESS_WORDS = _words(HARNESS)

# name -> (title, description, SQL). Named parameters (``:run``) become form fields;
# an empty one means "all". Each ``results table`` kind adds its own (``table_KIND``,
# harness/report/dashboard.py).
CANNED_QUERIES: dict[str, tuple[str, str, str]] = {
    "outcomes_by_fs_mode": (
        "Outcomes by filesystem and data mode",
        "How many checked crash states ended in each outcome, as the runs' accounts count"
        " them (`scenario results show`): *expected* 1 where the kind's rule expects the"
        " outcome (ext2's `repaired`), and how it counts (*counts_as*).",
        OUTCOMES_BY_FS_MODE,
    ),
    "findings_per_run": (
        "Findings per run",
        f"Every run, newest first, with its checked states, findings ({_FINDING_WORDS};"
        " not those its kind's rule expects) and harness failures (could not tell).",
        """SELECT run_id, scenario, fs, data_mode, kernel, status, started_at,
       duration_seconds, states, findings, harness_failures
  FROM v_runs
 ORDER BY started_at DESC""",
    ),
    "findings": (
        "Findings, state by state",
        "Each crash state with a finding (not one its kind's rule expects) and the fsync"
        " mark it followed. Leave *run* empty for all runs, or give a run id (or its first"
        " characters).",
        """SELECT run_id, scenario, fs, data_mode, state_id, outcome, last_mark,
       recovery_seconds, description
  FROM v_states
 WHERE counts_as = 'finding'
   -- and its run's account counts that outcome a finding: a run stored before the
   -- account named its expected items (migration 9) has none marked in v_states
   AND EXISTS (SELECT 1 FROM v_run_outcomes o WHERE o.run_id = v_states.run_id
               AND o.outcome = v_states.outcome AND o.counts_as = 'finding')
   AND (:run = '' OR run_id LIKE :run || '%')
 ORDER BY run_id, prefix""",
    ),
    "slowest_fsck_per_run": (
        "Slowest fsck of each run",
        "The longest fsck phase (seconds) of each run.",
        """SELECT run_id, scenario, fs, data_mode, max(seconds) AS max_fsck_s
  FROM v_recovery
 WHERE phase = 'fsck'
 GROUP BY run_id
 ORDER BY max_fsck_s DESC""",
    ),
    "findings_per_campaign": (
        "Findings per campaign run (a nightly run is one)",
        "Every execution of a campaign, oldest first: its elements, how many are done or"
        " failed, and the findings and harness failures of their runs.",
        FINDINGS_PER_CAMPAIGN,
    ),
    "bug_clusters": (
        "Search findings by symptom",
        "`scenario results bugs RUN` over every search run (leave *run* empty) or one"
        " (a run id or its first characters): a row per symptom, its workloads and states,"
        " the smallest workload first to read and reproduce.",
        CLUSTERS_SQL,
    ),
    "campaign_elements": (
        "Campaign elements",
        "Every element of every campaign: its status, run, failures and interruptions.",
        """SELECT campaign, campaign_id, campaign_status, position, scenario, overrides,
       seed, status, run_id, failures, interruptions, last_error, seconds
  FROM v_campaign_elements
 ORDER BY campaign_id, position""",
    ),
}

_RUN = "the run's id (`scenario results show RUN`)"
_SCENARIO = "scenario name (scenarios/NAME.toml)"
_FS = "filesystem under test (ext4, xfs, btrfs, ...)"
_MODE = "ext4 data= mode (ordered, journal, writeback); empty for other filesystems"
_KERNEL = "guest kernel release"
_OUTCOME = (
    "the state's verdict, least to worst: "
    + " ".join(by_severity())
    + "; empty: recorded, not yet checked"
)
_COUNTS_AS = (
    "how the outcome counts in the run's account (outcome_classes, from harness/outcome.py):"
    " finding, expected (by the kind's rule), harness, clean or skipped"
)
_STATE = "crash state id, unique per run (e.g. fua-0042); the same id in two runs is the same cut"
_MARK = "the last fsync mark before the cut (what the workload had made durable)"
_PREFIX = "number of log entries applied to make this state"

# table or view -> (description, {column: description})
TABLES: dict[str, tuple[str, dict[str, str]]] = {
    "v_runs": (
        "One row per run: start here.",
        {
            "run_id": _RUN,
            "scenario": _SCENARIO,
            "kind": "crash (replayed crash states) or zfs (scrub/resilver timings)",
            "fs": _FS,
            "data_mode": _MODE,
            "seed": "workload seed; same scenario + parameters + seed = same workload",
            "status": "running, done, failed or interrupted",
            "kernel": _KERNEL,
            "accelerator": "kvm or tcg (TCG times are not comparable with KVM times)",
            "host": "machine the run ran on",
            "started_at": "UTC, ISO 8601",
            "finished_at": "UTC, ISO 8601; empty while running or if killed",
            "duration_seconds": "wall time of the whole run, seconds",
            "states": "crash states with a verdict",
            "findings": f"items that were {_FINDING_WORDS}, less those the kind's rule expects",
            "harness_failures": f"items the lab could not check ({_HARNESS_WORDS})",
        },
    ),
    "v_states": (
        "One row per crash state, with its verdict and total recovery time.",
        {
            "run_id": _RUN,
            "scenario": _SCENARIO,
            "fs": _FS,
            "data_mode": _MODE,
            "kernel": _KERNEL,
            "accelerator": "kvm or tcg",
            "seed": "workload seed",
            "state_id": _STATE,
            "generator": "how the cut was chosen (fua, flush, mark, random, ...)",
            "prefix": _PREFIX,
            "last_mark": _MARK,
            "outcome": _OUTCOME,
            "recovery_seconds": "sum of the state's recovery phases, seconds",
            "description": "what the cut is, in words",
            "expected": "1 when the kind's rule expects this outcome (not a finding)",
            "counts_as": _COUNTS_AS,
        },
    ),
    "v_state_outcomes": (
        "One row per checked crash state (states with a verdict only).",
        {
            "run_id": _RUN,
            "scenario": _SCENARIO,
            "fs": _FS,
            "state_id": _STATE,
            "outcome": _OUTCOME,
            "generator": "how the cut was chosen",
            "last_mark": _MARK,
            "description": "what the cut is, in words",
        },
    ),
    "v_recovery": (
        "One row per recovery phase of a crash state.",
        {
            "run_id": _RUN,
            "scenario": _SCENARIO,
            "fs": _FS,
            "data_mode": _MODE,
            "state_id": _STATE,
            "phase": "journal_replay, fsck, mount, umount, fsck_after, repair or guest_repair",
            "seconds": "time the phase took, seconds",
        },
    ),
    "v_campaign_elements": (
        "One row per campaign element (scenario x overrides x seed).",
        {
            "campaign": "campaign name (campaigns/NAME.toml)",
            "campaign_id": "one execution of the campaign (resumes keep the id)",
            "campaign_status": "running, done or interrupted",
            "position": "order in the campaign file",
            "scenario": _SCENARIO,
            "overrides": "the --set overrides, as a JSON list",
            "seed": "workload seed",
            "status": "pending, running, done, failed (retried) or quarantined",
            "run_id": "the element's run, once it has one",
            "failures": "harness failures so far (quarantined at max_failures)",
            "interruptions": "times the harness was killed during it (max_interruptions)",
            "last_error": "why the last attempt failed",
            "seconds": "wall time of the last attempt, seconds",
        },
    ),
    "runs": (
        "What the harness writes per run; `params` is the resolved scenario as JSON.",
        {
            "id": "run id",
            "params": "resolved scenario (JSON): json_extract(params, '$.workload.ops')",
            "summary": "final counts, or the error of a failed run (JSON)",
            "tool_versions": "versions of the host tools used (JSON)",
            "image_hash": "guest image recipe hash",
            "pid": "harness process id (resume tells a dead run from a live one)",
        },
    ),
    "crash_states": (
        "A cut of a dm-log-writes log.",
        {"id": _STATE, "prefix": _PREFIX, "last_mark": _MARK, "log_hash": "the log's hash"},
    ),
    "checks": (
        "Each checker's outcome on a state, with an excerpt of its output.",
        {
            "stage": "host (userspace on a copy) or guest (the kernel mounts it)",
            "checker": "e2fsck, xfs_repair, mount, oracle, ...",
            "outcome": _OUTCOME,
            "exit_status": "the checker's exit status",
            "seconds": "time the check took, seconds",
            "output": "head and tail of its output",
        },
    ),
    "recovery_times": (
        "Seconds per recovery phase per state.",
        {"phase": "recovery phase", "seconds": "seconds"},
    ),
    "verdicts": (
        "A state's final outcome; its presence means the state is done.",
        {
            "outcome": _OUTCOME,
            "decided_at": "UTC, ISO 8601",
            "profile": "the guarantee profile the oracle judged it by: posix, fsync-names,"
            " ordered-metadata (empty: stored before schema 10, or no oracle)",
            "promise": "a finding's weakest broken promise: posix is the floor, the others"
            " are stronger than POSIX (docs/verdicts.md)",
            "rule": "the oracle rule it broke, or the checker that saw it",
        },
    ),
    "zfs_scans": (
        "ZFS scrub and resilver timings.",
        {
            "kind": "scrub or resilver",
            "layout": "pool layout (mirror, raidz1, ...)",
            "fill": "fraction of the pool filled before the scan",
            "seconds": "scan time, seconds (from zpool events when present)",
            "bytes_per_second": "bytes examined per second",
        },
    ),
    "outcome_classes": (
        "How each outcome counts in a run's account, expected or not (harness/outcome.py).",
        {"counts_as": _COUNTS_AS, "severity": "0 least severe (skipped) up to data_loss"},
    ),
    "expected_items": (
        "The items of a run that its kind's rule marked expected: reported, no finding.",
        {"item": "a crash state id, or an observation's or scan's item"},
    ),
    "log_events": (
        "Flush, FUA and mark positions of a log (crash maps).",
        {"entry": "log entry index", "kind": "flush, fua or mark", "mark": "mark name"},
    ),
}

# Facets a researcher filters by first; only on views whose columns are always there.
# Datasette lists column descriptions one per two lines above the rows, which pushes a
# view's rows below the fold; a two-column grid keeps them to one short line each.
STYLESHEET = """\
dl.column-descriptions {
    display: grid; grid-template-columns: max-content 1fr; gap: 0.1em 1.5em;
    font-size: 0.85em; max-width: 70em;
}
dl.column-descriptions dt, dl.column-descriptions dd { margin: 0; padding: 0; line-height: 1.3em; }
"""
STATIC_MOUNT = "crashlab"
DASHBOARD = f"/-/dashboards/{SLUG}"

# What a researcher opens first, linked from the database page (datasette lists the
# tables, which are mostly bookkeeping, above the views).
_START = {
    "v_runs": "a row per run",
    "v_states": "per crash state",
    "v_recovery": "per recovery phase",
    "v_campaign_elements": "per campaign element",
}

_FACETS = {"v_runs": ["scenario", "status"], "v_states": ["fs", "data_mode", "outcome"]}
_SORT_DESC = {"v_runs": "started_at"}


def metadata(db_name: str, source: Path, taken: str, snap: Store) -> dict[str, Any]:
    """Datasette metadata for ``snap``, a snapshot of ``source`` served as ``db_name``
    (the kinds' queries group by the fields it has)."""
    tables: dict[str, Any] = {}
    for name, (description, columns) in TABLES.items():
        t: dict[str, Any] = {"description": description, "columns": columns}
        if name in _FACETS:
            t["facets"] = _FACETS[name]
        if name in _SORT_DESC:
            t["sort_desc"] = _SORT_DESC[name]
        tables[name] = t
    where = f"Read-only snapshot of <code>{_html(str(source))}</code> taken {_html(taken)}."
    start = ", ".join(f'<a href="/{db_name}/{v}">{v}</a> ({what})' for v, what in _START.items())
    queries = CANNED_QUERIES | kind_queries(snap)
    outcomes = CANNED_QUERIES["outcomes_by_fs_mode"][2]
    return {
        "title": "crashlab results",
        "description_html": f'{where} Open <a href="{DASHBOARD}">the dashboard</a> for the'
        f' charts, <a href="/{db_name}">{db_name}</a> for the queries.',
        "extra_css_urls": [f"/{STATIC_MOUNT}/serve.css"],
        "databases": {
            db_name: {
                "description_html": f'{where}<br>The charts: <a href="{DASHBOARD}">'
                f"{DASHBOARD}</a>. Start with the views: {start}; or a canned query below"
                " (<code>table_KIND</code>: <code>scenario results table KIND</code>)."
                " The schema is documented in docs/results.md.",
                "tables": tables,
                "queries": {
                    name: {"title": title, "description": desc, "sql": sql}
                    for name, (title, desc, sql) in queries.items()
                },
            }
        },
        "plugins": {
            "datasette-dashboards": dashboard(snap, db_name, outcomes, _markdown(source, taken))
        },
    }


def _markdown(source: Path, taken: str) -> str:
    return f"Read-only snapshot of `{source}` taken {taken}."


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
