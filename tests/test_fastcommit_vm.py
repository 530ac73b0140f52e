"""ext4 with fast commits on real kernels (issue 47): the catalogue's
ext4-fc-replay-ro-mount steps end in an fsync that a fast commit serves, so the state at
its mark needs a fast-commit replay. Each state is mounted read-only (the ro recovery
mode) and read-write. On Debian's 6.12.115 the read-only mount refuses (the replay's
metadata updates meet the read-only superblock): caught, ``mount_failed`` in the ro
mode. On 6.12.117 (the fix) it replays; there, with rule 20 on, the replayed parent
directory shows the mount's time (docs/findings/ext4-fc-replay-parent-times.md) -- in
both modes, and nothing else. Kernels are fetched on first use (apt-get download)."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.scenariorun import said, scenario_run

REPO = Path(__file__).resolve().parent.parent
STEPS = REPO / "campaigns" / "known-bugs" / "ext4-fc-replay-ro-mount.ops"

pytestmark = pytest.mark.vm


def run(db: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return scenario_run(db, "ext4-fast-commit-fsync", "--workload-file", str(STEPS),
                        "--set", "crash.states=[{kind='mark'}]", *more)  # fmt: skip


def checks(db: Path, kernel: str) -> list[tuple[str, str, str]]:
    with sqlite3.connect(db) as con:
        return con.execute(
            "SELECT c.checker, c.outcome, c.output FROM checks c JOIN runs r ON r.id = c.run_id"
            " WHERE r.guest_kernel = ? AND c.outcome != 'consistent'",
            (kernel,),
        ).fetchall()


def test_the_ro_mount_replays_fast_commits_only_on_the_fixed_kernel(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    buggy = run(db, "--kernel", "6.12.115+deb12-amd64", "--set", "check.times=false")
    assert buggy.returncode == 1, said(buggy)
    got = checks(db, "6.12.115+deb12-amd64")
    assert [(c, o) for c, o, _ in got] == [("mount[ro]+verify", "mount_failed")]
    fixed = run(db, "--kernel", "6.12.117+deb12-amd64")
    assert fixed.returncode == 1, said(fixed)
    got = checks(db, "6.12.117+deb12-amd64")
    # Only the parent's time, in both modes: the ro mount replayed (the fix).
    assert sorted(c for c, _, _ in got) == ["mount+verify", "mount[ro]+verify"]
    assert all(o == "data_loss" and '"path": "d/", "stamp"' in out for _, o, out in got)
