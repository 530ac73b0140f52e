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
import math
import os
import socket
import sqlite3
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from harness.errors import InputError
from harness.outcome import Outcome, is_harness, reduce
from harness.store.schema import (
    _TABLES,
    _ZFS_JSON_COLUMNS,
    MIGRATIONS,
    SCHEMA_VERSION,
    ZFS_SCAN_EXTRA,
)

# "CRLB" as a big-endian int: `file(1)` and `sqlite3 .dbinfo` show it, and it tells
# our files from any other SQLite file without looking at table names.
APPLICATION_ID = 0x43524C42
_SQLITE_MAGIC = b"SQLite format 3\x00"
# A check's output is kept as an excerpt: the full log lives next to the run; the store
# only needs enough to recognise the failure.
OUTPUT_EXCERPT = 4000


class RunKind(StrEnum):
    CRASH = "crash"
    ZFS = "zfs"


class RunStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class Accelerator(StrEnum):
    KVM = "kvm"
    TCG = "tcg"


class Stage(StrEnum):
    HOST = "host"
    GUEST = "guest"


class Phase(StrEnum):
    JOURNAL_REPLAY = "journal_replay"
    FSCK = "fsck"
    MOUNT = "mount"
    UMOUNT = "umount"
    FSCK_AFTER = "fsck_after"
    REPAIR = "repair"  # host: e2fsck -fy / xfs_repair / btrfs check --repair on a copy
    GUEST_REPAIR = "guest_repair"  # the same in the guest, after the kernel's own recovery


class ScanKind(StrEnum):
    SCRUB = "scrub"
    RESILVER = "resilver"


# --- schema: harness/schema.py -------------------------------------------------------

# --- records ------------------------------------------------------------------------


@dataclass(frozen=True)
class RunEnv:
    """Where a run ran; enough to tell whether two runs are comparable."""

    host: str = field(default_factory=socket.gethostname)
    accelerator: Accelerator | None = None
    guest_kernel: str | None = None
    qemu_version: str | None = None
    tool_versions: Mapping[str, str] = field(default_factory=dict)
    image_hash: str | None = None


@dataclass(frozen=True)
class LogInfo:
    """A dm-log-writes log, named by the hash of its contents."""

    hash: str
    path: str
    entries: int
    flushes: int
    fuas: int
    marks: int
    discards: int
    bytes: int


@dataclass(frozen=True)
class CrashState:
    id: str
    log_hash: str
    generator: str
    prefix: int
    params: Mapping[str, Any] = field(default_factory=dict)
    last_mark: str | None = None
    description: str = ""


@dataclass(frozen=True)
class CheckResult:
    stage: Stage
    checker: str
    outcome: Outcome
    seconds: float
    exit_status: int | None = None
    output: str = ""


@dataclass(frozen=True)
class RunRow:
    id: str
    scenario: str
    kind: str
    params: Mapping[str, Any]
    seed: int | None
    started_at: str
    finished_at: str | None
    status: RunStatus
    host: str | None
    accelerator: str | None
    guest_kernel: str | None
    qemu_version: str | None
    tool_versions: Mapping[str, str]
    image_hash: str | None
    fs: str | None
    summary: Mapping[str, Any] | None
    outcome_counts: Mapping[str, int]

    @property
    def duration(self) -> float | None:
        """Seconds from start to finish; ``None`` while running or if never finished."""
        if self.finished_at is None:
            return None
        start = datetime.fromisoformat(self.started_at)
        return (datetime.fromisoformat(self.finished_at) - start).total_seconds()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "scenario": self.scenario,
            "kind": self.kind,
            "fs": self.fs,
            "params": dict(self.params),
            "seed": self.seed,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_seconds": self.duration,
            "status": str(self.status),
            "host": self.host,
            "accelerator": self.accelerator,
            "guest_kernel": self.guest_kernel,
            "qemu_version": self.qemu_version,
            "tool_versions": dict(self.tool_versions),
            "image_hash": self.image_hash,
            "summary": self.summary,
            "outcome_counts": dict(self.outcome_counts),
        }


@dataclass(frozen=True)
class CheckRow:
    stage: str
    checker: str
    outcome: str
    exit_status: int | None
    seconds: float
    output: str


