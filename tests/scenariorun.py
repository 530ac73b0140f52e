"""``scenario run`` as a user types it, for the tests that boot guests: one subprocess of
the lab's own CLI, its store given, its output kept for the assertion's message."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness import paths

REPO = Path(__file__).resolve().parent.parent


def scenario_run(db: Path, name: str, *more: str) -> subprocess.CompletedProcess[str]:
    """``scenario run NAME --db DB MORE...`` from the repository's top."""
    argv = [sys.executable, "-m", "harness", "run", name, "--db", str(db), *more]
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=1800)


def said(r: subprocess.CompletedProcess[str]) -> str:
    """What a run printed, its last lines: the message of a failed assertion."""
    return r.stdout[-3000:] + r.stderr[-3000:]


def only_oracle(db: Path) -> dict[str, Any]:
    """The oracle document of the one run in ``db``."""
    with sqlite3.connect(db) as con:
        (run_id,), *_ = con.execute("SELECT id FROM runs").fetchall()
    return dict(json.loads((paths.work_dir() / "runs" / run_id / "oracle.json").read_text()))
