"""Host checks per second on a Dask LocalCluster against ``harness/check/parallel.py``,
the same states of the same real log on the same number of workers.

    python3 bench/bench_dask.py LOG [--size 32M] [--workers 2] [--every N] [--rounds 3]

States: one after every FUA plus one every ``--every`` log entries (after the mkfs mark).
Modes, each ``--rounds`` times, alternating:

parallel
    ``parallel.host_checks(workers=N)``: N forked processes, contiguous runs.
dask
    ``distributed.host_checks`` on a LocalCluster of N single-threaded worker processes
    started once beforehand (its start-up is reported apart: a campaign pays it once).

Both must give every state the same verdict. Prints states/s per mode (median of the
rounds) and the ratio dask/parallel (goal >= 0.9).
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.check import distributed, parallel
from harness.config.settings import parse_size
from harness.record import logwrites
from harness.replay import crashstates


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path, help="a dm-log-writes log (.gz is decompressed first)")
    ap.add_argument("--size", default="32M", help="the logged device's size")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--every", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fs", default="ext4")
    a = ap.parse_args()
    size = parse_size(a.size)
    with tempfile.TemporaryDirectory(prefix="bench-dask-") as tmp:
        log = Path(tmp) / "log.raw"
        if a.log.suffix == ".gz":
            with gzip.open(a.log) as src, open(log, "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copyfile(a.log, log)
        with logwrites.open_log(log) as lg:
            specs = [{"kind": "fua"}, {"kind": "every", "n": a.every}]
            states = crashstates.generate(lg, specs)
        print(f"{len(states)} states of {a.log.name}, {a.workers} workers, {a.rounds} rounds")
        t = time.monotonic()
        with distributed.client(f"local:{a.workers}") as c:
            c.wait_for_workers(a.workers)
            print(f"LocalCluster start-up: {time.monotonic() - t:.2f} s")
            rates: dict[str, list[float]] = {"parallel": [], "dask": []}
            verdicts: dict[str, dict[str, str]] = {}
            for r in range(a.rounds):
                for mode in ("parallel", "dask"):
                    t = time.monotonic()
                    if mode == "parallel":
                        work = Path(tmp) / f"par{r}"
                        got = parallel.host_checks(log, states, a.fs, size, work, a.workers)
                    else:
                        got = distributed.host_checks(c, log, states, a.fs, size)
                    out = {s.id: str(res.outcome) for s, res in got}
                    rates[mode].append(len(out) / (time.monotonic() - t))
                    if verdicts.setdefault(mode, out) != out or len(out) != len(states):
                        raise SystemExit(f"{mode}: verdicts changed between rounds")
        if verdicts["parallel"] != verdicts["dask"]:
            raise SystemExit("the two modes disagree on a verdict")
    med = {m: statistics.median(v) for m, v in rates.items()}
    for m, v in rates.items():
        print(f"{m:9s} {med[m]:7.1f} states/s  (rounds: {', '.join(f'{x:.1f}' for x in v)})")
    print(f"dask / parallel: {med['dask'] / med['parallel']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
