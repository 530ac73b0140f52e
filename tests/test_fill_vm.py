"""A full disk in a real guest (issue 47): ext4 filled to 99.5 % with its free space in
holes, then the op generator's workload. Some of its writes fail with ENOSPC; each is
recorded as failed and the workload goes on; the crash states start after the fill; the
stock kernel keeps every promise (a negative control: no finding)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harness import paths

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.vm


def test_a_filled_ext4_records_enospc_and_keeps_its_promises(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    argv = [
        sys.executable, "-m", "harness", "run", "ext4-ordered-fsync", "--db", str(db),
        "--set", "fs.fill=0.995", "--set", "workload.ops=60", "--set", "crash.max_states=8",
        "--set", "crash.states=[{kind='mark'}]",
    ]  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with sqlite3.connect(db) as con:
        (run_id,), *_ = con.execute("SELECT id FROM runs").fetchall()
    oracle = json.loads((paths.work_dir() / "runs" / run_id / "oracle.json").read_text())
    failed = [e for e in oracle["ops"] if e.get("failed")]
    assert failed and {e["failed"] for e in failed} == {"ENOSPC"}
    assert oracle["complete"]
