"""Where the flushes, FUAs and marks are in a workload log, kept in the store's
``log_events`` table for crash maps and queries."""

from __future__ import annotations

from pathlib import Path

from harness.record import logwrites
from harness.store.db import Store


def log_events(store: Store, run_id: str) -> dict[str, list[int]]:
    """Entry indices of flushes, FUAs and marks in the run's workload log.

    From ``log_events``; filled from the run's log file when the table has none.
    """
    logs = store.execute(
        "SELECT l.hash, l.path FROM run_logs rl JOIN logs l ON l.hash = rl.log_hash"
        " WHERE rl.run_id = ? ORDER BY rl.role = 'workload' DESC",
        (run_id,),
    )
    out: dict[str, list[int]] = {"flush": [], "fua": [], "mark": []}
    if not logs:
        return out
    log_hash, path = logs[0]
    rows = store.execute("SELECT kind, entry FROM log_events WHERE log_hash = ?", (log_hash,))
    if not rows and Path(path).is_file():
        record_log_events(store, log_hash, Path(path))
        rows = store.execute("SELECT kind, entry FROM log_events WHERE log_hash = ?", (log_hash,))
    for kind, entry in rows:
        out[str(kind)].append(int(entry))
    return {k: sorted(v) for k, v in out.items()}


def record_log_events(store: Store, log_hash: str, path: Path) -> int:
    """Store the flush/FUA/mark positions of the log at ``path`` (one transaction)."""
    with logwrites.open_log(path) as lg:
        if lg.hash != log_hash:
            return 0
        return record_events(store, lg)


def record_events(store: Store, lg: logwrites.Log) -> int:
    """Store the flush/FUA/mark positions of an open log, so crash maps outlive the log
    file (run directories are scratch space)."""
    rows: list[tuple[int, str, str | None]] = [
        (i, "flush", None) for i in lg.having(logwrites.FLUSH)
    ]
    rows += [(i, "fua", None) for i in lg.having(logwrites.FUA)]
    rows += [(i, "mark", text) for i, text in lg.marks.items()]
    log_hash = lg.hash
    store.execute("BEGIN IMMEDIATE")
    try:
        for entry, kind, mark in rows:
            store.execute(
                "INSERT OR IGNORE INTO log_events (log_hash, entry, kind, mark)"
                " VALUES (?, ?, ?, ?)",
                (log_hash, entry, kind, mark),
            )
    except BaseException:
        store.execute("ROLLBACK")
        raise
    store.execute("COMMIT")
    return len(rows)
