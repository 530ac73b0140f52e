"""The campaign tables (``campaigns``, ``campaign_elements``): a mixin of ``Store``
(harness/store/db.py), so the campaign engine and ``campaign status`` name what they
read and write instead of writing SQL.

Each statement here is atomic on its own (autocommitted), as the engine's bookkeeping
wants. An element's update is built apart from running it (``element_update``) because
the Dask engine runs it inside the transaction that merges the element's run
(``Store.merge_run(..., also=[update])``): the run and its element's status land
together or not at all.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, NamedTuple

# What an element update may set, and the counters it may bump.
_ELEMENT_COLUMNS = frozenset(
    {"status", "run_id", "seconds", "started_at", "finished_at", "pid", "last_error"}
)
_ELEMENT_COUNTERS = frozenset({"failures", "interruptions"})


class CampaignRun(NamedTuple):
    """A campaign element as ``results diff`` and the JUnit report read it."""

    scenario: str
    status: str  # pending, running, done, failed, quarantined
    overrides: tuple[str, ...]  # its --set items, "kernel=..." among them
    seed: int | None
    run_id: str | None
    last_error: str | None = None  # "not run: ..." for an element its kernel cannot run
    seconds: float | None = None
    failures: int = 0
    interruptions: int = 0


class CampaignInfo(NamedTuple):
    """A campaign's own row."""

    id: str
    name: str
    path: str
    status: str  # running, done, interrupted
    started_at: str
    finished_at: str | None
    host: str | None


class ElementUpdate(NamedTuple):
    """One UPDATE of one campaign element; a (sql, args) pair, as ``merge_run`` takes."""

    sql: str
    args: tuple[Any, ...]


def element_update(
    campaign_id: str,
    key: str,
    *,
    count: str | None = None,
    unless_done: bool = False,
    **values: Any,
) -> ElementUpdate:
    """Set ``values`` (column -> value; None is NULL) of the element ``key``, bump the
    counter ``count`` (failures or interruptions); ``unless_done``: leave a done element
    alone (a late failure of a duplicate attempt changes nothing).

    :raise ValueError: an unknown column or counter.
    """
    unknown = set(values) - _ELEMENT_COLUMNS | ({count} - _ELEMENT_COUNTERS - {None})
    if unknown:
        raise ValueError(f"campaign_elements: cannot set {sorted(map(str, unknown))}")
    sets = [f"{c} = ?" for c in values] + ([f"{count} = {count} + 1"] if count else [])
    return ElementUpdate(
        f"UPDATE campaign_elements SET {', '.join(sets)} WHERE campaign_id = ? AND key = ?"
        + (" AND status != 'done'" if unless_done else ""),
        (*values.values(), campaign_id, key),
    )


