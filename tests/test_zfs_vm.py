"""One real ZFS experiment in a guest: a small scrub after zeros on one disk (~1.5 min, TCG)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import paths
from harness.config import scenario
from harness.experiments import lifecycle
from harness.experiments.zfs import scan as run
from harness.experiments.zfs.settings import ZfsScenario
from harness.image import build as image
from harness.outcome import Outcome
from harness.store import db as store

pytestmark = pytest.mark.vm


def test_scrub_repairs_zeros_on_one_disk(guest_image: image.Image, tmp_path: Path) -> None:
    sc = scenario.load(
        paths.REPO / "scenarios" / "scrub-zero-1disk.toml",
        ("disk_size=128M", "fill=50", "fault.percent=50"),
    )
    assert isinstance(sc, ZfsScenario)
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    assert isinstance(r.experiment, run.ZfsScan)
    [m] = r.experiment.measurements
    assert m.scan.function == "SCRUB" and m.scan.state == "FINISHED"
    assert m.scan.processed > 0  # bytes repaired
    assert m.status.error_count == 0 and m.outcome is Outcome.CONSISTENT
    assert sum(v.checksum for v in m.status.leaves()) > 0
    assert 40 < m.fill < 60
    # Timed from the events, to the kernel tick, and consistent with the guest's clock.
    assert m.window.seconds is not None and 0 < m.window.seconds <= m.wall_seconds + 0.1
    assert m.zfs_version.startswith("2.") and m.guest_kernel == guest_image.manifest["kernel"]
    with store.Store.open(db, create=False) as st:
        [row] = st.zfs_scans(store.ScanKind.SCRUB)
        assert row["data_errors"] == 0 and row["processed"] == m.scan.processed
        assert row["zfs_version"] == m.zfs_version and st.run(r.run_id).status == "done"
        # where the seconds came from is a column, and the run resumes by item
        assert row["seconds_source"] == "events" and row["item"] == "c0-r0"
        assert row["expected_loss"] == 0 and len(row["scans"]) == 1


def test_a_sweep_fills_each_pool_once(guest_image: image.Image, tmp_path: Path) -> None:
    """Two fills of one pool come from one fill that stopped at each on its way up (the
    25 % disks kept, then filled on to 50 %); each scan starts from overlays on those,
    plugged into the guest the fill was made in: an import, no boot, no create, no fill.
    The kept fills are gone once both results are stored."""
    sc = scenario.load(
        "resilver-sweep-ci", ('sweep.layout=["raidz1"]', "sweep.fill=[25, 50]", "repeat=1")
    )
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    assert isinstance(r.experiment, run.ZfsScan) and r.status == 0
    a, b = sorted(r.experiment.measurements, key=lambda m: m.fill)
    assert 20 < a.fill < 30 and 45 < b.fill < 55
    assert a.written < b.written and a.pool_alloc < b.pool_alloc
    for m in (a, b):
        assert m.outcome is Outcome.CONSISTENT and m.scan.function == "RESILVER"
        # timed from the events: the queue kept them (udev may load zfs first, without
        # our queue length; the drop counter itself counts from the module's load)
        assert m.seconds_source == "events"
        assert {"restore", "import", "scan"} <= set(m.phases) and "fill" not in m.phases
    # One guest for the fill and both scans: their disks were plugged in and out of it.
    for m in (a, b):
        assert "boot" not in m.phases and {"plug", "unplug"} <= set(m.phases)
    assert r.experiment.kept is not None and r.experiment.kept.boots == 1
    costs = r.experiment.fills
    assert len(costs) == 2 and all("fill" in c for c in costs.values())
    assert sum("create" in c for c in costs.values()) == 1  # one pool made, one ladder
    assert sum("boot" in c for c in costs.values()) == 1  # the run's one boot
    assert not list(lifecycle.run_dir(r.run_id).glob("base-*"))
    with store.Store.open(db, create=False) as st:
        summary = json.loads(st.execute("SELECT summary FROM runs")[0][0])
    assert summary["fill_once"] and "harness_per_scan_second" in summary
    # The scan as a curve: samples while it ran, ending finished, and a plot of them.
    for m in (a, b):
        assert m.progress and m.progress[-1]["state"] == "FINISHED"
        assert [p["t"] for p in m.progress] == sorted(p["t"] for p in m.progress)
    from harness.report import plots

    with store.Store.open(db, create=False) as st:
        png = plots.plot_progress(st, r.run_id, tmp_path / "progress.png")
    assert png.stat().st_size > 10_000
    # The end-of-run report, printed after the store is closed, as `scenario run` does.
    from rich.console import Console

    from harness.experiments.summary import print_summary

    console = Console(record=True, width=200)
    print_summary(console, r)
    text = console.export_text()  # (it empties the record)
    assert "raidz1" in text and "harness time per second of scan" in text
