"""A sweep's scans together: the fit of scan time against bytes, flagged spreads, the
harness's share; and the import that names its disks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.experiments.zfs.fits import MB, cell_label, linear_fit, sweep_summary
from harness.experiments.zfs.progress import eta_seconds, points
from harness.report.zfs import eta_errors


def scan(layout: str, fill: int, moved_mb: float, seconds: float, **phases: float) -> Any:
    return {
        "cell": f"{layout} fill {fill}%",
        "layout": layout,
        "item": "",
        "seconds": seconds,
        "moved": moved_mb * MB,
        "phases": phases,
    }


def test_the_fit_recovers_a_rate_and_a_fixed_cost() -> None:
    # 2 s fixed + 100 MB/s, exactly: slope 0.01 s/MB.
    scans = [scan("raidz1", f, mb, 2 + mb / 100) for f, mb in ((25, 100), (50, 200), (75, 300))]
    fit = sweep_summary(scans)["fits"]["raidz1"]
    assert fit["MB/s"] == pytest.approx(100) and fit["fixed_seconds"] == pytest.approx(2)
    assert fit["r2"] == pytest.approx(1) and fit["n"] == 3


def test_noise_lowers_r2_and_one_cell_cannot_be_fitted() -> None:
    noisy = [scan("mirror", 25, 100, 3.0), scan("mirror", 50, 200, 2.5), scan("mirror", 75, 300, 6)]
    assert sweep_summary(noisy)["fits"]["mirror"]["r2"] < 0.9
    assert linear_fit([1.0, 1.0], [2.0, 3.0]) is None
    assert sweep_summary([scan("raidz2", 25, 100, 3.0)])["fits"] == {}


def test_a_cell_whose_repetitions_spread_is_flagged() -> None:
    scans = [scan("raidz1", 25, 100, s) for s in (4.0, 4.2, 6.8)] + [
        scan("raidz1", 75, 300, s) for s in (10.0, 10.3, 10.1)
    ]
    flagged = sweep_summary(scans)["spread_flagged"]
    assert list(flagged) == ["raidz1 fill 25%"]
    assert flagged["raidz1 fill 25%"]["max"] == 6.8


def test_cells_of_a_factor_sweep_are_told_apart_by_the_factor() -> None:
    # A width sweep at one fill: "raidz1 fill 50%" alone would lump x3, x5 and x7
    # together and flag their different times as one cell's spread (it did, measured).
    cells = [{"layout": "raidz1", "fill": 50.0, "disks": d, "ashift": 12} for d in (3, 5, 7)]
    labels = [cell_label("raidz1", 50.0, c, cells) for c in cells]
    assert labels == [
        "raidz1 fill 50% disks=3",
        "raidz1 fill 50% disks=5",
        "raidz1 fill 50% disks=7",
    ]
    assert cell_label("mirror", 25.0, cells[0], cells[:1]) == "mirror fill 25%"
    # Nor is a width sweep one line through bytes moved: each width is a line of its own,
    # and with one fill each, there is nothing to fit (it printed "5.4 MB/s - 245.76 s").
    widths = [
        {**scan("raidz1", 50, mb, secs), "line": f"raidz1 disks={d}", "cell": f"x{d}"}
        for d, mb, secs in ((3, 1311, 7.9), (5, 1333, 14.0), (7, 1382, 22.1))
        for _ in range(2)
    ]
    assert sweep_summary(widths)["fits"] == {}
    two_fills = [
        {**scan("raidz1", f, mb, 1 + mb / 100), "line": f"raidz1 disks={d}"}
        for d in (3, 5)
        for f, mb in ((25, 100), (50, 200), (75, 300))
    ]
    assert set(sweep_summary(two_fills)["fits"]) == {"raidz1 disks=3", "raidz1 disks=5"}


def test_the_harness_share_is_time_outside_the_scan_over_the_scan() -> None:
    s = scan("raidz1", 25, 100, 10.0, boot=8.0, import_=4.0, scan=10.5, collect=1.0)
    assert sweep_summary([s])["harness_per_scan_second"] == pytest.approx(1.3)


DATA = Path(__file__).parent / "data" / "zfs"


def test_eta_lines_as_zpool_prints_them() -> None:
    assert eta_seconds("\t18.3M resilvered, 12.05% done, 00:00:30 to go") == 30
    assert eta_seconds("1.2G repaired, 50% done, 1 days 02:03:04 to go") == 93784
    assert eta_seconds("\t0B repaired, 0.00% done, no estimated completion time") is None


def test_samples_become_points_from_the_first_scan_sample() -> None:
    status = (DATA / "status-resilver-raidz1.json").read_text()
    dump = (  # the final sample is listed first: points are ordered by time
        f"@@t 103.5\n@@eta\n{status}\n"
        "@@t 100.25\n@@eta\n{not json: the loop was stopped mid-write\n"
        f"@@t 101.0\n@@eta 10M resilvered, 50% done, 00:00:04 to go\n{status}\n"
    )
    pts = points(dump)
    assert [p["t"] for p in pts] == [0.0, 2.5]
    assert pts[0]["eta"] == 4 and pts[1]["eta"] is None
    assert pts[0]["state"] == "FINISHED" and pts[0]["repaired"] > 0


def test_eta_errors_compare_each_estimate_with_the_finish() -> None:
    curve = [
        {"t": 0.0, "state": "SCANNING", "eta": None},
        {"t": 1.0, "state": "SCANNING", "eta": 9},
        {"t": 5.0, "state": "SCANNING", "eta": 2},
        {"t": 8.0, "state": "FINISHED", "eta": None},
    ]
    assert eta_errors(curve) == [2.0, -1.0]
    assert eta_errors(curve[:3]) == []  # never seen finished: nothing to compare


def test_the_summary_says_how_wrong_the_eta_was() -> None:
    s = scan("raidz1", 25, 100, 8.0)
    s["progress"] = [
        {"t": 1.0, "state": "SCANNING", "eta": 9},
        {"t": 5.0, "state": "SCANNING", "eta": 2},
        {"t": 8.0, "state": "FINISHED", "eta": None},
    ]
    eta = sweep_summary([s])["eta_abs_error_seconds"]
    assert eta == {"median": 1.5, "max": 2.0, "n": 2}


def test_repetitions_of_one_cell_are_not_fitted() -> None:
    # Two repetitions of one cell differ by a few bytes: a "line" through them is noise.
    same = [scan("raidz1", 50, 100.0, 3.17), scan("raidz1", 50, 100.01, 3.15)]
    assert sweep_summary(same)["fits"] == {}
