"""What a killed or faulted run did to the store: the counts bench_campaign_kill.py and
chaos.py share (results seen, rows duplicated, unfinished runs).

A result is one row of ``v_item_outcomes`` (a crash state's verdict, a fault or recovery
observation, a ZFS scan): the row that says "this item is done". Items are compared across
stores by their element (scenario, parameters, seed) and item id, never by run id, which a
clean run and a faulted one do not share.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

DUPLICATES = {
    "crash_states": "SELECT count(*) - count(DISTINCT run_id || '/' || id) FROM crash_states",
    "verdicts": "SELECT count(*) - count(DISTINCT run_id || '/' || state_id) FROM verdicts",
    "recovery_times": "SELECT count(*) - count(DISTINCT run_id || '/' || state_id || '/' || phase)"
    " FROM recovery_times",
    "checks": "SELECT count(*) - count(DISTINCT run_id || '/' || state_id || '/' || stage || '/'"
    " || checker) FROM checks",
    "observations": "SELECT count(*) - count(DISTINCT run_id || '/' || item) FROM observations",
    "zfs_scans": "SELECT count(*) - count(DISTINCT run_id || '/' || item) FROM zfs_scans"
    " WHERE item IS NOT NULL",
    "runs per element": "SELECT coalesce(sum(n - 1), 0) FROM"
    " (SELECT count(*) AS n FROM runs GROUP BY scenario, params, seed)",
    "campaign elements": "SELECT count(*) - count(DISTINCT campaign_id || key) FROM"
    " campaign_elements",
    "campaigns": "SELECT max(count(*) - 1, 0) FROM campaigns",
}

# (scenario, params, seed, item) -> outcome, over every run of the store. A crash state's
# item is its id, a hash of its content -- the same in every run of a log, but a ZFS pool's
# content differs from run to run (GUIDs, txgs), so a clean run's ids never recur in a
# faulted one. Crash states are keyed instead by what made them: generator, mark, and rank
# among that pair's states by log position, which every run of the element shares.
_KEY = (
    "SELECT r.scenario, r.params, r.seed,"
    " CASE WHEN o.source = 'verdicts' THEN ("
    "   SELECT s.generator || '@' || coalesce(s.last_mark, '') || '#' || ("
    "     SELECT count(*) FROM crash_states t WHERE t.run_id = s.run_id"
    "      AND t.generator = s.generator AND t.last_mark IS s.last_mark"
    "      AND (t.prefix < s.prefix OR (t.prefix = s.prefix AND t.params < s.params)))"
    "   FROM crash_states s WHERE s.run_id = o.run_id AND s.id = o.item)"
    " ELSE o.item END"
)
_FROM = " FROM v_item_outcomes o JOIN runs r ON r.id = o.run_id"
_RESULTS = f"{_KEY}, o.outcome{_FROM}"
# A crash state's content id beside its key: two runs that recorded the element apart (a
# clean run and a faulted one, a resume that re-recorded) can cut different states at the
# same mark, and a verdict that depends on the kernel's timing (ext2's, say) may differ.
_CONTENTS = f"{_KEY}, o.item{_FROM} WHERE o.source = 'verdicts'"


def query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows of ``sql``, or none when the store or its table is not there yet."""
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []
    finally:
        conn.close()


def verdicts(db: Path) -> set[tuple[Any, ...]]:
    return set(query(db, "SELECT run_id, state_id FROM verdicts"))


def results(db: Path) -> dict[tuple[Any, ...], str]:
    """Every stored item result: (scenario, params, seed, item) -> outcome."""
    return {tuple(row[:4]): row[4] for row in query(db, _RESULTS)}


def contents(db: Path) -> dict[tuple[Any, ...], str]:
    """Every stored crash state's key (as ``results``) -> its content id."""
    return {tuple(row[:4]): row[4] for row in query(db, _CONTENTS)}


def duplicates(db: Path) -> dict[str, int]:
    return {name: int((query(db, sql) or [(0,)])[0][0] or 0) for name, sql in DUPLICATES.items()}


def unfinished(db: Path) -> list[tuple[Any, ...]]:
    """(run, status, items done) of runs not done: where a fault landed."""
    return query(
        db,
        "SELECT id, status, (SELECT count(*) FROM v_item_outcomes o WHERE o.run_id = r.id)"
        " FROM runs r WHERE status != 'done'",
    )
