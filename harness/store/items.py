"""A run's items, written: a crash state and its results, a ZFS scan, an observation, a
phase's seconds, and the logs they were cut from. A mixin of ``Store``
(harness/store/db.py, which opens the store, writes a run's own row and finds what a
resume skips), apart so that each reads in one sitting.

Each crash state's results (its checks, recovery times and verdict) go in with ONE
transaction (``Store._transaction``), so a run killed at any instant keeps every state
it finished and none it did not.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from harness.outcome import Outcome, is_harness, reduce
from harness.store.model import (
    CheckResult,
    CrashState,
    LogInfo,
    Phase,
    Promise,
    ScanKind,
    Stage,
    canonical_json,
    excerpt,
    utc_now,
)
from harness.store.schema import _ZFS_JSON_COLUMNS, ZFS_SCAN_EXTRA


class StoreItems:
    _conn: sqlite3.Connection
    if TYPE_CHECKING:  # Store's (db.py): BEGIN IMMEDIATE, COMMIT, ROLLBACK on an error

        def _transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def add_log(self, log: LogInfo, *, run_id: str | None = None, role: str = "workload") -> None:
        """Record a log (once per content hash) and, with ``run_id``, its use by a run."""
        with self._transaction() as c:
            c.execute(
                "INSERT INTO logs (hash, path, entries, flushes, fuas, marks, discards, bytes,"
                " added_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (hash) DO NOTHING",
                (
                    log.hash,
                    log.path,
                    log.entries,
                    log.flushes,
                    log.fuas,
                    log.marks,
                    log.discards,
                    log.bytes,
                    utc_now(),
                ),
            )
            if run_id is not None:
                c.execute(
                    "INSERT OR IGNORE INTO run_logs (run_id, log_hash, role) VALUES (?, ?, ?)",
                    (run_id, log.hash, role),
                )

    def add_state(self, run_id: str, state: CrashState) -> None:
        """Record a crash state before it is checked (e.g. the whole enumeration up front)."""
        with self._transaction() as c:
            _upsert_state(c, run_id, state)

    def record_state_result(
        self,
        run_id: str,
        state: CrashState,
        checks: Sequence[CheckResult],
        recovery: Mapping[Phase | str, float],
        verdict: Outcome | None = None,
        promise: Promise | None = None,
    ) -> Outcome:
        """Store a checked state in one transaction; returns its verdict (and ``promise``:
        the profile it was judged by, and what its finding broke).

        The verdict defaults to the worst check outcome. Recording a state again replaces
        its earlier results, so a resumed run may redo a state without duplicates -- except
        that a harness outcome (timeout, panic, harness_error) never replaces a verdict the
        filesystem earned: the lab failing later says nothing about that state.
        """
        phases = {Phase(p): s for p, s in recovery.items()}
        verdict = verdict if verdict is not None else reduce(ch.outcome for ch in checks)
        now = utc_now()
        with self._transaction() as c:
            key = (run_id, state.id)
            if is_harness(verdict):
                row = c.execute(
                    "SELECT outcome FROM verdicts WHERE run_id = ? AND state_id = ?", key
                ).fetchone()
                if row is not None and not is_harness(Outcome(row[0])):
                    return Outcome(row[0])
            _upsert_state(c, run_id, state)
            for table in ("checks", "recovery_times", "verdicts"):
                c.execute(f"DELETE FROM {table} WHERE run_id = ? AND state_id = ?", key)
            c.executemany(
                "INSERT INTO checks (run_id, state_id, stage, checker, outcome, exit_status,"
                " seconds, output, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        *key,
                        str(Stage(ch.stage)),
                        ch.checker,
                        str(Outcome(ch.outcome)),
                        ch.exit_status,
                        ch.seconds,
                        excerpt(ch.output),
                        now,
                    )
                    for ch in checks
                ],
            )
            c.executemany(
                "INSERT INTO recovery_times (run_id, state_id, phase, seconds) VALUES (?, ?, ?, ?)",
                [(*key, str(p), s) for p, s in phases.items()],
            )
            p = promise or Promise(None)
            c.execute(
                "INSERT INTO verdicts (run_id, state_id, outcome, decided_at, profile, promise,"
                " rule) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*key, str(verdict), now, p.profile, p.broken, p.rule),
            )
        return verdict

    def add_zfs_scan(
        self,
        run_id: str,
        *,
        repetition: int,
        kind: ScanKind,
        layout: str,
        seconds: float,
        fill: float | None = None,
        examined: int | None = None,
        issued: int | None = None,
        repaired: int | None = None,
        errors: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """One scan's measurements; ``extra`` fills migration 3's columns by name."""
        cols = {
            "run_id": run_id,
            "repetition": repetition,
            "kind": str(ScanKind(kind)),
            "layout": layout,
            "fill": fill,
            "seconds": seconds,
            "examined": examined,
            "issued": issued,
            "repaired": repaired,
            "errors": canonical_json(errors or {}),
            "created_at": utc_now(),
        }
        for k, v in (extra or {}).items():
            if k not in ZFS_SCAN_EXTRA:
                raise ValueError(f"zfs_scans has no column {k!r}")
            cols[k] = canonical_json(v) if k in _ZFS_JSON_COLUMNS else v
        with self._transaction() as c:
            c.execute(
                f"INSERT INTO zfs_scans ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                tuple(cols.values()),
            )

    def add_phase_seconds(self, run_id: str, item: str, phase: str, seconds: float) -> None:
        """Seconds of a phase no item row holds (``run_phases``); again for the same item
        replaces them, so a resumed run counts each once."""
        with self._transaction() as c:
            c.execute(
                "INSERT OR REPLACE INTO run_phases (run_id, item, phase, seconds)"
                " VALUES (?, ?, ?, ?)",
                (run_id, item, phase, float(seconds)),
            )

    def record_observation(
        self,
        run_id: str,
        item: str,
        cell: Mapping[str, Any],
        metrics: Mapping[str, Any],
        outcome: Outcome | None,
    ) -> None:
        """One item of an experiment kind without a table of its own (one transaction;
        recording an item again replaces it, so a resumed run has no duplicates)."""
        with self._transaction() as c:
            c.execute(
                "INSERT OR REPLACE INTO observations (run_id, item, cell, metrics, outcome,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    item,
                    canonical_json(cell),
                    json.dumps(metrics, sort_keys=True),
                    None if outcome is None else str(outcome),
                    utc_now(),
                ),
            )


def _upsert_state(c: sqlite3.Connection, run_id: str, s: CrashState) -> None:
    c.execute(
        "INSERT INTO crash_states (run_id, id, log_hash, generator, params, prefix, last_mark,"
        " description, identity, check_key, reused_from, parent)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (run_id, id) DO UPDATE SET log_hash = excluded.log_hash,"
        " generator = excluded.generator, params = excluded.params, prefix = excluded.prefix,"
        " last_mark = excluded.last_mark, description = excluded.description,"
        " identity = excluded.identity, check_key = excluded.check_key,"
        " reused_from = excluded.reused_from, parent = excluded.parent",
        (
            run_id,
            s.id,
            s.log_hash,
            s.generator,
            canonical_json(s.params),
            s.prefix,
            s.last_mark,
            s.description,
            s.identity,
            s.check_key,
            s.reused_from,
            s.parent,
        ),
    )


# The records and helpers are the store's vocabulary: importable from here too.
