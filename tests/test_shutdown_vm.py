"""A crash by shutdown on real kernels (issue 47): the catalogue's ext4-logflush-shutdown
steps end in FS_IOC_SHUTDOWN with the log-flush flag. On Debian's 6.12.95, which sets the
shutdown flag before forcing the commit, the commit's ordered data is refused, the
journal aborts and the names made since the last commit are gone after the remount:
caught as rule 1's file-missing, d/a (a name the log flush promised without its data)
among them. On the image's kernel (6.1.0-56: the fix is in since 6.1.0-52) the same steps
are clean. The kernel is fetched on first use (apt-get download, cached)."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.scenariorun import said, scenario_run

REPO = Path(__file__).resolve().parent.parent
STEPS = REPO / "campaigns" / "known-bugs" / "ext4-logflush-shutdown.ops"

pytestmark = pytest.mark.vm


def run(db: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return scenario_run(db, "ext4-ordered-fsync", "--workload-file", str(STEPS),
                        "--set", 'fs.mount_options=["nodelalloc"]',
                        "--set", "crash.states=[{kind='mark'}]", *more)  # fmt: skip


def test_a_log_flushing_shutdown_loses_names_on_the_buggy_kernel_only(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    buggy = run(db, "--kernel", "6.12.95+deb12-amd64")
    assert buggy.returncode == 1, said(buggy)
    fixed = run(db)
    assert fixed.returncode == 0, said(fixed)
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT r.guest_kernel, c.outcome, c.output"
            " FROM checks c JOIN runs r ON r.id = c.run_id"
        ).fetchall()
    lost = [o for k, outcome, o in rows if k.startswith("6.12.95") and outcome == "data_loss"]
    assert lost, "the shutdown's state was not judged a loss"
    assert all('"missing": [' in o and '"d/a"' in o and '"d/b"' in o for o in lost)
    clean = [outcome for k, outcome, _ in rows if not k.startswith("6.12.95")]
    assert len(clean) >= 3 and set(clean) == {"consistent"}  # the shutdown's mark, umount, end
