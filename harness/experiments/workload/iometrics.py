"""The numbers of one workload cell, from what the guest program reported: fio's JSON, the
/proc/stat delta, the blktrace summary and the space commands' output. Pure functions,
so unit tests hold them to outputs recorded from real runs (tests/data/workload/).

``derived`` is the flat row the ``io`` table and the run summary read; every value is a
number or absent (never a default that looks like a measurement).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Mapping
from typing import Any

DIRECTIONS = ("read", "write", "trim")


def fio_jobs(fio: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per job and direction: IOPS, bandwidth, bytes and completion-latency percentiles
    (ms); the job's fsync count."""
    out = []
    for job in fio.get("jobs", []):
        row: dict[str, Any] = {
            "name": job.get("jobname"),
            "error": job.get("error", 0),
            "group": job.get("groupid", 0),
        }
        for d in DIRECTIONS:
            st = job.get(d) or {}
            if not st.get("total_ios"):
                continue
            pct = (st.get("clat_ns") or {}).get("percentile") or {}
            row[d] = {
                "iops": st["iops"],
                "bw_bytes": st["bw_bytes"],
                "io_bytes": st["io_bytes"],
                "ios": st["total_ios"],
                "runtime_ms": st.get("runtime", 0),
                **{f"clat_p{q}_ms": pct[k] / 1e6 for q, k in _PCTS if k in pct},
            }
        row["fsyncs"] = int((job.get("sync") or {}).get("total_ios") or 0)
        out.append(row)
    return out


_PCTS = (("50", "50.000000"), ("99", "99.000000"), ("99.9", "99.900000"))


def _sum(jobs: list[dict[str, Any]], d: str, key: str) -> float:
    return sum(float(j[d][key]) for j in jobs if d in j)


def _rate(jobs: list[dict[str, Any]], d: str, key: str) -> float:
    """Per second over the run: jobs of one group (fio's ``stonewall`` starts a new one) run
    together and their rates add; groups run one after another, so their amounts add and
    so do their times."""
    amount = _sum(jobs, d, key)
    groups: dict[int, float] = {}
    for j in jobs:
        if d in j:
            groups[j["group"]] = max(groups.get(j["group"], 0.0), j[d]["runtime_ms"] / 1e3)
    seconds = sum(groups.values())
    return amount / seconds if seconds else 0.0


def _ios_weighted(jobs: list[dict[str, Any]], d: str, key: str) -> float | None:
    """A latency percentile over the jobs, weighted by their I/O counts (exact for one job,
    an approximation for several: percentiles do not add)."""
    rows = [(j[d]["ios"], j[d][key]) for j in jobs if d in j and key in j[d]]
    n = sum(w for w, _ in rows)
    return sum(w * v for w, v in rows) / n if n else None


def parse_df(text: str) -> dict[str, int]:
    lines = [ln.split() for ln in text.strip().splitlines()[1:]]
    if not lines or len(lines[0]) != 3:
        return {}
    size, used, avail = (int(x) for x in lines[0])
    return {"size": size, "used": used, "avail": avail}


def parse_zpool_list(text: str) -> dict[str, Any]:
    parts = text.strip().split("\t")
    if len(parts) != 5:
        return {}
    return {
        "size": int(parts[1]),
        "alloc": int(parts[2]),
        "free": int(parts[3]),
        "dedupratio": float(parts[4].rstrip("x")),
    }


def parse_zfs_get(text: str) -> dict[str, float]:
    out = {}
    for line in text.strip().splitlines():
        prop, _, value = line.partition("\t")
        try:
            out[prop] = float(value.rstrip("x"))
        except ValueError:
            continue
    return out


