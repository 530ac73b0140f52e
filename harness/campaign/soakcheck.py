"""What a soak (``harness/campaign/soak.py``) checks after every night: the store whole
(``PRAGMA integrity_check``), the night's campaign finished with every element settled,
nothing counted twice, no verdict of an earlier night lost or changed, the disk within
its budget, and nothing left running or attached: no guest, no loop device over the
lab's files, no device-mapper device (the host has none to leave: said so)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from harness import proc
from harness.vm import leftovers


@dataclass
class Store:
    """The night's view of the store, read with plain SQL (the harness may be dead)."""

    path: Path
    problems: list[str] = field(default_factory=list)

    def _rows(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.path) as con:
            return list(con.execute(sql, args))

    def integrity(self) -> str:
        said = ", ".join(str(r[0]) for r in self._rows("PRAGMA integrity_check"))
        if said != "ok":
            self.problems.append(f"integrity_check: {said}")
        return said

    def last_campaign(self, name: str) -> str | None:
        rows = self._rows(
            "SELECT id FROM campaigns WHERE name = ? ORDER BY started_at DESC, rowid DESC LIMIT 1",
            name,
        )
        return str(rows[0][0]) if rows else None

    def elements(self, campaign: str) -> dict[str, int]:
        rows = self._rows(
            "SELECT status, count(*) FROM campaign_elements WHERE campaign_id = ? GROUP BY 1",
            campaign,
        )
        counts = {str(s): int(n) for s, n in rows}
        unsettled = counts.get("pending", 0) + counts.get("running", 0)
        if unsettled:
            self.problems.append(f"campaign {campaign}: {unsettled} elements never settled")
        return counts

    def twice(self, campaign: str) -> int:
        """Runs two elements claim, and elements done whose run is not done: each a
        result counted twice or counted without being there."""
        shared = self._rows(
            "SELECT run_id FROM campaign_elements WHERE run_id IS NOT NULL"
            " GROUP BY run_id HAVING count(*) > 1"
        )
        hollow = self._rows(
            "SELECT e.key FROM campaign_elements e LEFT JOIN runs r ON r.id = e.run_id"
            " WHERE e.campaign_id = ? AND e.status = 'done' AND coalesce(r.status, '') != 'done'",
            campaign,
        )
        n = len(shared) + len(hollow)
        if n:
            self.problems.append(f"counted twice or hollow: {shared + hollow}")
        return n

    def verdicts(self) -> dict[str, str]:
        return {
            f"{r}/{s}": str(o)
            for r, s, o in self._rows("SELECT run_id, state_id, outcome FROM verdicts")
        }

    def kept(self, before: dict[str, str], now: dict[str, str]) -> int:
        """Verdicts of earlier nights missing or changed now: nothing may be lost."""
        lost = [k for k, o in before.items() if now.get(k) != o]
        if lost:
            self.problems.append(f"{len(lost)} earlier verdicts lost or changed: {lost[:5]}")
        return len(lost)


def left_behind(cache: Path) -> list[str]:
    """Guests of this cache still running, and loop devices over the lab's files (a
    guest of another harness on the host is its own business)."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        argv = p.info.get("cmdline") or []
        if argv and leftovers.is_lab_guest(argv) and any(str(cache) in a for a in argv):
            out.append(f"guest pid {p.info['pid']}")
    if shutil.which("losetup"):
        said = proc.run(["losetup", "-J", "-l"], check=False).stdout or "{}"
        for dev in json.loads(said).get("loopdevices", []):
            if str(cache) in str(dev.get("back-file", "")) or "crashlab" in str(dev):
                out.append(f"loop {dev.get('name')}")
    if shutil.which("dmsetup"):
        said = proc.run(["dmsetup", "ls"], check=False).stdout
        out += [f"dm {line.split()[0]}" for line in said.splitlines() if "crashlab" in line]
    return out
