"""The workload kind end to end in real guests, CI-sized: the journal-cost job (4 KiB
random I/O with fsync) for 3 seconds on ext4 data=journal and data=ordered, ext2 and a
ZFS pool with dedup, each in its own guest; then the io table and the plot from the
store."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from harness.config import scenario
from harness.experiments import lifecycle
from harness.experiments.workload.experiment import Workload, trace_dir
from harness.image import build as image
from harness.report import io, query
from harness.store.db import Store

CELLS = (
    'cells=[{type="ext4", data_mode="journal"}, {type="ext4", data_mode="ordered"},'
    ' {type="ext2"}, {type="zfs", properties={dedup="on", recordsize="4K"}}]'
)


@pytest.mark.vm
def test_journal_cost_tiny(
    guest_image: image.Image, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRASHLAB_RESULTS", str(tmp_path / "results"))
    sc = scenario.load("journal-cost", ("fio.size=8M", "fio.runtime=3", CELLS))
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    assert isinstance(r.experiment, Workload) and r.status == 0, r.counts
    with Store.open(db, create=False) as st:
        obs = {o["item"]: o for o in st.observations(r.run_id)}
        run = st.run(r.run_id)
        table = query.grouped(st, "io", ["fs", "data_mode"])
    assert run.accelerator in ("tcg", "kvm")
    assert all(o["outcome"] == "consistent" for o in obs.values()), obs
    d = {item.split(" #")[0]: o["metrics"]["derived"] for item, o in obs.items()}
    journal, ordered = d["ext4 data=journal"], d["ext4 data=ordered"]
    zfs = d["zfs dedup=on recordsize=4K"]
    for row in d.values():
        assert row["write_mbps"] > 0 and row["read_mbps"] > 0
        assert row["write_amplification"] > 0 and row["space_used_mb"] > 0
        assert 0 < row["cpu_busy_pct"] <= 100
    # data=journal writes every data block twice (journal, then home): more device
    # bytes per application byte than data=ordered, measured by blktrace
    assert journal["write_amplification"] > ordered["write_amplification"]
    # fsync on a journaled ext4 reaches the disk as flushes (none are asked of ext2's
    # disk beyond what fsync's writeback does, so only the journaled ones are held to it)
    assert journal["flushes_per_fsync"] > 0 and ordered["flushes_per_fsync"] > 0
    assert zfs["dedup_ratio"] >= 1.0 and "compress_ratio" in zfs
    # the raw trace is kept beside the run log
    kept = trace_dir(r.run_id, "ext2 #1")
    assert sorted(p.name for p in kept.glob("trace.blktrace.*"))
    assert obs["ext2 #1"]["metrics"]["trace"]["write_bytes"] > 0
    # the table: one row per (fs, data mode) and accelerator, said in the title
    keys = {g.key for g in table.groups}
    assert ("ext4", "journal", run.accelerator) in keys and ("zfs", None, run.accelerator) in keys
    console = Console(record=True, width=250)
    io.print_io(console, table)
    assert run.accelerator.upper() in console.export_text()
    with Store.open(db, create=False) as st:
        out = io.plot_io(st, ["cell"], tmp_path / "io.png")
    assert out.stat().st_size > 1000
    claims = (run.summary or {})["claims"]
    assert any(
        c["seed"] == "000/002" and "device bytes per byte fio wrote" in c["measured"]
        for c in claims
    )
