"""The reports' reads: grouped tables, per-state results, plot points and exports. A
mixin of ``Store`` (harness/store/db.py) beside ``StoreReads``, so every SQL statement
the harness runs is in ``harness/store/`` and a report only names what it wants.

The grouped-table reads take SQL *fragments* (a table kind's source and its field
expressions): those are declarations the kinds register (``report/query.py``); the
statements around them, and running them, are here.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any


def _marks(ids: Sequence[str]) -> str:
    # Only placeholders go into the text; the ids are bound.
    return ", ".join("?" * len(ids))


def _in(column: str, ids: Sequence[str], lead: str = " AND") -> str:
    """A filter on ``ids``, or none at all when there are none (every run)."""
    return f"{lead} {column} IN ({_marks(ids)})" if ids else ""


class StoreQueries:
    _conn: sqlite3.Connection

    # -- grouped tables (report/query.py)

    def param_paths(self) -> list[str]:
        """Every leaf path of the stored scenario parameters (``workload.ops``), list
        elements left out. SQLite 3.40 quotes the labels that are not plain identifiers
        (``$.fs."mount_options"``): those quotes are taken off the names."""
        rows = self._conn.execute(
            "SELECT DISTINCT substr(j.fullkey, 3) FROM (SELECT DISTINCT params FROM runs) r,"
            " json_tree(r.params) j WHERE j.type != 'object' AND j.fullkey NOT LIKE '%[%'"
        )
        return sorted({str(p).replace('"', "") for (p,) in rows if p})

    def run_fields(self, exprs: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        """Run id -> the values of ``exprs`` (SQL over ``runs r``) for every run."""
        rows = self._conn.execute(f"SELECT r.id, {', '.join(exprs or ['NULL'])} FROM runs r")
        return {str(row[0]): tuple(row[1:]) for row in rows}

    def grouped_values(
        self, source: str, exprs: Sequence[str], split: str | None, value: str, runs: Sequence[str]
    ) -> list[tuple[Any, ...]]:
        """Rows (run_id, *exprs, split, values) of ``source`` (rows called ``o``), the
        values of each group one comma-separated ``group_concat`` string: one string
        per group is far cheaper to hand back than a row per value."""
        local = "".join(f", {e}" for e in exprs)
        split_sql = f"o.{split}" if split else "NULL"
        return list(
            self._conn.execute(
                f"SELECT o.run_id{local}, {split_sql}, group_concat(o.{value})"
                f" FROM ({source}) o{_in('o.run_id', runs, ' WHERE')}"
                f" GROUP BY {_group_cols(len(exprs) + 2)}",
                runs,
            )
        )

    def grouped_counts(
        self, source: str, exprs: Sequence[str], runs: Sequence[str]
    ) -> list[tuple[Any, ...]]:
        """Rows (run_id, *exprs, outcome, count) of ``source`` (rows called ``o``)."""
        local = "".join(f", {e}" for e in exprs)
        return list(
            self._conn.execute(
                f"SELECT o.run_id{local}, o.outcome, count(*)"
                f" FROM ({source}) o{_in('o.run_id', runs, ' WHERE')}"
                f" GROUP BY {_group_cols(len(exprs) + 2)}",
                runs,
            )
        )

    # -- one run's crash states

    def state_prefixes(self, run_id: str) -> list[tuple[int, str]]:
        """(log prefix, verdict or 'not checked') of every crash state, by prefix."""
        return list(
            self._conn.execute(
                "SELECT s.prefix, COALESCE(v.outcome, 'not checked') FROM crash_states s"
                " LEFT JOIN verdicts v ON v.run_id = s.run_id AND v.state_id = s.id"
                " WHERE s.run_id = ? ORDER BY s.prefix",
                (run_id,),
            )
        )

    def state_results(self, run_id: str) -> dict[str, tuple[str | None, dict[str, float]]]:
        """State id -> (verdict or None, phase -> recovery seconds) of a run's states."""
        out: dict[str, tuple[str | None, dict[str, float]]] = {
            str(sid): (outcome, {})
            for sid, outcome in self._conn.execute(
                "SELECT s.id, v.outcome FROM crash_states s LEFT JOIN verdicts v"
                " ON v.run_id = s.run_id AND v.state_id = s.id WHERE s.run_id = ?",
                (run_id,),
            )
        }
        for sid, phase, seconds in self._conn.execute(
            "SELECT state_id, phase, seconds FROM recovery_times WHERE run_id = ?", (run_id,)
        ):
            if sid in out:
                out[sid][1][str(phase)] = float(seconds)
        return out

    def states_with_outcome(self, run_id: str, outcome: str, limit: int = 5) -> list[str]:
        """The first ``limit`` state ids (by id) of a run with verdict ``outcome``."""
        rows = self._conn.execute(
            "SELECT state_id FROM verdicts WHERE run_id = ? AND outcome = ?"
            " ORDER BY state_id LIMIT ?",
            (run_id, outcome, limit),
        )
        return [str(r[0]) for r in rows]

    # -- plots

    def recovery_phase_points(self, runs: Sequence[str] = ()) -> list[tuple[Any, ...]]:
        """(cell, size, phase, seconds) of every phase of every recovery-run item (of
        ``runs``, all recovery runs without)."""
        return list(
            self._conn.execute(
                "SELECT json_extract(o.cell, '$.cell'), json_extract(o.cell, '$.size'),"
                " p.key, p.value FROM observations o"
                " JOIN runs r ON r.id = o.run_id AND r.kind = 'recovery',"
                f" json_each(o.metrics, '$.phases') p WHERE 1{_in('r.id', runs)}",
                runs,
            )
        )

    def zfs_scan_points(
        self, kind: str, line: str, x: str, runs: Sequence[str] = ()
    ) -> list[tuple[Any, Any, float]]:
        """(``line``, ``x``, seconds) of the scans of ``kind`` (of ``runs``).

        :raise ValueError: ``line`` or ``x`` is not layout, fill or repetition.
        """
        if not {line, x} <= _SCAN_AXES:
            raise ValueError(f"zfs_scan_points: axes must be among {sorted(_SCAN_AXES)}")
        return list(
            self._conn.execute(
                f"SELECT {line}, {x}, seconds FROM zfs_scans WHERE kind = ?{_in('run_id', runs)}",
                (kind, *runs),
            )
        )

    def scan_progress(self, run_id: str) -> list[tuple[str, str, float, int, str]]:
        """(item, layout, fill target, repetition, progress JSON) of a run's scans."""
        return list(
            self._conn.execute(
                "SELECT item, layout, fill_target, repetition, progress FROM zfs_scans"
                " WHERE run_id = ? ORDER BY id",
                (run_id,),
            )
        )

    def scan_rows(self, run_id: str) -> list[tuple[Any, ...]]:
        """(item, kind, layout, fill target, seconds, issued, processed, phases JSON,
        progress JSON, cell JSON) of a run's scans, in order."""
        return list(
            self._conn.execute(
                "SELECT item, kind, layout, fill_target, seconds, issued, processed, phases,"
                " progress, cell FROM zfs_scans WHERE run_id = ? ORDER BY id",
                (run_id,),
            )
        )

    # -- exports

    def state_rows(self, columns: Sequence[str], runs: Sequence[str]) -> list[tuple[Any, ...]]:
        """``columns`` of ``v_states`` for the crash states of ``runs`` (none without),
        by run, prefix, id."""
        return list(
            self._conn.execute(
                f"SELECT {', '.join(columns)} FROM v_states WHERE run_id IN ({_marks(runs)})"
                " ORDER BY run_id, prefix, state_id",
                runs,
            )
        )

    def recovery_times(self, runs: Sequence[str]) -> list[tuple[str, str, str, float]]:
        """(run_id, state_id, phase, seconds) of every crash state of ``runs``."""
        return list(
            self._conn.execute(
                "SELECT run_id, state_id, phase, seconds FROM recovery_times"
                f" WHERE run_id IN ({_marks(runs)})",
                runs,
            )
        )


