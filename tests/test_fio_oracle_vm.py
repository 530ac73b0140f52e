"""fio crash states judged by data (rule 12), with real guests: the fio workload without
barriers must lose blocks a completed fsync made durable, and on default ext4 every
state must hold them. CI-sized (a 4 MiB job in 4 sections, a dozen states each)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from harness.config import scenario
from harness.experiments import lifecycle
from harness.image import build as image

pytestmark = pytest.mark.vm

# The scenario's job at a quarter of its size: 256 blocks per section.
CI_JOB = (
    'workload.job="[global]\\nioengine=psync\\nbs=4k\\nsize=4m\\nrw=randwrite\\nfsync=32\\n'
    'randseed=1\\ndirect=0\\n\\n[randwrite-fsync]\\nfilename=fio.data\\n"'
)
CI = [CI_JOB, "crash.max_states=12", "check.guest_batch=12"]
HARNESS = ("harness_error", "timeout", "panic")


def run(name: str, tmp_path: Path, extra: list[str]) -> tuple[lifecycle.Report, sqlite3.Connection]:
    if image.cached() is None:
        pytest.skip("guest image not built")
    db = tmp_path / "lab.sqlite"
    report = lifecycle.execute(scenario.load(name, [*CI, *extra]), db=db)
    return report, sqlite3.connect(db)


def block_notes(con: sqlite3.Connection, run_id: str) -> list[dict[str, dict[str, int]]]:
    """Every guest check's fio block classes (the line ``judge`` keeps last)."""
    rows = con.execute(
        "SELECT output FROM checks WHERE run_id = ? AND stage = 'guest'", (run_id,)
    ).fetchall()
    found = [
        json.loads(ln.removeprefix("fio blocks: "))
        for (output,) in rows
        for ln in output.splitlines()
        if ln.startswith("fio blocks: ")
    ]
    assert found, rows[:3]
    return found


def test_without_barriers_fsyncd_fio_blocks_go_missing(tmp_path: Path) -> None:
    report, con = run(
        "ext4-fio-nobarrier",
        tmp_path,
        ["crash.states=[{kind='mark'}, {kind='reorder', max_states=8}]"],
    )
    counts = report.counts
    assert counts.get("data_loss", 0) > 0, counts
    assert not any(counts.get(o) for o in HARNESS), counts
    assert "control_failed" not in report.summary, report.summary
    lost = [
        b
        for b in block_notes(con, report.run_id)
        if b["required"]["valid"] < sum(b["required"].values())
    ]
    assert lost, "a data_loss verdict must come from required fio blocks"


def test_default_ext4_keeps_every_fsyncd_fio_block(tmp_path: Path) -> None:
    report, con = run("ext4-fio", tmp_path, ["crash.states=[{kind='fua'}, {kind='mark'}]"])
    counts = {o: n for o, n in report.counts.items() if n}
    assert set(counts) == {"consistent"}, counts
    notes = block_notes(con, report.run_id)
    # The oracle really required blocks of the states after a section's mark, and found
    # every one fio's own.
    required = [b["required"] for b in notes if sum(b["required"].values())]
    assert required, notes
    assert all(r["valid"] == sum(r.values()) for r in required), required
