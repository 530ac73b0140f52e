"""Check-log (kind ``check-log``): crash replay of a log the lab did not record.

The same steps as crash replay (``harness/crashstate/onelog.py``) once the log is in the run
directory: the generators cut it into states from its own start point, each state is
host-checked and mounted in a guest, and stored as any crash run is, so ``scenario results
show`` and ``scenario reproduce`` work on it. Only the log's origin differs: it is linked
into the run directory instead of recorded, and with no oracle given only fsck and mount
judge.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.crashstate.onelog import OneLog
from harness.crashstate.stored import load_oracle
from harness.experiments import lifecycle
from harness.experiments.checklog import source
from harness.record import logwrites


class CheckLog(OneLog[lifecycle.Run], lifecycle.Experiment):
    """Crash replay of a given log: no recording, states from the log's start point."""

    @classmethod
    def needs_guest(cls, sc: Any) -> bool:
        return bool(sc.check.guest)  # nothing is recorded: only the guest checks boot one

    @classmethod
    def preflight(cls, sc: Any) -> None:
        # Bad input before a run row exists: a failed run would say the lab failed.
        with logwrites.open_log(sc.log) as lg:
            source.resolve_start(lg, sc.after_mark, sc.after_entry)
            source.require_fits(lg, sc.fs.disk_size)
        load_oracle(sc.oracle)
        super().preflight(sc)  # its host checker

    def obtain(self, rdir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        link_log(self.sc.log, rdir / "log.raw")
        with logwrites.open_log(rdir / "log.raw") as lg:
            self.start = source.resolve_start(lg, self.sc.after_mark, self.sc.after_entry)
        self.start_after = self.start.entry
        meta = {
            "device_size": self.sc.fs.disk_size,
            "seconds": {},
            "source": str(Path(self.sc.log).resolve()),
            "start": self.start.entry,
        }
        (rdir / "recording.json").write_text(json.dumps(meta))
        return meta, load_oracle(self.sc.oracle)

    def caveat(self) -> str | None:
        if not self.sc.check.guest:
            return "by the host checker only (check.guest=false: states were not mounted)"
        if not self.oracle:
            return "by fsck and mount only (no --oracle: fsync'd data was not verified)"
        return None

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "start": self.start.says}


def link_log(log: Path, dest: Path) -> None:
    """The log in the run directory, for a resume and ``scenario reproduce``: a hard link
    (survives the original's removal, costs no space), else a symbolic one (another
    filesystem; logs of real devices are too large to copy)."""
    if dest.exists() or dest.is_symlink():
        return
    try:
        os.link(log, dest)
    except OSError:
        dest.symlink_to(Path(log).resolve())
