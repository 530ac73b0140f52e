"""A search's throughput against its floor (issue 38 item 3): workloads and distinct
states an hour of a seq-2 family (mark states), before and after the check-guest pool.

Each configuration runs the same seeded sample (``scenario run ace-seq2``, its own
store) and is read back from its store: wall seconds, workloads, states generated /
distinct / checked, and the floor -- one recording per workload plus one guest check per
distinct state, the seconds the guests themselves measured (ace.py's, checkstate.py's),
with no boot, no host round trip, no waiting. ``wall / floor`` is the lab's overhead;
below 1 when guests run side by side. Guest-heavy: one at a time on this host.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_search.py --sample 60 --fs btrfs
    PYTHONPATH=$PWD .venv/bin/python bench/bench_search.py --report A.sqlite B.sqlite
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

CONFIGS = {
    # before this session's pool: one 2-vCPU guest at a time, batches of 40
    "serial": ["check.guests=1", "check.guest_batch=40"],
    # the search scenarios' defaults now: two guests, their share of the cores each
    "pool": ["check.guests=2", "check.guest_batch=100"],
}
SIZES = {"btrfs": "128M", "xfs": "300M", "ext4": "32M"}


def run(db: Path, fs: str, sample: int, family: str, extra: list[str]) -> None:
    argv = [sys.executable, "-m", "harness", "run", "ace-seq2", "--db", str(db)]
    for s in [
        f"fs.type={fs}",
        f"fs.disk_size={SIZES[fs]}",
        f"workload.family={family}",
        f"workload.sample={sample}",
        'crash.states=[{kind="mark"}]',
        *extra,
    ]:
        argv += ["--set", s]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def read(db: Path) -> dict[str, float]:
    with sqlite3.connect(db) as c:
        rid, started, finished, summary = c.execute(
            "SELECT id, started_at, finished_at, summary FROM runs ORDER BY started_at DESC"
        ).fetchone()
        s = json.loads(summary)
        guest = c.execute(
            "SELECT coalesce(sum(seconds), 0) FROM checks WHERE run_id = ? AND stage = 'guest'"
            " AND checker = 'mount+verify'",
            (rid,),
        ).fetchone()[0]
    wall = (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()
    record = float(s["recording_seconds"].get("record", 0.0))
    return {
        "wall": wall,
        "workloads": s["workloads"],
        "generated": s["states"],
        "distinct": s["reuse"]["distinct"] if "distinct" in s.get("reuse", {}) else s["states"],
        "floor": record + guest,
    }


def show(name: str, r: dict[str, float], floor: float) -> None:
    """``floor``: the first configuration's (one guest at a time: its guests' seconds
    are not slowed by another guest beside them)."""
    per_h = 3600 / r["wall"]
    print(
        f"{name:>8}: {r['wall']:6.0f} s  {r['workloads'] * per_h:6.0f} workloads/h  "
        f"{r['distinct'] * per_h:6.0f} distinct states/h  ({r['workloads']:.0f} workloads, "
        f"{r['generated']:.0f} states, {r['distinct']:.0f} distinct)  floor {floor:.0f} s,"
        f" wall/floor {r['wall'] / floor:.2f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fs", default="btrfs", choices=sorted(SIZES))
    ap.add_argument("--sample", type=int, default=60)
    ap.add_argument("--family", default="relog")
    ap.add_argument("--report", nargs="+", type=Path, help="only read these stores")
    a = ap.parse_args()
    if a.report:
        found = [(db.stem, read(db)) for db in a.report]
        for name, r in found:
            show(name, r, found[0][1]["floor"])
        return 0
    results = {}
    with tempfile.TemporaryDirectory(prefix="crashlab-bench-search-") as d:
        for name, extra in CONFIGS.items():
            db = Path(d) / f"{name}.sqlite"
            run(db, a.fs, a.sample, a.family, extra)
            results[name] = read(db)
            show(name, results[name], results["serial"]["floor"])
    ratio = results["serial"]["wall"] / results["pool"]["wall"]
    print(f"pool vs serial: {ratio:.2f}x the workloads an hour")
    return 0


if __name__ == "__main__":
    sys.exit(main())
