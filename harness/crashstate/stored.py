"""A stored crash state found again: its run and state from an id (``stored_state``), its
image rebuilt from the log it was cut from (``reproduce``), and the oracle file a run was
given (``load_oracle``) -- what ``scenario reproduce``, ``explain`` and ``triage`` start
from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.crashstate import statelog
from harness.crashstate.checking import SecondLog
from harness.errors import InputError
from harness.model import oracle as guest_oracle
from harness.record import logwrites
from harness.record.recorder import SECOND_LOG
from harness.replay import replayer as replay
from harness.replay.crashstates import CrashState
from harness.store import db as store
from harness.store.model import RunRow

# The run kinds whose crash states are cut from one log each (``CrashState``):
# what reproduce, explain and triage take. A check-log run is stored as a crash run.
ONE_LOG_KINDS = ("crash", "search")
ONE_LOG_TEXT = "crash-replay, check-log and search runs"


def stored_state(state_id: str, db: Path, *, two_devices: bool = False) -> tuple[str, CrashState]:
    """The run and the state a stored crash state id (or a prefix of one) names.

    :raise InputError: no such state in ``db``, a state of a run kind whose states are
        not one log's (a ZFS pool's span several disks), or of a filesystem on two devices
        (``fs.devices = 2``) unless the caller takes both (``two_devices``).
    """
    st = store.Store.open(db, create=False)
    try:
        found = st.crash_state(state_id)
        run = None if found is None else st.run(found[0])
        kind = None if run is None else run.kind
        # A search run's ids are WORKLOAD/STATE: the state's half alone names no id.
        near = st.crash_state_ids(f"%/{state_id}%") if found is None else []
    finally:
        st.close()
    if found is None:
        hint = "ids are listed by: scenario results show RUN"
        raise InputError(
            f"no crash state with id {state_id!r} in {db}",
            hint=f"did you mean {' or '.join(near)}? ({hint})" if near else hint,
        )
    run_id, params = found
    if kind not in ONE_LOG_KINDS:
        raise InputError(
            f"crash state {state_id} is of run {run_id}, a {kind} run: its states are not "
            "cut from one dm-log-writes log",
            hint=f"scenario reproduce, explain and triage take the states of {ONE_LOG_TEXT}",
        )
    if devices(run) > 1 and not two_devices:
        # Its writes are two logs': explain and triage take one log apart, so far.
        raise InputError(
            f"crash state {state_id} of run {run_id} is of two devices (fs.devices = 2):"
            " explain and triage take one log apart, so far",
            hint=f"scenario reproduce {state_id} rebuilds both images; the run's workload "
            "file reproduces it (docs/findings/ext4-extjournal-fsync-no-flush.md)",
        )
    return run_id, CrashState.from_dict(json.loads(params))


def devices(run: RunRow | None) -> int:
    return int((run.params.get("fs") or {}).get("devices", 1)) if run is not None else 1


def reproduce(state_id: str, *, db: Path, out: Path) -> tuple[Path, dict[str, Any]]:
    """Rebuild one stored crash state's image from the log it was cut from; of a
    filesystem on two devices, the second device's too (``OUT.2``, cut at the same mark)."""
    run_id, state = stored_state(state_id, db, two_devices=True)
    where = statelog.of(run_id, state)
    with logwrites.open_log(where.log) as lg:
        replay.materialize(lg, state, out, where.device_size())
    with store.Store.open(db, create=False) as st:
        run = st.run(run_id)  # its fs: which checker's command line the user is shown
    extra: dict[str, Any] = {}
    if devices(run) > 1:
        second = out.with_name(out.name + ".2")
        meta = json.loads((where.rdir / "recording.json").read_text())
        with logwrites.open_log(where.rdir / SECOND_LOG) as lg2:
            SecondLog(lg2, int(meta["second_device_size"])).image(state, second)
        extra["second_image"] = str(second)
    return out, {
        "run_id": run_id,
        "state": state.to_dict(),
        "description": state.describe(),
        "fs": run.fs,
        **extra,
    }


def load_oracle(path: Path | None) -> dict[str, Any]:
    """The oracle file (the lab's format, ``harness/model/oracle/``), or none.

    :raise InputError: it cannot be read or is not a JSON object.
    """
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise InputError(f"--oracle {path}: cannot read it: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"--oracle {path}: not JSON: {e}") from None
    found = data.get("format") if isinstance(data, dict) else None
    if found != guest_oracle.FORMAT:
        # The guest's verifier refuses any other format: every state would be the lab's
        # failure (harness_error) after minutes of checks.
        raise InputError(
            f"--oracle {path}: format {found!r}, not {guest_oracle.FORMAT!r}",
            hint="the oracle.json `scenario record` writes beside its log; record again "
            "if it is older",
        )
    return dict(data)
