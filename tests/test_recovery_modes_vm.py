"""Recovery modes in real guests (issue 46): every state of a small ext4 run recovered
five ways, each its own check; and the known answer -- a mutant of the image kernel's
ext4 whose read-only mount skips the replay it needs is caught by the ``ro`` mode while
the read-write mount, the only one before, stays clean on the same states."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from harness.config import scenario
from harness.experiments import lifecycle
from harness.image import build as image
from harness.outcome import Outcome

pytestmark = pytest.mark.vm
STEPS = Path(__file__).parent.parent / "mutants" / "workloads" / "overwrite-fsync.ops"
MARKS = ["crash.states=[{kind='mark'}]", "workload.type=file", f"workload.path={STEPS}"]


@pytest.fixture(autouse=True)
def _image() -> None:
    if image.cached() is None:
        pytest.skip("guest image not built")


def checks(db: Path, run_id: str) -> dict[tuple[str, str], int]:
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT checker, outcome, count(*) FROM checks WHERE run_id = ? AND stage = 'guest'"
        " AND checker != 'reused' GROUP BY 1, 2",  # a twin state's verdict, taken whole
        (run_id,),
    )
    return {(c, o): n for c, o, n in rows}


def test_every_mode_is_a_check_of_its_own(tmp_path: Path) -> None:
    modes = "check.recovery=['ro-device','noload','ro','rw','remount']"
    sc = scenario.load("ext4-ordered-fsync", [*MARKS, modes])
    report = lifecycle.execute(sc, db=tmp_path / "lab.sqlite")
    got = checks(tmp_path / "lab.sqlite", report.run_id)
    checkers = {c for c, _ in got}
    assert checkers == {"mount+verify", *(f"mount[{m}]+verify" for m in
                        ("ro-device", "noload", "ro", "remount"))}  # fmt: skip
    # The stock kernel keeps every promise each mode makes (a refusal of the read-only
    # device is one of them).
    assert {o for _, o in got} == {str(Outcome.CONSISTENT)}, got
    per_mode = {c: sum(n for (c2, _), n in got.items() if c2 == c) for c in checkers}
    assert len(set(per_mode.values())) == 1  # each state checked in every mode


def test_a_read_only_mount_that_skips_replay_is_caught_by_the_ro_mode(tmp_path: Path) -> None:
    sc = scenario.load(
        "ext4-ordered-fsync",
        [*MARKS, "check.recovery=['ro','rw']", "kernel=+ext4-ro-mount-no-replay"],
    )
    report = lifecycle.execute(sc, db=tmp_path / "lab.sqlite")
    got = checks(tmp_path / "lab.sqlite", report.run_id)
    findings = {o for (c, o) in got if c == "mount[ro]+verify"} - {str(Outcome.CONSISTENT)}
    assert findings & {str(Outcome.MOUNT_FAILED), str(Outcome.DATA_LOSS)}, got
    assert {o for (c, o) in got if c == "mount+verify"} == {str(Outcome.CONSISTENT)}, got
