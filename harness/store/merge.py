"""Moving one run from a store into another: a campaign element that ran on a Dask worker
was written into a scratch store of that worker's own; the campaign's process, the one
writer of the main store, merges the run in with one transaction.

Why a store file and not rows: the worker ships a consistent copy of its scratch SQLite
file (``snapshot``), and the merge is SQL over an ``ATTACH``-ed copy. The schema (every
table a run writes, whatever its experiment kind) then needs no serializer of its own, and
the copy is opened with ``Store.open`` first, so an older worker's file is migrated and a
newer one is refused like any store.

**The merge only adds.** A row the main store already has is kept as it is: a state's
verdict stays (a finding is never overwritten by a later harness outcome; only a harness
outcome gives way to a real verdict, as in ``Store.record_state_result``), a check row is
added only with its state's new verdict, and the run row moves forward only while the
main store's copy is unfinished. So merging the same run twice, or an older attempt of it
after a newer one, adds nothing.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

from harness.outcome import Outcome, is_harness
from harness.store.schema import _TABLES

# In foreign-key order. ``checks`` comes before ``verdicts``: a check row is added only
# for a state whose verdict the main store does not have yet.
MERGE_ORDER = (
    "runs",
    "logs",
    "log_events",
    "run_logs",
    "crash_states",
    "checks",
    "recovery_times",
    "zfs_scans",
    "observations",
    "verdicts",
    "expected_items",
    "run_outcomes",
    "run_phases",
)
# ``outcome_classes`` is harness/outcome.py's, written by every store when it opens.
NOT_A_RUNS = frozenset({"campaigns", "campaign_elements", "outcome_classes"})
assert set(MERGE_ORDER) | NOT_A_RUNS == _TABLES, "a new table needs a merge rule"

_LOGS_OF_RUN = (
    "SELECT log_hash FROM src.run_logs WHERE run_id = :run"
    " UNION SELECT log_hash FROM src.crash_states WHERE run_id = :run"
)
# Rows keyed by an INTEGER id: what makes two of them the same row.
_NEW_ROWS = {
    "checks": "NOT EXISTS (SELECT 1 FROM main.verdicts v WHERE v.run_id = s.run_id"
    " AND v.state_id = s.state_id) AND EXISTS (SELECT 1 FROM src.verdicts v"
    " WHERE v.run_id = s.run_id AND v.state_id = s.state_id)",
    "zfs_scans": "NOT EXISTS (SELECT 1 FROM main.zfs_scans m WHERE m.run_id = s.run_id"
    " AND m.item IS s.item AND m.repetition = s.repetition AND m.kind = s.kind)",
}
# A run's account is whole or not at all: the incoming one replaces the main store's
# while that run is unfinished there (the DELETE in ``statements``), and a finished run's
# account stays as it is.
_WHOLE = dict.fromkeys(
    ("expected_items", "run_outcomes"),
    "NOT EXISTS (SELECT 1 FROM main.run_outcomes m WHERE m.run_id = :run)",
)


def snapshot(db: Path) -> bytes:
    """A consistent copy of the store at ``db`` (SQLite's backup API: what the WAL holds is
    included, a transaction in progress is not)."""
    with tempfile.TemporaryDirectory(prefix="crashlab-snap-") as d:
        out = Path(d) / "snapshot.sqlite"
        with closing(sqlite3.connect(db)) as src, closing(sqlite3.connect(out)) as dst:
            src.backup(dst)
        return out.read_bytes()


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    rows = conn.execute(f"PRAGMA main.table_info({table})").fetchall()
    # An INTEGER PRIMARY KEY id is the main store's own row number, never copied.
    return [r[1] for r in rows if not (r[1] == "id" and r[5] and r[2].upper() == "INTEGER")]


def _superseded() -> str:
    """States whose verdict in the main store is a harness outcome while the incoming one
    is not: the same rule as ``Store.record_state_result`` (the lab failing says nothing
    about a state, so a later real verdict replaces it; never the other way round)."""
    harness = ", ".join(f"'{o}'" for o in Outcome if is_harness(o))
    return (
        "SELECT m.state_id FROM main.verdicts m JOIN src.verdicts s"
        " ON s.run_id = m.run_id AND s.state_id = m.state_id WHERE m.run_id = :run"
        f" AND m.outcome IN ({harness}) AND s.outcome NOT IN ({harness})"
    )


def statements(conn: sqlite3.Connection) -> list[str]:
    """The merge of one run (``:run``) from schema ``src`` into ``main``, in order."""
    out = [
        f"DELETE FROM main.{table} WHERE run_id = :run AND state_id IN ({_superseded()})"
        for table in ("checks", "recovery_times", "verdicts")  # verdicts last: the subquery
    ]
    # Before the run row moves forward, while "unfinished" still means the main store's.
    out += [
        f"DELETE FROM main.{table} WHERE run_id = :run AND EXISTS (SELECT 1 FROM"
        " main.runs WHERE id = :run AND status != 'done')"
        for table in _WHOLE
    ]
    for table in MERGE_ORDER:
        cols = _columns(conn, table)
        names = ", ".join(cols)
        picked = ", ".join(f"s.{c}" for c in cols)
        if table == "runs":
            rest = [c for c in cols if c != "id"]
            out.append(
                f"UPDATE main.runs SET ({', '.join(rest)}) = (SELECT {', '.join(rest)}"
                " FROM src.runs WHERE id = :run) WHERE id = :run AND status != 'done'"
            )
            where = "s.id = :run"
        elif table == "logs":
            where = f"s.hash IN ({_LOGS_OF_RUN})"
        elif table == "log_events":
            where = f"s.log_hash IN ({_LOGS_OF_RUN})"
        else:
            extra = _NEW_ROWS.get(table) or _WHOLE.get(table)
            where = "s.run_id = :run" + (f" AND {extra}" if extra else "")
        verb = "INSERT INTO" if table in _NEW_ROWS else "INSERT OR IGNORE INTO"
        out.append(f"{verb} main.{table} ({names}) SELECT {picked} FROM src.{table} s")
        out[-1] += f" WHERE {where}"
    return out


def merge(
    conn: sqlite3.Connection,
    begin: str,
    src: Path,
    run_id: str,
    also: Sequence[tuple[str, Sequence[object]]] = (),
) -> int:
    """Merge run ``run_id`` of the store file ``src`` into ``conn``'s main database and run
    ``also`` (the caller's bookkeeping) in the same transaction; rows inserted.

    ``begin`` starts the transaction (the store's own ``BEGIN IMMEDIATE``). ``ATTACH`` is
    not allowed inside a transaction, so it comes before and ``DETACH`` after.
    """
    conn.execute("ATTACH DATABASE ? AS src", (str(src),))
    try:
        added = 0
        conn.execute(begin)
        try:
            for sql in statements(conn):
                n = conn.execute(sql, {"run": run_id}).rowcount
                added += max(0, n) if sql.startswith("INSERT") else 0
            for sql, args in also:
                conn.execute(sql, tuple(args))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return added
    finally:
        conn.execute("DETACH DATABASE src")
