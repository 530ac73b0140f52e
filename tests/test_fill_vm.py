"""A full disk in a real guest (issue 47): ext4 filled to 99.5 % with its free space in
holes, then the op generator's workload. Some of its writes fail with ENOSPC; each is
recorded as failed and the workload goes on; the crash states start after the fill; the
stock kernel keeps every promise (a negative control: no finding)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.scenariorun import only_oracle, said, scenario_run

pytestmark = pytest.mark.vm
REPO = Path(__file__).resolve().parent.parent


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


def test_a_refused_create_leaves_nothing_and_the_mutant_an_unattached_inode(
    tmp_path: Path,
) -> None:
    """The ENOSPC known answer (issue 47 item 4): a full disk, creates until the root
    directory needs a block the disk has not (mutants/workloads/enospc-creates.ops). The
    stock kernel refuses them cleanly; the mutant ext4-enospc-create-leaks-inode keeps
    each refused create's inode, linked once and named nowhere, which e2fsck finds."""
    sets = [
        "--workload-file", str(REPO / "mutants" / "workloads" / "enospc-creates.ops"),
        "--set", "fs.fill=0.999", "--set", "crash.states=[{kind='mark'}]",
    ]  # fmt: skip
    stock = scenario_run(tmp_path / "a.sqlite", "ext4-ordered-fsync", *sets)
    assert stock.returncode == 0, said(stock)
    refused = [e for e in only_oracle(tmp_path / "a.sqlite")["ops"] if e.get("failed")]
    assert refused and {(e["op"], e["failed"]) for e in refused} == {("create", "ENOSPC")}
    db = tmp_path / "b.sqlite"
    leaks = "kernel=+ext4-enospc-create-leaks-inode"
    mutant = scenario_run(db, "ext4-ordered-fsync", *sets, "--set", leaks)
    assert mutant.returncode == 1, said(mutant)
    with sqlite3.connect(db) as con:
        found = con.execute(
            "SELECT output FROM checks WHERE stage = 'host' AND outcome = 'repaired'"
        ).fetchall()
    assert found and all("Unattached zero-length inode" in o for (o,) in found), found[:1]