class StoreCampaigns:
    _conn: sqlite3.Connection

    def latest_campaign(
        self, name: str, spec_hash: str | None = None
    ) -> tuple[str, str, str] | None:
        """(id, status, started_at) of the newest campaign ``name`` run with this spec
        (any spec without one)."""
        row = self._conn.execute(
            "SELECT id, status, started_at FROM campaigns WHERE name = ?"
            " AND (? IS NULL OR spec_hash = ?) ORDER BY started_at DESC, rowid DESC LIMIT 1",
            (name, spec_hash, spec_hash),
        ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]), str(row[2]))

    def unfinished_campaign(
        self, name: str, spec_hash: str
    ) -> tuple[str, str | None, int | None] | None:
        """(id, host, pid) of the newest campaign ``name`` with this spec not yet done."""
        row = self._conn.execute(
            "SELECT id, host, pid FROM campaigns WHERE name = ? AND spec_hash = ?"
            " AND status != 'done' ORDER BY started_at DESC, rowid DESC LIMIT 1",
            (name, spec_hash),
        ).fetchone()
        return None if row is None else (str(row[0]), row[1], row[2])

    def begin_campaign(
        self,
        cid: str,
        name: str,
        path: str,
        spec_hash: str,
        spec: str,
        started_at: str,
        host: str,
        pid: int,
    ) -> None:
        """Record a new campaign (``spec``: its canonical JSON), running in ``pid``."""
        self._conn.execute(
            "INSERT INTO campaigns (id, name, path, spec_hash, spec, started_at, host, pid)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (cid, name, path, spec_hash, spec, started_at, host, pid),
        )

    def resume_campaign(self, cid: str, host: str, pid: int) -> None:
        """Mark an unfinished campaign as running in ``pid`` on ``host``."""
        self._conn.execute(
            "UPDATE campaigns SET status = 'running', host = ?, pid = ? WHERE id = ?",
            (host, pid, cid),
        )

    def interrupt_campaign(self, cid: str) -> None:
        self._conn.execute(
            "UPDATE campaigns SET status = 'interrupted', pid = NULL WHERE id = ?", (cid,)
        )

    def finish_campaign(self, cid: str, finished_at: str) -> None:
        self._conn.execute(
            "UPDATE campaigns SET status = 'done', finished_at = ? WHERE id = ?",
            (finished_at, cid),
        )

    def add_campaign_elements(
        self, cid: str, elements: Sequence[tuple[str, int, str, str, int | None]]
    ) -> None:
        """Elements (key, position, scenario, overrides JSON, seed) a campaign does not
        have yet: idempotent, so a campaign killed while adding them completes them."""
        self._conn.executemany(
            "INSERT OR IGNORE INTO campaign_elements (campaign_id, key, position, scenario,"
            " overrides, seed) VALUES (?, ?, ?, ?, ?, ?)",
            [(cid, *e) for e in elements],
        )

    def campaign_elements(self, cid: str) -> list[tuple[Any, ...]]:
        """(key, status, run_id, failures, interruptions, last_error, seconds) of every
        element of a campaign, in order."""
        return list(
            self._conn.execute(
                "SELECT key, status, run_id, failures, interruptions, last_error, seconds"
                " FROM campaign_elements WHERE campaign_id = ? ORDER BY position",
                (cid,),
            )
        )

    def campaign_nights(self, name: str, n: int) -> list[str]:
        """The ids of the newest ``n`` campaigns called ``name`` (its nights), newest first."""
        rows = self._conn.execute(
            "SELECT id FROM campaigns WHERE name = ? ORDER BY started_at DESC, rowid DESC LIMIT ?",
            (name, n),
        )
        return [str(r[0]) for r in rows]

    def integrity(self) -> str:
        """``PRAGMA integrity_check``'s answer, one line ("ok" when whole)."""
        return ", ".join(str(r[0]) for r in self._conn.execute("PRAGMA integrity_check"))

    def element_counts(self, cid: str) -> dict[str, int]:
        """Campaign ``cid``'s elements by status."""
        rows = self._conn.execute(
            "SELECT status, count(*) FROM campaign_elements WHERE campaign_id = ? GROUP BY 1",
            (cid,),
        )
        return {str(s): int(n) for s, n in rows}

    def counted_twice(self, cid: str) -> list[str]:
        """Runs two elements claim (any campaign), and campaign ``cid``'s elements done
        whose run is not done: a result counted twice, or counted without being there."""
        shared = self._conn.execute(
            "SELECT run_id FROM campaign_elements WHERE run_id IS NOT NULL"
            " GROUP BY run_id HAVING count(*) > 1"
        )
        hollow = self._conn.execute(
            "SELECT e.key FROM campaign_elements e LEFT JOIN runs r ON r.id = e.run_id"
            " WHERE e.campaign_id = ? AND e.status = 'done' AND coalesce(r.status, '') != 'done'"
            # done with no run: a kernel that cannot run the element says so (NotRun)
            " AND (e.run_id IS NOT NULL OR coalesce(e.last_error, '') NOT LIKE 'not run:%')",
            (cid,),
        )
        return [str(r[0]) for r in [*shared, *hollow]]

    def every_verdict(self) -> dict[str, str]:
        """Every state's verdict: ``RUN/STATE`` -> outcome."""
        rows = self._conn.execute("SELECT run_id, state_id, outcome FROM verdicts")
        return {f"{r}/{s}": str(o) for r, s, o in rows}

    def pending_overrides(self) -> list[list[str]]:
        """The ``--set`` overrides of every element an unfinished campaign has still to
        run (what a running or resumable campaign will need)."""
        rows = self._conn.execute(
            "SELECT e.overrides FROM campaign_elements e JOIN campaigns c"
            " ON c.id = e.campaign_id WHERE c.status != 'done' AND e.status != 'done'"
        )
        return [list(json.loads(r[0])) for r in rows]

    def resolve_campaign_id(self, prefix: str) -> list[str]:
        """Ids of the campaigns whose id is ``prefix`` (that one only) or starts with it."""
        exact = self._conn.execute("SELECT id FROM campaigns WHERE id = ?", (prefix,)).fetchone()
        if exact or not prefix:
            return [str(exact[0])] if exact else []
        return [
            str(r[0])
            for r in self._conn.execute(
                "SELECT id FROM campaigns WHERE substr(id, 1, ?) = ? ORDER BY started_at DESC",
                (len(prefix), prefix),
            )
        ]

    def campaign_name(self, cid: str) -> str:
        row = self._conn.execute("SELECT name FROM campaigns WHERE id = ?", (cid,)).fetchone()
        return "" if row is None else str(row[0])

    def campaign(self, cid: str) -> CampaignInfo | None:
        """The campaign ``cid`` (a full id), or None."""
        row = self._conn.execute(
            "SELECT id, name, path, status, started_at, finished_at, host FROM campaigns"
            " WHERE id = ?",
            (cid,),
        ).fetchone()
        return None if row is None else CampaignInfo(*row)

    def campaign_runs(self, cid: str) -> list[CampaignRun]:
        """Every element of a campaign and its run, in order: what ``results diff`` pairs
        across two campaigns."""
        return [
            CampaignRun(str(sc), str(st), tuple(json.loads(ov)), seed, *rest)
            for sc, st, ov, seed, *rest in self._conn.execute(
                "SELECT scenario, status, overrides, seed, run_id, last_error, seconds,"
                " failures, interruptions FROM campaign_elements"
                " WHERE campaign_id = ? ORDER BY position",
                (cid,),
            )
        ]

    def update_element(self, update: ElementUpdate) -> None:
        """Run an ``element_update()`` on its own."""
        self._conn.execute(update.sql, update.args)

    def scenario_durations(self, scenario: str, limit: int = 20) -> list[float]:
        """Seconds the newest ``limit`` finished runs of ``scenario`` took."""
        rows = self._conn.execute(
            "SELECT (julianday(finished_at) - julianday(started_at)) * 86400 FROM runs"
            " WHERE scenario = ? AND status = 'done' AND finished_at IS NOT NULL"
            " ORDER BY started_at DESC LIMIT ?",
            (scenario, limit),
        )
        return [float(r[0]) for r in rows if r[0] is not None and r[0] > 0]
