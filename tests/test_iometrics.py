"""The numbers of a workload item from what a real guest reported (tests/data/workload/,
recorded by `scenario run journal-cost`; README there), the /proc/stat arithmetic on the
host's own counters, and the seed claims computed from stored rows."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from harness.experiments.workload import iometrics
from harness.experiments.workload.experiment import measured
from harness.guest import ioprobe
from harness.report.ioclaims import claims

DATA = Path(__file__).parent / "data" / "workload"
CELLS = sorted(p.name for p in DATA.iterdir() if p.is_dir())


def load(cell: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    d = DATA / cell
    facts = json.loads((d / "probe.json").read_text())
    fio = json.loads((d / "fio.json").read_text())
    trace = json.loads((d / "trace-summary.json").read_text())
    return facts, fio, trace


@pytest.mark.parametrize("cell", CELLS)
def test_fio_numbers_per_job_and_direction(cell: str) -> None:
    facts, fio, trace = load(cell)
    jobs = iometrics.fio_jobs(fio)
    assert len(jobs) == len(fio["jobs"]) == 2  # journal-cost: numjobs=2
    for j, raw in zip(jobs, fio["jobs"], strict=True):
        for d in ("read", "write"):
            assert j[d]["io_bytes"] == raw[d]["io_bytes"] > 0
            assert j[d]["clat_p50_ms"] <= j[d]["clat_p99_ms"]
        assert j["fsyncs"] == raw["sync"]["total_ios"] > 0
    m = measured(facts, fio, trace, "tcg", "k")
    d = m["derived"]
    # two jobs ran side by side: their rates add up
    written = sum(r["write"]["io_bytes"] for r in fio["jobs"])
    secs = max(r["write"]["runtime"] for r in fio["jobs"]) / 1e3
    assert d["write_mbps"] == pytest.approx(written / secs / 1e6, rel=1e-4)
    assert d["write_amplification"] == pytest.approx(trace["write_bytes"] / written, rel=1e-4)
    fsyncs = sum(r["sync"]["total_ios"] for r in fio["jobs"])
    assert d["flushes_per_fsync"] == pytest.approx(trace["flushes"] / fsyncs, rel=1e-4)
    assert m["outcome"] == "consistent" and 0 < d["cpu_busy_pct"] <= 100
    assert d["space_used_mb"] > 0


def test_space_parsers_on_real_output() -> None:
    zfs = json.loads((DATA / "zfs-space.json").read_text())
    sp = iometrics.space(zfs)
    assert sp["zpool"]["alloc"] > 0 and sp["zpool"]["dedupratio"] >= 1.0
    assert sp["zfs"]["logicalused"] > 0 and iometrics.used_bytes(sp) == sp["zpool"]["alloc"]
    btrfs = json.loads((DATA / "btrfs-space.json").read_text())
    sp = iometrics.space(btrfs)
    assert 0 < sp["btrfs"]["used"] <= sp["btrfs"]["allocated"] <= sp["btrfs"]["device_size"]
    assert iometrics.used_bytes(sp) == sp["btrfs"]["used"]


def test_cpu_delta_of_the_hosts_own_counters() -> None:
    before = ioprobe.read_cpu()
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        pass  # keep one CPU busy so user time moves
    cpu = ioprobe.cpu_delta(before, ioprobe.read_cpu())
    parts = ("user_pct", "system_pct", "iowait_pct", "idle_pct", "steal_pct")
    assert sum(cpu[p] for p in parts) == pytest.approx(100, abs=0.1)
    assert cpu["user_pct"] > 0 and cpu["ticks"] > 0


def test_claims_are_computed_from_the_rows() -> None:
    rows = []
    for cell in CELLS:
        facts, fio, trace = load(cell)
        settings = json.loads((DATA / cell / "cell.json").read_text())
        rows.append({"cell": settings, "metrics": measured(facts, fio, trace, "tcg", "k")})
    said = {c["seed"]: c["measured"] for c in claims(rows)}
    j = next(r["metrics"]["derived"] for r in rows if r["cell"]["data_mode"] == "journal")
    o = next(r["metrics"]["derived"] for r in rows if r["cell"]["data_mode"] == "ordered")
    wa = j["write_amplification"] / o["write_amplification"]
    assert f"({wa:.2f}x)" in said["000/002"]
    assert f"wrote {j['write_amplification']:.2f} device bytes per byte" in said["000/002"]
    assert "001" not in said  # no ZFS dedup cell, no snapshot: nothing said about seed 001
