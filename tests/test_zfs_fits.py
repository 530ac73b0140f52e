"""A sweep's scans together: the fit of scan time against bytes, flagged spreads, the
harness's share; and the import that names its disks."""

from __future__ import annotations

from typing import Any

import pytest

from harness.experiments.zfs.fits import MB, linear_fit, sweep_summary


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


def test_the_harness_share_is_time_outside_the_scan_over_the_scan() -> None:
    s = scan("raidz1", 25, 100, 10.0, boot=8.0, import_=4.0, scan=10.5, collect=1.0)
    assert sweep_summary([s])["harness_per_scan_second"] == pytest.approx(1.3)
