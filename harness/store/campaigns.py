"""The campaign tables (``campaigns``, ``campaign_elements``): a mixin of ``Store``
(harness/store/db.py), so the campaign engine and ``campaign status`` name what they
read and write instead of writing SQL."""

from __future__ import annotations

import sqlite3
from typing import Any


class StoreCampaigns:
    _conn: sqlite3.Connection

    def latest_campaign(self, name: str, spec_hash: str) -> tuple[str, str, str] | None:
        """(id, status, started_at) of the newest campaign ``name`` run with this spec."""
        row: tuple[Any, ...] | None = self._conn.execute(
            "SELECT id, status, started_at FROM campaigns WHERE name = ? AND spec_hash = ?"
            " ORDER BY started_at DESC, rowid DESC LIMIT 1",
            (name, spec_hash),
        ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]), str(row[2]))
