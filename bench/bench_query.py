"""Time ``scenario results table`` over a store with many crash states.

    python3 bench/bench_query.py [--states 100000] [--runs 20] [--keep PATH]

Synthesises the store through the Store API (``record_state_result``, one transaction
per state as a real run does; ``synchronous = OFF`` only to make building it quick),
spread over runs of ext2/ext3/ext4 (three data modes)/xfs/btrfs, each state with three
recovery phases. Then times, best of five, the grouped table ``recovery --by
fs,data_mode`` and ``--by scenario,generator``. The goal is well under one second.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.outcome import Outcome
from harness.report import query
from harness.store.db import (
    CheckResult,
    CrashState,
    LogInfo,
    Phase,
    RunKind,
    RunStatus,
    Stage,
    Store,
)

CONFIGS = [
    ("ext2", None),
    ("ext3", "ordered"),
    ("ext4", "ordered"),
    ("ext4", "journal"),
    ("ext4", "writeback"),
    ("xfs", None),
    ("btrfs", None),
]
OUTCOMES = [Outcome.CONSISTENT] * 90 + [Outcome.REPAIRED] * 8 + [Outcome.DATA_LOSS] * 2


def build(path: Path, states: int, runs: int) -> None:
    rnd = random.Random(1)
    with Store.open(path) as st:
        st.execute("PRAGMA synchronous = OFF")
        per_run = states // runs
        for r in range(runs):
            fs, mode = CONFIGS[r % len(CONFIGS)]
            params = {"fs": {"type": fs, **({"data_mode": mode} if mode else {})}, "r": r}
            run_id = st.begin_run(f"{fs}-{mode or 'x'}-fsync", RunKind.CRASH, params, r, fs=fs)
            log = LogInfo(f"log{r}", "/dev/null", per_run, 0, 0, 0, 0, 0)
            st.add_log(log, run_id=run_id)
            for i in range(per_run):
                o = rnd.choice(OUTCOMES)
                st.record_state_result(
                    run_id,
                    CrashState(f"s{i:06d}", log.hash, rnd.choice(["fua", "mark"]), prefix=i),
                    [CheckResult(Stage.HOST, "fsck", o, 0.1)],
                    {
                        Phase.JOURNAL_REPLAY: rnd.expovariate(20),
                        Phase.FSCK: rnd.expovariate(5),
                        Phase.MOUNT: rnd.expovariate(50),
                    },
                    o,
                )
            st.finish_run(run_id, RunStatus.DONE)


def best_of(n: int, path: Path, by: list[str]) -> float:
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        with Store.open(path, create=False) as st:
            table = query.grouped(st, "recovery", by)
        best = min(best, time.perf_counter() - t)
    assert table.groups
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--states", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--keep", type=Path, help="build (or reuse) the store at this path")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "bench.sqlite"
        if not path.exists():
            t = time.perf_counter()
            build(path, args.states, args.runs)
            print(f"built {args.states} states in {time.perf_counter() - t:.1f} s: {path}")
        for by in (["fs", "data_mode"], ["scenario", "generator"]):
            secs = best_of(5, path, by)
            print(f"results table recovery --by {','.join(by)}: {secs * 1e3:.0f} ms (best of 5)")


if __name__ == "__main__":
    main()
