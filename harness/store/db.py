"""The results store: one SQLite file holding runs, logs, crash states, checks, verdicts.

Durability is the point of this module. Each crash state's results (its checks, recovery
times and verdict) go in with ONE transaction (``items.py``), so a run killed at any
instant keeps every state it finished and none it did not; ``done_state_ids()`` is then
the resume set.

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
from harness.outcome import Account, Outcome, is_harness
from harness.store import merge
from harness.store.campaigns import StoreCampaigns
from harness.store.items import StoreItems
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
from harness.store.schema import SCHEMA_VERSION


class Store(StoreItems, StoreReads, StoreQueries, StoreCampaigns):
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
                "INSERT INTO expected_items (run_id, item, waiver) VALUES (?, ?, ?)",
                [(run_id, i, account.waived.get(i)) for i in sorted(account.expected_items - had)],
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
        self, scenario: str, params: Mapping[str, Any], seed: int | None, only: str | None = None
    ) -> str | None:
        """The newest unfinished run with the same scenario, parameters and seed (``only``:
        that run, if it is one).

        A run still ``running`` counts only if its process is gone (killed, or the host
        rebooted); a live one on this host is someone else's run in progress. On another
        host we cannot tell, so we leave it alone.
        """
        rows = self._conn.execute(
            "SELECT id, status, host, pid FROM runs WHERE scenario = ? AND params = ?"
            " AND seed IS ? AND status IN ('running', 'interrupted', 'failed')"
            " AND (? IS NULL OR id = ?) ORDER BY started_at DESC, rowid DESC",
            (scenario, canonical_json(params), seed, only, only),
        ).fetchall()
        here = socket.gethostname()
        for run_id, status, host, pid in rows:
            if status != RunStatus.RUNNING:
                return str(run_id)
            if host == here and pid is not None and not pid_alive(int(pid)):
                return str(run_id)
        return None


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