def parse_zfs_snapshots(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.strip().splitlines():
        p = line.split("\t")
        if len(p) == 4:
            out.append(
                {"name": p[0], "used": int(p[1]), "referenced": int(p[2]), "written": int(p[3])}
            )
    return out


def parse_btrfs_usage(text: str) -> dict[str, int]:
    """``btrfs filesystem usage -b``'s Overall block: device size, allocated, used."""
    want = {"Device size:": "device_size", "Device allocated:": "allocated", "Used:": "used"}
    out: dict[str, int] = {}
    for line in text.splitlines():
        s = line.strip()
        for label, key in want.items():
            if s.startswith(label) and key not in out:
                with contextlib.suppress(ValueError, IndexError):
                    out[key] = int(s[len(label) :].split()[0])
    return out


def space(raw: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"df": parse_df(raw.get("df", ""))}
    if "zpool_list" in raw:
        out["zpool"] = parse_zpool_list(raw["zpool_list"])
        out["zfs"] = parse_zfs_get(raw.get("zfs_get", ""))
        out["zfs_snapshots"] = parse_zfs_snapshots(raw.get("snapshots", ""))
    if "btrfs_usage" in raw:
        out["btrfs"] = parse_btrfs_usage(raw["btrfs_usage"])
    return out


def used_bytes(sp: Mapping[str, Any]) -> int | None:
    """What the filesystem holds on its device: the pool's allocation for ZFS, btrfs's
    used bytes (data + metadata copies), df's used for the others."""
    if sp.get("zpool"):
        return int(sp["zpool"]["alloc"])
    if sp.get("btrfs", {}).get("used") is not None:
        return int(sp["btrfs"]["used"])
    df = sp.get("df") or {}
    return int(df["used"]) if "used" in df else None


def derive(
    jobs: list[dict[str, Any]],
    cpu: Mapping[str, float],
    trace: Mapping[str, Any] | None,
    sp: Mapping[str, Any],
    snapshots: list[dict[str, Any]],
) -> dict[str, float]:
    """The flat row of one cell (see the module docstring)."""
    d: dict[str, float | None] = {}
    for dr in ("read", "write"):
        if any(dr in j for j in jobs):
            d[f"{dr}_iops"] = _rate(jobs, dr, "ios")
            d[f"{dr}_mbps"] = _rate(jobs, dr, "io_bytes") / 1e6
            d[f"{dr}_p50_ms"] = _ios_weighted(jobs, dr, "clat_p50_ms")
            d[f"{dr}_p99_ms"] = _ios_weighted(jobs, dr, "clat_p99_ms")
    app_written = _sum(jobs, "write", "io_bytes")
    fsyncs = sum(j["fsyncs"] for j in jobs)
    d["app_write_mb"] = app_written / 1e6
    d["cpu_busy_pct"] = cpu.get("busy_pct")
    d["cpu_user_pct"] = cpu.get("user_pct")
    d["cpu_system_pct"] = cpu.get("system_pct")
    d["cpu_iowait_pct"] = cpu.get("iowait_pct")
    if trace is not None:
        dev_written = float(trace["write_bytes"])
        d["dev_write_mb"] = dev_written / 1e6
        d["dev_read_mb"] = float(trace["read_bytes"]) / 1e6
        d["write_amplification"] = dev_written / app_written if app_written else None
        d["flushes"] = float(trace["flushes"])
        d["flushes_per_fsync"] = float(trace["flushes"]) / fsyncs if fsyncs else None
        d["q2c_p50_ms"] = (trace.get("q2c_ms") or {}).get("p50")
    used = used_bytes(sp)
    d["space_used_mb"] = None if used is None else used / 1e6
    if sp.get("zpool"):
        d["dedup_ratio"] = sp["zpool"]["dedupratio"]
        d["compress_ratio"] = (sp.get("zfs") or {}).get("compressratio")
    if snapshots:
        d["snapshots"] = float(len(snapshots))
        growth = [b["used_bytes"] - a["used_bytes"] for a, b in itertools.pairwise(snapshots)]
        if growth:
            d["space_per_snapshot_mb"] = sum(growth) / len(growth) / 1e6
    return {k: round(float(v), 6) for k, v in d.items() if v is not None}
