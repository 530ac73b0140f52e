"""A real bug on the real kernels that had it and did not (issue 37): the catalogue's first
bug (btrfs 5254d4181add, generic/789) run as the catalogue runs it, on Debian's
linux-image-6.1.0-54-amd64 (the last package with the bug: caught) and -55 (the first
with the fix: clean). The kernels are fetched on first use (apt-get download, cached).
The whole catalogue is for nightly use: `scenario campaign run campaigns/known-bugs.toml`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.store.db import Store

REPO = Path(__file__).resolve().parent.parent
CATALOGUE = REPO / "campaigns" / "known-bugs.toml"

pytestmark = pytest.mark.vm


def scenario(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *argv],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=1800,
    )  # fmt: skip


def first_bug_only(into: Path) -> Path:
    """The catalogue's first [[bug]] as a campaign of its own, on its two kernels."""
    block = CATALOGUE.read_text().split("\n[[bug]]\n")[1].split("\n\n")[0]
    block = re.sub(
        r'workload = "(.*)"',
        lambda m: f'workload = "{(CATALOGUE.parent / m.group(1)).resolve()}"',
        block,
    )
    f = into / "known-bugs-ci.toml"
    f.write_text(f'[[bug]]\n{block}\nimage = "skip"\n')
    return f


def test_a_real_bug_is_caught_where_present_and_clean_where_fixed(tmp_path: Path) -> None:
    camp, db = first_bug_only(tmp_path), tmp_path / "lab.sqlite"
    ran = scenario("campaign", "run", str(camp), "--db", str(db))
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    table = scenario("campaign", "known-bugs", str(camp), "--db", str(db), "--json")
    assert table.returncode == 0, table.stdout + table.stderr
    (row,) = json.loads(table.stdout)
    assert row["commit"] == "5254d4181add"
    buggy, fixed = row["verdicts"]["buggy"], row["verdicts"]["fixed"]
    assert (buggy["kernel"], buggy["result"]) == ("6.1.0-54-amd64", "caught")
    assert (fixed["kernel"], fixed["result"]) == ("6.1.0-55-amd64", "clean")
    assert fixed["states"] >= buggy["findings"] >= 1
    # What was caught is the bug's own symptom: the truncated file back at its old size.
    with Store.open(db, create=False) as st:
        detail = st.run_detail(buggy["run_id"])
    lost = [c.output for s in detail.states for c in s.checks if c.outcome == "data_loss"]
    assert lost
    assert all('"path": "d/foo"' in o and '"expected_size": 0' in o for o in lost)
    assert all('"size": 65536' in o for o in lost)
