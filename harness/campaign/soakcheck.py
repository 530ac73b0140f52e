"""What a soak (``harness/campaign/soak.py``) checks after every night: the store whole
(``PRAGMA integrity_check``), the night's campaign finished with every element settled,
nothing counted twice, no verdict of an earlier night lost or changed, the disk within
its budget, and nothing left running or attached: no guest, no loop device over the
lab's files, no device-mapper device (the host has none to leave: said so)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from harness import proc
from harness.store import db as store
from harness.vm import leftovers


@dataclass
class Store:
    """The night's view of the store, opened afresh for each question (the harness that
    wrote it may have been killed)."""

    path: Path
    problems: list[str] = field(default_factory=list)

    def _open(self) -> store.Store:
        return store.Store.open(self.path, create=False)

    def integrity(self) -> str:
        with self._open() as st:
            said = st.integrity()
        if said != "ok":
            self.problems.append(f"integrity_check: {said}")
        return said

    def last_campaign(self, name: str) -> str | None:
        with self._open() as st:
            found = st.campaign_nights(name, 1)
        return found[0] if found else None

    def elements(self, campaign: str) -> dict[str, int]:
        with self._open() as st:
            counts = st.element_counts(campaign)
        unsettled = counts.get("pending", 0) + counts.get("running", 0)
        if unsettled:
            self.problems.append(f"campaign {campaign}: {unsettled} elements never settled")
        return counts

    def twice(self, campaign: str) -> int:
        with self._open() as st:
            found = st.counted_twice(campaign)
        if found:
            self.problems.append(f"counted twice or hollow: {found}")
        return len(found)

    def verdicts(self) -> dict[str, str]:
        with self._open() as st:
            return st.every_verdict()

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
