"""A campaign of small real-guest elements on a local Dask cluster of 2 workers against 1
worker (and, with ``--plain``, against the campaign without Dask).

    flock /tmp/crashlab-guest.lock .venv/bin/python bench/bench_campaign_dask.py \
        [--elements 4] [--workers 2] [--plain]

The campaign: ext2-fsync with host checks only (``check.guest=false``), 20 ops, 4 files,
4 crash states, ``--elements`` seeds. Each mode runs ``scenario campaign run FILE
--dask local:N`` in a fresh store, so nothing is resumed, and must end with every element
done. Prints the wall time of each mode, the speed-up (goal >= 1.7 for 2 workers vs 1)
and each mode's median element time (what one element costs when N guests share the
host's cores).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETS = ["check.guest=false", "workload.ops=20", "workload.files=4", "crash.max_states=4"]


def campaign(d: Path, elements: int) -> Path:
    f = d / "bench-dask.toml"
    quoted = ", ".join(f'"{s}"' for s in SETS)
    f.write_text(
        f'description = "bench_campaign_dask.py"\n\n[[run]]\nscenario = "ext2-fsync"\n'
        f"set = [{quoted}]\nrepetitions = {elements}\n"
    )
    return f


def run(f: Path, db: Path, dask: str | None) -> tuple[float, list[float]]:
    """Wall seconds of the whole campaign and each element's seconds."""
    argv = [str(Path(sys.executable).parent / "scenario"), "campaign", "run", str(f)]
    argv += ["--db", str(db), *(["--dask", dask] if dask else [])]
    t = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - t
    if r.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)}: exit {r.returncode}\n{r.stdout[-3000:]}{r.stderr}")
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT status, seconds FROM campaign_elements").fetchall()
    if any(status != "done" for status, _ in rows):
        raise SystemExit(f"{dask or 'plain'}: not every element is done: {rows}")
    return wall, [float(s) for _, s in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--plain", action="store_true", help="also run it without Dask")
    a = ap.parse_args()
    modes = [f"local:{a.workers}", "local:1", *([None] if a.plain else [])]
    wall: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-campaign-dask-") as tmp:
        f = campaign(Path(tmp), a.elements)
        print(f"{a.elements} elements: ext2-fsync --set {' '.join(SETS)}")
        for mode in modes:
            name = mode or "plain"
            seconds, per = run(f, Path(tmp) / f"{name.replace(':', '-')}.sqlite", mode)
            wall[name] = seconds
            print(
                f"{name:9s} {seconds:7.1f} s wall  (element median {statistics.median(per):.1f} s,"
                f" sum {sum(per):.1f} s)",
                flush=True,
            )
    ratio = wall["local:1"] / wall[f"local:{a.workers}"]
    print(f"speed-up {a.workers} workers vs 1: {ratio:.2f}x")
    if a.plain:
        overhead = wall["local:1"] / wall["plain"]
        print(f"local:1 / plain (Dask's overhead on one worker): {overhead:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