@dataclass(frozen=True)
class StateRow:
    id: str
    generator: str
    prefix: int
    last_mark: str | None
    description: str
    outcome: str | None  # None: recorded but not (yet) checked
    checks: Sequence[CheckRow]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "generator": self.generator,
            "prefix": self.prefix,
            "last_mark": self.last_mark,
            "description": self.description,
            "outcome": self.outcome,
            "checks": [c.__dict__.copy() for c in self.checks],
        }


@dataclass(frozen=True)
class PhaseStats:
    phase: str
    n: int
    mean: float
    stdev: float  # sample standard deviation (n - 1); 0 for a single value
    min: float
    p50: float
    p95: float
    max: float


@dataclass(frozen=True)
class RunDetail:
    run: RunRow
    states: Sequence[StateRow]
    recovery: Sequence[PhaseStats]

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run.to_json(),
            "outcome_counts": dict(self.run.outcome_counts),
            "recovery": [s.__dict__.copy() for s in self.recovery],
            "states": [s.to_json() for s in self.states],
        }


# --- helpers ------------------------------------------------------------------------


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def canonical_json(value: Mapping[str, Any]) -> str:
    """JSON with sorted keys, so equal parameters are equal strings (resume matches on it)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def excerpt(text: str, limit: int = OUTPUT_EXCERPT) -> str:
    """Head and tail of ``text``: fsck names the problem first and sums up last."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[… {len(text) - 2 * half} characters cut …]\n{text[-half:]}"


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); needs ≥1 value."""
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _refuse(path: Path, problem: str, hint: str | None = None) -> InputError:
    return InputError(
        f"{path}: {problem}",
        hint=hint or "pass --db with a crashlab results file, or move this file away",
    )


# --- the store ----------------------------------------------------------------------


class Store:
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
            _check_magic(path)
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
        kind: RunKind,
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
    ) -> Outcome:
        """Store a checked state in one transaction; returns its verdict.

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
            c.execute(
                "INSERT INTO verdicts (run_id, state_id, outcome, decided_at) VALUES (?, ?, ?, ?)",
                (*key, str(verdict), now),
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

    def zfs_scans(self, kind: ScanKind | None = None) -> list[dict[str, Any]]:
        """Every stored scan (of ``kind``) of finished runs, as dicts, JSON columns decoded."""
        cur = self._conn.execute(
            "SELECT z.*, r.scenario FROM zfs_scans z JOIN runs r ON r.id = z.run_id"
            " WHERE (? IS NULL OR z.kind = ?) ORDER BY z.created_at, z.id",
            (_opt_str(kind), _opt_str(kind)),
        )
        names = [d[0] for d in cur.description]
        out = []
        for row in cur.fetchall():
            d = dict(zip(names, row, strict=True))
            for k in ("errors", *_ZFS_JSON_COLUMNS):
                d[k] = json.loads(d[k]) if d.get(k) is not None else None
            out.append(d)
        return out

    # -- resuming

    def done_state_ids(self, run_id: str) -> set[str]:
        """States of ``run_id`` that have a verdict: the ones a resumed run skips."""
        rows = self._conn.execute("SELECT state_id FROM verdicts WHERE run_id = ?", (run_id,))
        return {r[0] for r in rows}

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

    # -- reading

    def resolve_run_id(self, prefix: str) -> str:
        """The full id of the run whose id is or starts with ``prefix``.

        :raise InputError: no run, or more than one, matches.
        """
        exact = self._conn.execute("SELECT id FROM runs WHERE id = ?", (prefix,)).fetchone()
        if exact:
            return str(exact[0])
        matches = (
            [
                str(r[0])
                for r in self._conn.execute(
                    "SELECT id FROM runs WHERE substr(id, 1, ?) = ? ORDER BY started_at DESC",
                    (len(prefix), prefix),
                )
            ]
            if prefix
            else []
        )
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise InputError(
                f"run id {prefix!r} is ambiguous in {self.path}",
                hint="it matches " + ", ".join(matches[:8]) + "; give more characters",
            )
        recent = [
            str(r[0])
            for r in self._conn.execute(
                "SELECT id FROM runs ORDER BY started_at DESC, rowid DESC LIMIT 5"
            )
        ]
        raise InputError(
            f"no run {prefix!r} in {self.path}",
            hint=("recent runs: " + ", ".join(recent) + "  (see `scenario results runs`)")
            if recent
            else "the database has no runs yet",
        )

    def runs(self, limit: int | None = 20) -> list[RunRow]:
        """The newest runs first, with their verdict counts."""
        rows = self._conn.execute(
            f"{_RUN_SELECT} ORDER BY started_at DESC, rowid DESC LIMIT ?",
            (-1 if limit is None else limit,),
        ).fetchall()
        return [self._run_row(r) for r in rows]

    def run(self, run_id: str) -> RunRow:
        """One run by id or unique id prefix.

        :raise InputError: unknown or ambiguous id (the hint lists recent ids).
        """
        full = self.resolve_run_id(run_id)
        row = self._conn.execute(f"{_RUN_SELECT} WHERE id = ?", (full,)).fetchone()
        return self._run_row(row)

    def run_detail(self, run_id: str) -> RunDetail:
        """A run with all its states (and their checks) and recovery-time statistics.

        :raise InputError: unknown or ambiguous id.
        """
        run = self.run(run_id)
        checks: dict[str, list[CheckRow]] = {}
        for sid, *rest in self._conn.execute(
            "SELECT state_id, stage, checker, outcome, exit_status, seconds, output"
            " FROM checks WHERE run_id = ? ORDER BY id",
            (run.id,),
        ):
            checks.setdefault(sid, []).append(CheckRow(*rest))
        states = [
            StateRow(sid, gen, prefix, mark, desc, outcome, checks.get(sid, []))
            for sid, gen, prefix, mark, desc, outcome in self._conn.execute(
                "SELECT s.id, s.generator, s.prefix, s.last_mark, s.description, v.outcome"
                " FROM crash_states s LEFT JOIN verdicts v"
                " ON v.run_id = s.run_id AND v.state_id = s.id"
                " WHERE s.run_id = ? ORDER BY s.prefix, s.id",
                (run.id,),
            )
        ]
        times: dict[str, list[float]] = {}
        for phase, seconds in self._conn.execute(
            "SELECT phase, seconds FROM recovery_times WHERE run_id = ?", (run.id,)
        ):
            times.setdefault(phase, []).append(float(seconds))
        order = {str(p): i for i, p in enumerate(Phase)}
        recovery = [
            _stats(phase, sorted(values))
            for phase, values in sorted(times.items(), key=lambda kv: order.get(kv[0], 99))
        ]
        return RunDetail(run, states, recovery)

    def outcome_counts(self, run_id: str) -> dict[str, int]:
        """Verdict counts of a run's crash states, most severe last."""
        rows = self._conn.execute(
            "SELECT outcome, count(*) FROM verdicts WHERE run_id = ? GROUP BY outcome",
            (run_id,),
        )
        return _ordered_counts((str(o), int(n)) for o, n in rows)

    def _run_row(self, r: sqlite3.Row | tuple[Any, ...]) -> RunRow:
        (
            rid,
            scenario,
            kind,
            params,
            seed,
            started,
            finished,
            status,
            host,
            accel,
            kernel,
            qemu,
            tools,
            image,
            fs,
            summary,
        ) = r
        return RunRow(
            id=rid,
            scenario=scenario,
            kind=kind,
            params=json.loads(params),
            seed=seed,
            started_at=started,
            finished_at=finished,
            status=RunStatus(status),
            host=host,
            accelerator=accel,
            guest_kernel=kernel,
            qemu_version=qemu,
            tool_versions=json.loads(tools),
            image_hash=image,
            fs=fs,
            summary=json.loads(summary) if summary is not None else None,
            outcome_counts=self.outcome_counts(rid),
        )

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """An ad-hoc query (e.g. on the ``v_*`` views) for reports and tests; autocommitted."""
        return list(self._conn.execute(sql, params))


_RUN_SELECT = (
    "SELECT id, scenario, kind, params, seed, started_at, finished_at, status, host,"
    " accelerator, guest_kernel, qemu_version, tool_versions, image_hash, fs, summary FROM runs"
)


def _opt_str(v: StrEnum | None) -> str | None:
    return None if v is None else str(v)


def _ordered_counts(pairs: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Counts keyed by outcome, worst last, so every report lists them the same way."""
    counts = dict(pairs)

    def rank(name: str) -> int:
        try:
            return Outcome(name).severity
        except ValueError:
            return 1_000

    return {k: counts[k] for k in sorted(counts, key=rank)}


def _stats(phase: str, values: Sequence[float]) -> PhaseStats:
    return phase_stats(phase, values)


def phase_stats(phase: str, sorted_values: Sequence[float]) -> PhaseStats:
    """n, mean, stdev, min, p50, p95, max of ``sorted_values`` (at least one value)."""
    n = len(sorted_values)
    mean = sum(sorted_values) / n
    # Two passes in plain floats: statistics.stdev is exact but ~50x slower (Fractions),
    # and a table over 100,000 states must stay well under a second.
    var = sum((x - mean) ** 2 for x in sorted_values) / (n - 1) if n > 1 else 0.0
    return PhaseStats(
        phase=phase,
        n=n,
        mean=mean,
        stdev=math.sqrt(var),
        min=sorted_values[0],
        p50=percentile(sorted_values, 0.50),
        p95=percentile(sorted_values, 0.95),
        max=sorted_values[-1],
    )


def _upsert_state(c: sqlite3.Connection, run_id: str, s: CrashState) -> None:
    c.execute(
        "INSERT INTO crash_states (run_id, id, log_hash, generator, params, prefix, last_mark,"
        " description) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (run_id, id) DO UPDATE SET log_hash = excluded.log_hash,"
        " generator = excluded.generator, params = excluded.params, prefix = excluded.prefix,"
        " last_mark = excluded.last_mark, description = excluded.description",
        (
            run_id,
            s.id,
            s.log_hash,
            s.generator,
            canonical_json(s.params),
            s.prefix,
            s.last_mark,
            s.description,
        ),
    )


def _check_magic(path: Path) -> None:
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise _refuse(path, f"cannot read: {e.strerror}") from None
    # An empty file is what `touch` makes; SQLite treats it as a new database.
    if head and head != _SQLITE_MAGIC:
        raise _refuse(path, "is not an SQLite database (so not a crashlab results file)")


def _adopt(path: Path, conn: sqlite3.Connection) -> None:
    """Check that the file is ours (or empty), migrate it, then switch on WAL."""
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        if app_id != APPLICATION_ID and (app_id != 0 or tables or version != 0):
            shown = ", ".join(sorted(tables)[:6]) or "none"
            raise _refuse(
                path,
                f"is an SQLite database but not a crashlab results file "
                f"(application_id {app_id:#x}, tables: {shown})",
            )
        if version > SCHEMA_VERSION:
            raise _refuse(
                path,
                f"was written by a newer crashlab (schema {version}, this one knows "
                f"up to {SCHEMA_VERSION})",
                hint="update crashlab, or pass --db with another file",
            )
        # WAL changes the file header, so it is switched on only once the file is ours.
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL: a lab about lost fsync'd data should not lose its own on a power cut; one
        # fsync per crash state costs nothing next to booting a guest.
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        for target in range(version, SCHEMA_VERSION):
            _migrate(conn, target)
        # A file with our id but without one of our tables was damaged by hand or by a
        # tool; do not guess how to repair it.
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
        if missing := _TABLES - tables:
            raise _refuse(
                path,
                f"crashlab results file is damaged: missing table(s) {', '.join(sorted(missing))}",
                hint="restore it from a backup, or pass --db with a new file",
            )
    except sqlite3.DatabaseError as e:
        raise _refuse(path, f"is not a usable SQLite database: {e}") from None


def _migrate(conn: sqlite3.Connection, current: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have migrated while we waited for the lock.
        if conn.execute("PRAGMA user_version").fetchone()[0] != current:
            conn.execute("ROLLBACK")
            return
        for stmt in MIGRATIONS[current]:
            conn.execute(stmt)
        if current == 0:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {current + 1}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
