"""What triaging one stored crash state needs to know of its run: the log, the filesystem
and checks as the run made them, the oracle, the kernel, and the state's own verdict.

A crash-replay or check-log run keeps one log (``<run>/log.raw``), a search run one per
workload (``<run>/workloads/<id>/``): ``statelog.of`` says which folder, and the rest is
read the same way from it. The settings are read back from the parameters stored with
the run, validated by the same models that validated the scenario (a search run's
``fs``, ``check`` and ``crash`` are the crash kind's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.crash import CheckSpec, FsSpec
from harness.crashstate import statelog
from harness.crashstate.stored import load_oracle, stored_state
from harness.errors import InputError
from harness.model.oracle.doc import OracleDoc
from harness.outcome import Counted, Outcome, counts_as, expected_without_journal
from harness.record import logwrites
from harness.replay import crashstates
from harness.store.db import Store
from harness.store.model import CheckRow, Promise, RunRow


class NotAFinding(InputError):
    """The state's verdict is not a finding: there is nothing to take apart."""


@dataclass(frozen=True)
class Target:
    run: RunRow
    state: crashstates.CrashState
    verdict: Outcome
    checks: tuple[CheckRow, ...]
    fs: FsSpec
    check: CheckSpec
    corrupt: str  # the positive control's damage, applied to every candidate too
    oracle: OracleDoc
    size: int  # the recorded device's bytes
    start: int  # the entry crash states begin after (the mkfs mark)
    rdir: Path  # the run's directory (triage's work and report go under it)
    log_path: Path  # the log the state was cut from
    # A search run's workload (its recording facts: ``ace.describe``'s id, seq, index,
    # ops); empty for a run of one workload.
    workload: dict[str, Any] = field(default_factory=dict)
    # The profile the state was judged by and the promise it broke, as stored (schema
    # 10); None for a state stored before.
    promise: Promise | None = None

    @property
    def kernel(self) -> str | None:
        k = self.run.params.get("kernel")
        return None if k is None else str(k)

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.run.params)


def load(state_id: str, db: Path) -> Target:
    """The stored state ``state_id`` (or an id prefix) and its run.

    :raise InputError: no such state, a run of another kind (``stored_state`` names the
        kinds), a recovery's state, or its log is gone.
    :raise NotAFinding: the state's verdict is not a finding (it says which).
    """
    run_id, state = stored_state(state_id, db)
    with Store.open(db, create=False) as st:
        run = st.run(run_id)
        row = next((s for s in st.run_detail(run_id).states if s.id == state.id), None)
    params = dict(run.params)
    fs = FsSpec.model_validate(params["fs"])
    verdict = Outcome(row.outcome) if row is not None and row.outcome else None
    if verdict is None:
        raise NotAFinding(f"crash state {state.id} of run {run_id} has no verdict yet")
    expected = expected_without_journal(verdict, fs.journaled)
    if counts_as(verdict, expected) is not Counted.FINDING:
        why = " (expected of a filesystem without a journal)" if expected else ""
        raise NotAFinding(
            f"crash state {state.id} of run {run_id} is not a finding: its verdict is "
            f"{verdict}{why}",
            hint=f"scenario results show {run_id} lists the run's findings",
        )
    where = statelog.of(run_id, state)
    if not where.log.exists() or not where.facts_path.exists():
        raise InputError(
            f"run {run_id}: the log of crash state {state.id} is gone from {where.folder}",
            hint="the run's work directory was removed",
        )
    if where.recovery:
        raise InputError(
            f"crash state {state.id} was cut from a recovery's log (a crash during recovery):"
            " triage takes the states of the run's own logs only, so far",
            hint=f"scenario reproduce {state.id} and scenario explain {state.id} take it",
        )
    meta = where.facts()
    with logwrites.open_log(where.log) as lg:
        start = meta.get("start")
        if start is None:
            start = lg.find_mark(crashstates.MKFS_MARK)
        if start is None:
            raise InputError(f"{where.log}: the log has no {crashstates.MKFS_MARK!r} mark")
    return Target(
        run=run,
        state=state,
        verdict=verdict,
        checks=tuple(row.checks) if row is not None else (),
        fs=fs,
        check=CheckSpec.model_validate(params.get("check", {})),
        corrupt=str(params.get("crash", {}).get("corrupt", "none")),
        oracle=_oracle(run, where),
        size=int(meta["device_size"]),
        start=int(start),
        rdir=where.rdir,
        log_path=where.log,
        workload=meta if where.workload else {},
        promise=row.promise if row is not None else None,
    )


def _oracle(run: RunRow, where: statelog.StateLog) -> OracleDoc:
    """The oracle: recorded beside the log, or the file a check-log run was given."""
    recorded = where.oracle()
    if recorded is not None:
        return OracleDoc.of(recorded)
    given = run.params.get("oracle")
    return OracleDoc.of(load_oracle(Path(given)) if given else None)
