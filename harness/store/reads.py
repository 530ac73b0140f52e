"""Reading the store: runs, one run's detail, outcome counts, ZFS scans. A mixin of
``Store`` (harness/store/db.py), which owns the connection and, with items.py, every
write."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.outcome import Account, Outcome, is_harness, tally
from harness.outcome import Tallied as Tallied
from harness.store.model import (
    CheckRow,
    ItemOutcome,
    Judged,
    Phase,
    Promise,
    RunDetail,
    RunRow,
    RunStatus,
    ScanKind,
    StateRow,
    _opt_str,
    _ordered_counts,
    _stats,
)
from harness.store.schema import _ZFS_JSON_COLUMNS


class StoreReads:
    _conn: sqlite3.Connection
    path: Path

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
            StateRow(
                sid,
                gen,
                prefix,
                mark,
                desc,
                outcome,
                checks.get(sid, []),
                parent,
                Promise(*promise) if any(promise) else None,
            )
            for sid, gen, prefix, mark, desc, outcome, parent, *promise in self._conn.execute(
                "SELECT s.id, s.generator, s.prefix, s.last_mark, s.description, v.outcome,"
                " s.parent, v.profile, v.promise, v.rule"
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
        reuse = self.reuse_counts(run.id) if states else {}
        generated = (run.summary or {}).get("reuse", {}).get("generated")
        if generated is not None:  # the run's own count: states it never got to are in it
            reuse["generated"] = int(generated)
        return RunDetail(run, states, recovery, self.observations(run.id), reuse)

    def observations(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._conn.execute(
            "SELECT item, cell, metrics, outcome FROM observations WHERE run_id = ? ORDER BY rowid",
            (run_id,),
        )
        return [
            {"item": i, "cell": json.loads(c), "metrics": json.loads(m), "outcome": o}
            for i, c, m, o in rows
        ]

    def outcome_counts(self, run_id: str) -> dict[str, int]:
        """Counts of every item's outcome of a run, whatever table its kind keeps them
        in, expected or not, most severe last."""
        rows = self._conn.execute(
            "SELECT outcome, count(*) FROM v_item_outcomes WHERE run_id = ? GROUP BY outcome",
            (run_id,),
        )
        return _ordered_counts((str(o), int(n)) for o, n in rows)

    def item_outcomes(self, run_id: str) -> list[ItemOutcome]:
        """Every checked item of a run, of any kind, in one shape."""
        rows = self._conn.execute(
            "SELECT item, outcome, detail, source FROM v_item_outcomes WHERE run_id = ?",
            (run_id,),
        )
        return [ItemOutcome(i, Outcome(o), json.loads(d or "{}"), src) for i, o, d, src in rows]

    def account(self, run_id: str) -> tuple[Account, int | None]:
        """A run's stored account and exit status (``v_run_outcomes``: a run the
        lifecycle never accounted for has its items' counts, nothing marked expected, and
        no exit status)."""
        row = self._conn.execute(
            "SELECT exit_status, expect FROM runs WHERE id = ?",
            (run_id,),
        ).fetchone()
        status, expect = row if row else (None, None)
        rows = self._conn.execute(
            "SELECT outcome, expected, n FROM v_run_outcomes WHERE run_id = ?", (run_id,)
        )
        items = (Tallied("", Outcome(o), bool(e)) for o, e, n in rows for _ in range(n))
        which = self._conn.execute(
            "SELECT item, waiver FROM expected_items WHERE run_id = ?", (run_id,)
        ).fetchall()
        return replace(
            tally(items, expect),
            expected_items=frozenset(r[0] for r in which),
            waived={r[0]: r[1] for r in which if r[1]},
        ), status

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
        account, exit_status = self.account(rid)
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
            account=account,
            exit_status=exit_status,
        )

    # -- finding a run or a state

    def run_of_process(self, pid: int, host: str) -> tuple[str, RunStatus] | None:
        """(id, status) of the newest run begun or resumed by process ``pid`` on ``host``."""
        row = self._conn.execute(
            "SELECT id, status FROM runs WHERE pid = ? AND host = ?"
            " ORDER BY started_at DESC, rowid DESC LIMIT 1",
            (pid, host),
        ).fetchone()
        return None if row is None else (str(row[0]), RunStatus(row[1]))

    def finished_run(
        self, scenario: str, params: str, seed: int | None, image_hash: str | None
    ) -> str | None:
        """The newest done run with this scenario, canonical parameters JSON, seed and
        image."""
        row = self._conn.execute(
            "SELECT id FROM runs WHERE scenario = ? AND params = ? AND seed IS ?"
            " AND image_hash = ? AND status = 'done' ORDER BY started_at DESC LIMIT 1",
            (scenario, params, seed, image_hash),
        ).fetchone()
        return None if row is None else str(row[0])

    def crash_state(self, prefix: str) -> tuple[str, str] | None:
        """(run id, parameters JSON) of the newest crash state whose id starts with
        ``prefix``."""
        row = self._conn.execute(
            "SELECT run_id, params FROM crash_states WHERE id LIKE ? ORDER BY rowid DESC",
            (prefix + "%",),
        ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def crash_state_ids(self, like: str, limit: int = 3) -> list[str]:
        """Ids of crash states matching the SQL LIKE pattern ``like``, newest first."""
        rows = self._conn.execute(
            "SELECT DISTINCT id FROM crash_states WHERE id LIKE ? ORDER BY rowid DESC LIMIT ?",
            (like, limit),
        )
        return [str(r[0]) for r in rows]

    def judged(self, check_key: str, identity: str) -> Judged | None:
        """The verdict of a state checked with the same check key and image, in any run
        of this store, and its checks; None if there is none. A harness outcome
        (timeout, panic, harness_error) says nothing about the image, so it is never
        one. A state that was itself checked is preferred to one that took a verdict;
        either way the state named is the one that was checked."""
        harness = [str(o) for o in Outcome if is_harness(o)]
        row = self._conn.execute(
            "SELECT s.run_id, s.id, s.reused_from, v.outcome, v.profile, v.promise, v.rule"
            " FROM crash_states s"
            " JOIN verdicts v ON v.run_id = s.run_id AND v.state_id = s.id"
            " WHERE s.identity = ? AND s.check_key = ?"
            f" AND v.outcome NOT IN ({', '.join('?' * len(harness))})"
            " ORDER BY s.reused_from IS NOT NULL, v.decided_at LIMIT 1",
            (identity, check_key, *harness),
        ).fetchone()
        if row is None:
            return None
        run_id, state_id, reused_from, verdict, *promise = row
        checks = [
            CheckRow(*r)
            for r in self._conn.execute(
                "SELECT stage, checker, outcome, exit_status, seconds, output FROM checks"
                " WHERE run_id = ? AND state_id = ? ORDER BY id",
                (run_id, state_id),
            )
        ]
        if reused_from:
            run_id, _, state_id = str(reused_from).partition("/")
        judged = Promise(*promise) if any(promise) else None
        return Judged(str(run_id), str(state_id), Outcome(verdict), checks, judged)

    def reuse_counts(self, run_id: str) -> dict[str, int]:
        """A crash run's states: generated (here: stored), distinct (by check key and
        image; states without an identity count one each), checked here, reused."""
        n, distinct, reused = self._conn.execute(
            "SELECT count(*), count(DISTINCT COALESCE(check_key || '/' || identity, id)),"
            " count(reused_from) FROM crash_states WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        return {"generated": n, "distinct": distinct, "checked": n - reused, "reused": reused}

    def scanned_items(self, run_id: str) -> set[str]:
        """Items of a ZFS scan run that have their scan: the ones a resumed run skips."""
        rows = self._conn.execute(
            "SELECT item FROM zfs_scans WHERE run_id = ? AND item IS NOT NULL", (run_id,)
        )
        return {str(r[0]) for r in rows}

    def has_rows(self, sql: str) -> bool:
        """Whether a query (a chart's, with no parameter) returns a row: what the
        dashboard asks before it draws axes."""
        return self._conn.execute(f"SELECT 1 FROM ({sql}) LIMIT 1").fetchone() is not None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Any statement, autocommitted: for tests and the store's own modules. The rest
        of the harness calls named methods (tests/test_layering.py holds it to that)."""
        return list(self._conn.execute(sql, params))


_RUN_SELECT = (
    "SELECT id, scenario, kind, params, seed, started_at, finished_at, status, host,"
    " accelerator, guest_kernel, qemu_version, tool_versions, image_hash, fs, summary FROM runs"
)
