"""Which sync calls of a recorded workload returned without a cache flush, and when a
block's writes became durable: the evidence of a no-flush fsync (triage tooling).

dm-log-writes holds a completed write that carries no FLUSH/FUA until the next flush is
submitted, then logs it just before that flush. So a workload mark with no FLUSH or FUA
entry between it and the previous mark belongs to a sync call that made nothing durable
(the volatile-cache model, harness/model/oracle/), and a block's writes logged after a
mark were not durable at it, whenever they completed.

    python -m harness.report.flushgaps LOG ORACLE [--block N --block-size 1024]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.record.logwrites import SECTOR, Log, open_log


@dataclass(frozen=True)
class MarkGap:
    """One workload mark and what was logged between the previous mark and it."""

    mark: str
    entry: int
    op: dict[str, Any]
    writes: int
    flushes: int
    fuas: int

    @property
    def flushed(self) -> bool:
        return bool(self.flushes or self.fuas)


def mark_gaps(log: Log, ops: Sequence[dict[str, Any]]) -> list[MarkGap]:
    """Every mark the workload placed after a sync call (``ops``: the oracle's op log)."""
    by_mark = {op["mark"]: op for op in ops if "mark" in op}
    out: list[MarkGap] = []
    prev = -1
    for i, text in log.marks.items():
        if text in by_mark:
            seg = log.entries[prev + 1 : i]
            out.append(
                MarkGap(
                    text,
                    i,
                    by_mark[text],
                    sum(e.is_write for e in seg),
                    sum(e.is_flush for e in seg),
                    sum(e.is_fua for e in seg),
                )
            )
        prev = i
    return out


def block_writes(log: Log, block: int, block_size: int) -> list[dict[str, Any]]:
    """Each logged write covering filesystem block ``block``: its entry, flags, the last
    mark before it (the first mark it is durable at is the one after)."""
    first = block * block_size // SECTOR
    last = first + block_size // SECTOR
    out: list[dict[str, Any]] = []
    mark: str | None = None
    for e in log.entries:
        if e.is_mark:
            mark = e.mark
        elif e.is_write and e.sector < last and e.sector + e.nr_sectors > first:
            out.append({"entry": e.index, "fua": e.is_fua, "flush": e.is_flush, "after_mark": mark})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="flushgaps", description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("oracle", type=Path, help="the run's oracle.json (its op log)")
    ap.add_argument("--block", type=int, action="append", default=[])
    ap.add_argument("--block-size", type=int, default=1024)
    a = ap.parse_args(argv)
    ops = json.loads(a.oracle.read_text())["ops"]
    with open_log(a.log) as log:
        gaps = mark_gaps(log, ops)
        for g in gaps:
            op = g.op
            print(
                f"{g.mark:20} entry {g.entry:5} op {op['i']:4} {op['op']:9} "
                f"{op.get('path', ''):12} writes {g.writes:3} flush {g.flushes} "
                f"fua {g.fuas}{'' if g.flushed else '  NO FLUSH'}"
            )
        calls = [g for g in gaps if g.op["op"] != "sync"]
        dirs = [g for g in calls if g.op["op"] == "fsync_dir"]
        print(
            f"{sum(not g.flushed for g in calls)} of {len(calls)} fsync/fdatasync/dir-fsync "
            f"calls returned with no flush or FUA before their mark "
            f"({sum(not g.flushed for g in dirs)} of {len(dirs)} directory fsyncs); "
            f"syncs without: {sum(not g.flushed for g in gaps if g.op['op'] == 'sync')}"
        )
        for b in a.block:
            for w in block_writes(log, b, a.block_size):
                print(f"block {b}: {json.dumps(w)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
