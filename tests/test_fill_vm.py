"""A full disk in a real guest (issue 47): ext4 filled to 99.5 % with its free space in
holes, then the op generator's workload. Some of its writes fail with ENOSPC; each is
recorded as failed and the workload goes on; the crash states start after the fill; the
stock kernel keeps every promise (a negative control: no finding)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scenariorun import only_oracle, said, scenario_run

pytestmark = pytest.mark.vm


def test_a_filled_ext4_records_enospc_and_keeps_its_promises(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    r = scenario_run(
        db, "ext4-ordered-fsync",
        "--set", "fs.fill=0.995", "--set", "workload.ops=60", "--set", "crash.max_states=8",
        "--set", "crash.states=[{kind='mark'}]",
    )  # fmt: skip
    assert r.returncode == 0, said(r)
    oracle = only_oracle(db)
    failed = [e for e in oracle["ops"] if e.get("failed")]
    assert failed and {e["failed"] for e in failed} == {"ENOSPC"}
    assert oracle["complete"]