_SCAN_AXES = {"layout", "fill", "repetition"}


# -- the same groupings as SQL text, for datasette (report/serve_meta.py): there the
# fields are (name, SQL over ``o``, the kind's rows, and ``r``, their run) pairs.


def stats_statement(
    source: str, fields: Sequence[tuple[str, str]], split: str | None, value: str
) -> str:
    """n, mean, min and max of ``value`` per group of ``fields`` (and ``split``) of
    ``source``. SQLite has no percentiles: ``results table`` adds p50 and p95."""
    keys = [*fields, *([(split, f"o.{split}")] if split else [])]
    v = f"o.{value}"
    stats = ", ".join(f"round({f}({v}), 3) AS {f.replace('avg', 'mean')}" for f in _STATS)
    return (
        f"SELECT {_named(keys)}count({v}) AS n, {stats}"
        f" FROM ({source}) o JOIN runs r ON r.id = o.run_id WHERE {v} IS NOT NULL"
        + _grouped(len(keys))
    )


def counts_statement(source: str, fields: Sequence[tuple[str, str]]) -> str:
    """Rows of ``source`` per group of ``fields`` and outcome."""
    keys = [*fields, ("outcome", "o.outcome")]
    return (
        f"SELECT {_named(keys)}count(*) AS n FROM ({source}) o JOIN runs r ON r.id = o.run_id"
        + _grouped(len(keys))
    )


_STATS = ("avg", "min", "max")


def _named(keys: Sequence[tuple[str, str]]) -> str:
    return "".join(f'{sql} AS "{name}", ' for name, sql in keys)


def _grouped(n: int) -> str:
    return f" GROUP BY {_group_cols(n)} ORDER BY {_group_cols(n)}" if n else ""


def _group_cols(n: int) -> str:
    return ", ".join(str(i + 1) for i in range(n))
