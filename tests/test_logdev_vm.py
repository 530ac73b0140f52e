"""A journal or log on a device of its own (``fs.devices = 2``, issue 47) in real guests:
each device on its own dm-log-writes, both cut at the same mark.

The known answers: the mutant jbd2-extdev-no-fs-flush (a commit to the external
journal without the filesystem device's flush first) loses a hole's fsync'd write, which
the stock kernel keeps on the same steps; and the stock kernel's own loss, an fsync after
an overwrite (docs/findings/ext4-extjournal-fsync-no-flush.md), found where it is and
gone with the proposed fix. (XFS's external log and btrfs's mirror are run by
campaigns/devices.toml; CI's time goes to the known answers.)"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harness.image import build as image
from tests.scenariorun import said, scenario_run

pytestmark = pytest.mark.vm
REPO = Path(__file__).resolve().parent.parent
HOLE = REPO / "mutants" / "workloads" / "hole-fsync.ops"
OVERWRITE = REPO / "mutants" / "workloads" / "overwrite-fsync.ops"
FIX = REPO / "docs" / "findings" / "ext4-extjournal-fsync-no-flush.patch"
# Without dioread_nolock a hole's blocks are allocated written and join the commit's
# ordered data: the case the commit's own flush covers (see the finding).
ORDERED = "fs.mount_options=['nodioread_nolock']"


@pytest.fixture(autouse=True)
def _image() -> None:
    if image.cached() is None:
        pytest.skip("guest image not built")


def outcomes(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT outcome, count(*) FROM verdicts GROUP BY 1").fetchall()
    return {o: n for o, n in rows}


def logs(db: Path) -> set[str]:
    with sqlite3.connect(db) as con:
        return {r for (r,) in con.execute("SELECT role FROM run_logs")}


def lost_state(db: Path) -> str:
    with sqlite3.connect(db) as con:
        (sid,) = con.execute("SELECT state_id FROM verdicts WHERE outcome = 'data_loss'").fetchone()
    return str(sid)


def lab(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "harness", *argv]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_a_commit_without_the_data_device_flush_is_caught(tmp_path: Path) -> None:
    # Every recovery mode too, each on overlays of both devices (ro-device: both
    # read-only, fstests' generic/766): the stock kernel keeps each mode's promise.
    modes = "check.recovery=['ro-device','ro','noload','rw','remount']"
    stock = scenario_run(
        tmp_path / "a.sqlite", "ext4-logdev-fsync", "--workload-file", str(HOLE),
        "--set", ORDERED, "--set", modes,
    )  # fmt: skip
    assert stock.returncode == 0, said(stock)
    assert set(outcomes(tmp_path / "a.sqlite")) == {"consistent"}
    with sqlite3.connect(tmp_path / "a.sqlite") as con:
        checkers = {c for (c,) in con.execute("SELECT DISTINCT checker FROM checks")}
    assert {"mount[ro-device]+verify", "mount[remount]+verify"} <= checkers, checkers
    assert logs(tmp_path / "a.sqlite") == {"workload", "second-device"}
    mutant = scenario_run(
        tmp_path / "b.sqlite", "ext4-logdev-fsync", "--workload-file", str(HOLE),
        "--set", ORDERED, "--set", "kernel=+jbd2-extdev-no-fs-flush",
    )  # fmt: skip
    assert mutant.returncode == 1, said(mutant)
    assert outcomes(tmp_path / "b.sqlite").get("data_loss"), said(mutant)


def test_the_stock_kernels_overwrite_loss_and_its_fix(tmp_path: Path) -> None:
    stock = scenario_run(
        tmp_path / "a.sqlite", "ext4-logdev-fsync", "--workload-file", str(OVERWRITE)
    )
    assert stock.returncode == 1, said(stock)
    assert outcomes(tmp_path / "a.sqlite").get("data_loss") == 1, said(stock)
    lost = lost_state(tmp_path / "a.sqlite")
    # Both images rebuilt from their own logs; triage, which takes one log apart, says so.
    rep = lab(tmp_path, "reproduce", lost, "--db", "a.sqlite", "-o", "s.img")
    assert rep.returncode == 0 and (tmp_path / "s.img.2").stat().st_size > 0, said(rep)
    tri = lab(tmp_path, "triage", lost, "--db", "a.sqlite")
    assert tri.returncode == 2 and "two devices" in tri.stderr, said(tri)
    fixed = scenario_run(
        tmp_path / "b.sqlite", "ext4-logdev-fsync", "--workload-file", str(OVERWRITE),
        "--fs-patch", str(FIX),
    )  # fmt: skip
    assert fixed.returncode == 0, said(fixed)
