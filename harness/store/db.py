"""The results store: one SQLite file holding runs, logs, crash states, checks, verdicts.

Durability is the point of this module. Each crash state's results (its checks, recovery
times and verdict) go in with ONE transaction, so a run killed at any instant keeps every
state it finished and none it did not; ``done_state_ids()`` is then the resume set.

The file is versioned with ``PRAGMA user_version`` and marked with our
``PRAGMA application_id``; ``MIGRATIONS`` is applied in order, each in its own
transaction with its version bump. A file that is not ours is refused untouched.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from harness.errors import InputError
from harness.outcome import Account, Outcome, is_harness, reduce
from harness.store import merge
from harness.store.campaigns import StoreCampaigns
from harness.store.model import (
    APPLICATION_ID,
    OUTPUT_EXCERPT,
    Accelerator,
    CheckResult,
    CheckRow,
    CrashState,
    Judged,
    LogInfo,
    Phase,
    PhaseStats,
    Promise,
    RunDetail,
    RunEnv,
    RunKind,
    RunRow,
    RunStatus,
    ScanKind,
    Stage,
    StateRow,
    _opt_str,
    canonical_json,
    excerpt,
    percentile,
    phase_stats,
    pid_alive,
    utc_now,
)
from harness.store.opening import _adopt, _check_readable, _refuse
from harness.store.queries import StoreQueries
from harness.store.reads import StoreReads
from harness.store.schema import _ZFS_JSON_COLUMNS, SCHEMA_VERSION, ZFS_SCAN_EXTRA


class Store(StoreReads, StoreQueries, StoreCampaigns):
    """An open results database. Use ``Store.open()``; close it or use it as a context."""

    def __init__(self, path: Path, conn: sqlite3.Connection):
        self.path = path
        self._conn = conn

    # -- opening

    @classmethod
    def open(cls, path: Path, *, create: bool = True) -> Self:
        """Open (and create, unless ``create`` is false) the store at ``path``; migrate it.

        :raise InputError: the path is missing (with ``create=False``), a directory, not
            an SQLite file, another program's SQLite file, from a newer crashlab, or
            damaged.
        """
        path = Path(path)
        if path.is_dir():
            raise _refuse(path, "is a directory, not a results database")
        if not path.exists():
            if not create:
                raise InputError(
                    f"{path}: no results database here",
                    hint="no runs yet: run `scenario run SCENARIO` first, or pass --db PATH",
                )
            path.parent.mkdir(parents=True, exist_ok=True)
        else:
            _check_readable(path)
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, so a transaction is
            # exactly what the code says and never silently spans two states.
            conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
        except sqlite3.Error as e:
            raise _refuse(path, f"cannot open: {e}") from None
        try:
            _adopt(path, conn)
        except BaseException:
            conn.close()
            raise
        return cls(path, conn)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        # IMMEDIATE takes the write lock up front: in WAL mode a deferred transaction
        # that later upgrades can fail with SQLITE_BUSY instead of waiting.
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    # -- writing

    def begin_run(
        self,
        scenario: str,
        kind: str,
        params: Mapping[str, Any],
        seed: int | None,
        *,
        fs: str | None = None,
        env: RunEnv | None = None,
    ) -> str:
        """Record a new run in state ``running``; returns its id."""
        env = env or RunEnv()
        run_id = uuid.uuid4().hex[:12]
        with self._transaction() as c:
            c.execute(
                "INSERT INTO runs (id, scenario, kind, params, seed, started_at, status, host,"
                " pid, accelerator, guest_kernel, qemu_version, tool_versions, image_hash, fs)"
                " VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    scenario,
                    str(kind),
                    canonical_json(params),
                    seed,
                    utc_now(),
                    env.host,
                    os.getpid(),
                    _opt_str(env.accelerator),
                    env.guest_kernel,
                    env.qemu_version,
                    canonical_json(env.tool_versions),
                    env.image_hash,
                    fs,
                ),
            )
        return run_id

    def set_run_env(self, run_id: str, env: RunEnv) -> None:
        """Fill in what is known only after the guest booted (kernel, accelerator)."""
        with self._transaction() as c:
            c.execute(
                "UPDATE runs SET host = ?, accelerator = ?, guest_kernel = ?, qemu_version = ?,"
                " tool_versions = ?, image_hash = ? WHERE id = ?",
                (
                    env.host,
                    _opt_str(env.accelerator),
                    env.guest_kernel,
                    env.qemu_version,
                    canonical_json(env.tool_versions),
                    env.image_hash,
                    run_id,
                ),
            )

    def resume_run(self, run_id: str) -> None:
        """Mark a run found by ``find_resumable_run()`` as ``running`` in this process."""
        with self._transaction() as c:
            c.execute(
                "UPDATE runs SET status = 'running', pid = ?, host = ?, finished_at = NULL"
                " WHERE id = ?",
                (os.getpid(), socket.gethostname(), run_id),
            )

    def set_account(self, run_id: str, account: Account, *, status: int | None = None) -> None:
        """Replace a run's account and exit status (``status``, else the account's), in
        one transaction: the lifecycle calls it after every item, so a run killed at any
        instant has an account as current as its items."""
        with self._transaction() as c:
            c.execute("DELETE FROM run_outcomes WHERE run_id = ?", (run_id,))
            c.executemany(
                "INSERT INTO run_outcomes (run_id, outcome, expected, n) VALUES (?, ?, ?, ?)",
                [
                    (run_id, o, int(expected), n)
                    for expected, counts in ((False, account.counts), (True, account.expected))
                    for o, n in counts.items()
                ],
            )
            c.execute(
                "UPDATE runs SET exit_status = ?, expect = ? WHERE id = ?",
                (account.status if status is None else status, account.expect, run_id),
            )
            # Only what changed: the account is written after every item, and a run of
            # thousands of states would otherwise rewrite all its expected ones each time.
            had = {
                r[0]
                for r in c.execute("SELECT item FROM expected_items WHERE run_id = ?", (run_id,))
            }
            c.executemany(
                "DELETE FROM expected_items WHERE run_id = ? AND item = ?",
                [(run_id, i) for i in had - account.expected_items],
            )
            c.executemany(
                "INSERT INTO expected_items (run_id, item) VALUES (?, ?)",
                [(run_id, i) for i in sorted(account.expected_items - had)],
            )

    def finish_run(
        self, run_id: str, status: RunStatus, summary: Mapping[str, Any] | None = None
    ) -> None:
        """Close a run. Without ``summary``, the summary is its outcome counts."""
        with self._transaction() as c:
            if summary is None:
                summary = {"outcome_counts": self.outcome_counts(run_id)}
            c.execute(
                "UPDATE runs SET status = ?, finished_at = ?, summary = ? WHERE id = ?",
                (str(status), utc_now(), json.dumps(summary, sort_keys=True), run_id),
            )

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

    def merge_run(
        self, src: Path, run_id: str, also: Sequence[tuple[str, Sequence[object]]] = ()
    ) -> int:
        """Merge run ``run_id`` from the store file ``src`` (a worker's scratch store) and
        run ``also`` in the same transaction; rows added (``merge.py``: it only adds).

        :raise InputError: ``src`` is not a store this crashlab can read.
        """
        Store.open(src, create=False).close()  # refused or migrated like any store
        return merge.merge(self._conn, "BEGIN IMMEDIATE", src, run_id, also)

    # -- resuming

    def done_state_ids(self, run_id: str) -> set[str]:
        """States of ``run_id`` that have a verdict: the ones a resumed run skips. A state
        the lab failed to judge (timeout, panic, harness_error) is not done: the resume
        checks it again, and only a verdict the filesystem earned replaces that one."""
        rows = self._conn.execute(
            "SELECT state_id, outcome FROM verdicts WHERE run_id = ?", (run_id,)
        )
        return {r[0] for r in rows if not is_harness(Outcome(r[1]))}

    def find_resumable_run(
        self, scenario: str, params: Mapping[str, Any], seed: int | None
    ) -> str | None:
        """The newest unfinished run with the same scenario, parameters and seed.

        A run still ``running`` counts only if its process is gone (killed, or the host
        rebooted); a live one on this host is someone else's run in progress. On another
        host we cannot tell, so we leave it alone.
        """
        rows = self._conn.execute(
            "SELECT id, status, host, pid FROM runs WHERE scenario = ? AND params = ?"
            " AND seed IS ? AND status IN ('running', 'interrupted', 'failed')"
            " ORDER BY started_at DESC, rowid DESC",
            (scenario, canonical_json(params), seed),
        ).fetchall()
        here = socket.gethostname()
        for run_id, status, host, pid in rows:
            if status != RunStatus.RUNNING:
                return str(run_id)
            if host == here and pid is not None and not pid_alive(int(pid)):
                return str(run_id)
        return None


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
__all__ = [
    "APPLICATION_ID",
    "OUTPUT_EXCERPT",
    "SCHEMA_VERSION",
    "Accelerator",
    "CheckResult",
    "CheckRow",
    "CrashState",
    "Judged",
    "LogInfo",
    "Phase",
    "PhaseStats",
    "RunDetail",
    "RunEnv",
    "RunKind",
    "RunRow",
    "RunStatus",
    "ScanKind",
    "Stage",
    "StateRow",
    "Store",
    "canonical_json",
    "excerpt",
    "percentile",
    "phase_stats",
    "pid_alive",
    "utc_now",
]
