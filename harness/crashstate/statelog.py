"""Where a stored crash state's log is kept, whatever kind of run cut it: the folder of
its ``log.raw``, beside the recording's facts (``recording.json``: ``device_size``, a
check-log run's ``start``) and the oracle the workload left (``oracle.json``).

* a crash-replay or check-log run: the run's directory, one log per run;
* a search run: ``<run>/workloads/<workload>/`` (``workloads.py``), the workload
  named by the state id's prefix (``seq1-000123/<id>``);
* a recovery crash state (cut from a recovery's log, ``recoverycrash.py``):
  ``<run>/recovery/<parent>/``, found by the log's hash; the device and the oracle
  are its run's (the recovery ran on a copy of the parent's image).

``scenario reproduce``, ``explain`` and ``triage`` read a state's log through this one
place, so a run kind that keeps its logs elsewhere is taught here once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import paths
from harness.crashstate import workloads
from harness.errors import InputError
from harness.record import logwrites
from harness.replay.crashstates import CrashState


@dataclass(frozen=True)
class StateLog:
    rdir: Path  # the run's directory
    folder: Path  # the log's
    workload: str | None = None  # a search run's workload id
    recovery: bool = False  # cut from a recovery's log

    @property
    def log(self) -> Path:
        return self.folder / "log.raw"

    @property
    def facts_path(self) -> Path:
        """The recording's facts: the workload's own, or the run's for a recovery log."""
        return (self.rdir if self.recovery else self.folder) / "recording.json"

    def facts(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.facts_path.read_text())
        return data

    def device_size(self) -> int:
        return int(self.facts()["device_size"])

    def oracle(self) -> dict[str, Any] | None:
        """The oracle recorded beside the log (or its run's); None when there is none
        (a check-log run keeps the path it was given in its parameters)."""
        path = self.facts_path.parent / "oracle.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}


def file_name(state_id: str) -> str:
    """A state id as one path component (an image's, a triage folder's): a search
    state's id holds its workload's (``seq1-000123/<id>``)."""
    return state_id.replace("/", "_")


def of(run_id: str, state: CrashState) -> StateLog:
    """Where run ``run_id`` keeps the log ``state`` was cut from."""
    rdir = paths.run_dir(run_id)
    wid, slash, _ = state.id.partition("/")
    if slash and (workloads.folder(rdir, wid) / "log.raw").exists():
        return StateLog(rdir, workloads.folder(rdir, wid), workload=wid)
    if slash and (rec := workloads.load(rdir, wid)) is not None and rec.dropped:
        raise InputError(
            f"state {state.id}: the log of workload {wid} was let go when its run "
            f"{run_id} finished (keep_logs = 'findings': none of its states was a finding)",
            hint=f"record it again: the run's scenario and settings (scenario results show "
            f"{run_id}) with --set 'workload.indices=[{rec.facts['index']}]' --set "
            f"workload.seq={rec.facts['seq']}",
        )
    for candidate in sorted(rdir.glob("recovery/*/log.raw")):
        with logwrites.open_log(candidate) as lg:
            if lg.hash == state.log_hash:
                return StateLog(rdir, candidate.parent, recovery=True)
    return StateLog(rdir, rdir)
