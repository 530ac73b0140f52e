"""What a workload run measured about each seed's claim, computed from its stored rows.

Seeds 000-002 claim things about journaling, copy-on-write and dedup (issue 12). For every
claim whose cells are in the run, this says in one sentence what *this* run measured --
ratios between cells of the same run (same guest, same host), never a verdict and never
a number that was not computed from the rows. A claim whose cells are missing is left out.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Row = Mapping[str, Any]  # an observation: item, cell, metrics, outcome
Cells = dict[str, dict[str, float]]  # cell name -> metric -> mean over repetitions


def by_cell(rows: Sequence[Row]) -> tuple[Cells, dict[str, Mapping[str, Any]]]:
    """Mean of each derived metric per cell, and each cell's settings."""
    values: dict[str, dict[str, list[float]]] = {}
    settings: dict[str, Mapping[str, Any]] = {}
    for r in rows:
        name = r["cell"]["name"]
        settings[name] = r["cell"]
        for k, v in r["metrics"].get("derived", {}).items():
            values.setdefault(name, {}).setdefault(k, []).append(float(v))
    return {n: {k: statistics.fmean(v) for k, v in m.items()} for n, m in values.items()}, settings


def _find(
    settings: Mapping[str, Mapping[str, Any]], pred: Callable[[Mapping[str, Any]], bool]
) -> str | None:
    return next((n for n, c in settings.items() if pred(c)), None)


def _ext(mode: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda c: c["type"] in ("ext4", "ext3") and c.get("data_mode") == mode


def _throughput(m: Mapping[str, float]) -> float:
    return m.get("read_mbps", 0.0) + m.get("write_mbps", 0.0)


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


Settings = dict[str, Mapping[str, Any]]  # cell name -> its settings
Claim = dict[str, str]


def _say(seed: str, claim: str, measured: str) -> Claim:
    return {"seed": seed, "claim": claim, "measured": measured}


def claims(rows: Sequence[Row]) -> list[Claim]:
    cells, settings = by_cell(rows)
    journal = _find(settings, _ext("journal"))
    # data=ordered of the same filesystem as the data=journal cell (ext4 before ext3)
    ordered = journal and _find(
        settings, lambda c: _ext("ordered")(c) and c["type"] == settings[journal]["type"]
    )
    zfs = _find(
        settings,
        lambda c: c["type"] == "zfs" and c.get("properties", {}).get("dedup", "off") == "off",
    )
    return [
        *_journaling(cells, settings),
        *_journal_twice(cells, journal, ordered),
        *_cow_latency(cells, zfs, ordered),
        *_dedup(cells, settings, zfs),
        *_snapshots(cells),
    ]


def _journaling(cells: Cells, settings: Settings) -> list[Claim]:
    ext2 = _find(settings, lambda c: c["type"] == "ext2")
    journaled = [n for n, c in settings.items() if c["type"] in ("ext3", "ext4")]
    if not (ext2 and journaled):
        return []
    parts = []
    for n in journaled:
        rel = _throughput(cells[n]) / _throughput(cells[ext2]) if _throughput(cells[ext2]) else None
        cpu = cells[n].get("cpu_busy_pct")
        parts.append(
            f"{n}: {'-' if rel is None else f'{rel:.2f}x'} ext2's throughput"
            + ("" if rel is None else f" (cost {100 * (1 - rel):.0f} %)")
            + (
                f", CPU busy {cpu:.0f} % vs {cells[ext2].get('cpu_busy_pct', 0):.0f} %"
                if cpu is not None
                else ""
            )
        )
    return [_say("002", "journaling costs at least 30 % throughput and CPU", "; ".join(parts))]


def _journal_twice(cells: Cells, journal: str | None, ordered: str | None) -> list[Claim]:
    if not (journal and ordered):
        return []
    j, o = cells[journal], cells[ordered]
    wa_j, wa_o = j.get("write_amplification"), o.get("write_amplification")
    return [
        _say(
            "000/002",
            "data=journal writes data twice (to the journal, then in place)",
            f"{journal} wrote {_num(wa_j)} device bytes per byte fio wrote, {ordered} "
            f"{_num(wa_o)} ({_ratio(wa_j, wa_o)}); total device bytes "
            f"{_ratio(j.get('dev_write_mb'), o.get('dev_write_mb'))}, throughput "
            f"{_ratio(_throughput(j), _throughput(o))}",
        )
    ]


def _cow_latency(cells: Cells, zfs: str | None, ordered: str | None) -> list[Claim]:
    if not (zfs and ordered):
        return []
    z, o = cells[zfs], cells[ordered]

    def spread(m: Mapping[str, float]) -> str:
        return _ratio(m.get("write_p99_ms"), m.get("write_p50_ms"))

    return [
        _say(
            "000",
            "ZFS copy-on-write makes write latency vary more than ext4 journaling",
            f"write clat p99/p50: {zfs} {spread(z)}, {ordered} {spread(o)}; write amplification "
            f"{z.get('write_amplification', 0):.2f} vs {o.get('write_amplification', 0):.2f}",
        )
    ]


def _dedup(cells: Cells, settings: Settings, zfs: str | None) -> list[Claim]:
    dedup = _find(settings, lambda c: c.get("properties", {}).get("dedup", "off") not in ("off",))
    if not dedup:
        return []
    d = cells[dedup]
    out = [
        _say(
            "001",
            "dedupratio=2 data gives zpool DEDUP 1.99x",
            f"{dedup}: zpool dedupratio {d.get('dedup_ratio', 0):.2f}x",
        )
    ]
    btrfs = _find(settings, lambda c: c["type"] == "btrfs")
    others = [n for n in (zfs, btrfs) if n]
    if btrfs:
        out.append(
            _say(
                "001",
                "btrfs allocates far more space than ZFS with dedup",
                f"{btrfs} used {_ratio(cells[btrfs].get('space_used_mb'), d.get('space_used_mb'))}"
                f" the space of {dedup}",
            )
        )
    if others:
        out.append(
            _say(
                "001",
                "dedup costs CPU (18 % vs 12 % for btrfs)",
                f"CPU busy {dedup} {d.get('cpu_busy_pct', 0):.0f} %, "
                + ", ".join(f"{n} {cells[n].get('cpu_busy_pct', 0):.0f} %" for n in others),
            )
        )
    return out


def _snapshots(cells: Cells) -> list[Claim]:
    snaps = [n for n in cells if "space_per_snapshot_mb" in cells[n]]
    if not snaps:
        return []
    measured = "; ".join(
        f"{n}: {cells[n]['snapshots']:.0f} snapshots, "
        f"{cells[n]['space_per_snapshot_mb']:.1f} MB of space per snapshot"
        for n in snaps
    )
    return [_say("001", "CoW snapshots cost only the changed blocks", measured)]
