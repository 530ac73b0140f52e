"""Crash replay (kind ``crash``): a workload recorded in a guest on dm-log-writes, its log
cut into crash states, each host-checked and mounted in a guest. The steps are the
crash-state core's (``harness/crashstate/onelog.py``, shared with check-log); the kind
says what "no finding" does not cover for the workload it ran.
"""

from __future__ import annotations

from harness.config.workloads import FioWorkload, FsstressWorkload
from harness.crashstate.onelog import OneLog
from harness.experiments import lifecycle


class CrashReplay(OneLog[lifecycle.Run], lifecycle.Experiment):
    """Record a workload on dm-log-writes, cut the log into crash states, check each."""

    def caveat(self) -> str | None:
        if not self.sc.check.guest:
            return (
                "by the host checker (check.guest=false: states were not mounted and fsync'd"
                " data was not verified)"
            )
        w = self.sc.workload
        if isinstance(w, FioWorkload) and w.sections:
            return None
        if isinstance(w, FioWorkload | FsstressWorkload):
            return (
                f"by fsck and mount only ({w.type} writes no oracle: fsync'd data was not verified)"
            )
        return None
