"""kill -9 a real-guest campaign at random points, resume it each time, count the damage.

    python3 bench/bench_campaign_kill.py bench/kill_campaign.toml [--kills 10] [--seed 1]
        [--after 3:45] [--budget 900] [--dir DIR]

Each round starts ``scenario campaign run CAMPAIGN --db DIR/lab.sqlite`` in its own
process group and SIGKILLs the whole group (the harness and its QEMU, as a power cut
would) after a random number of seconds drawn from ``--after LO:HI``. After the last
kill (or ``--budget`` seconds) the campaign is resumed to completion, unless it already
finished: a second run of a finished campaign is a new campaign, not a resume.

Reported (goal 0 and 0):
  lost        verdicts seen after some kill and missing later (a verdict is the row that
              says "this crash state is done")
  duplicated  more than one row per (run, state) in crash_states and verdicts, per
              (run, state, phase) in recovery_times, per (run, state, stage, checker) in
              checks; more than one run per campaign element (scenario, parameters, seed);
              more than one campaign.
Guests run one at a time; a small campaign is enough (e.g. a scenario with
``workload.ops=40`` and ``crash.max_states=6``).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from storecount import duplicates, query, unfinished, verdicts

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("campaign", type=Path)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--after", default="3:45", metavar="LO:HI", help="seconds before a kill")
    p.add_argument("--budget", type=float, default=900.0, help="stop killing after this")
    p.add_argument("--dir", type=Path, default=None, help="results dir (default: a temp dir)")
    a = p.parse_args()
    lo, hi = (float(x) for x in a.after.split(":"))
    out = a.dir or Path(tempfile.mkdtemp(prefix="crashlab-kill-"))
    out.mkdir(parents=True, exist_ok=True)
    db = out / "lab.sqlite"
    env = {**os.environ, "CRASHLAB_RESULTS": str(out)}
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "campaign",
        "run",
        str(a.campaign.resolve()),
        "--db",
        str(db),
    ]
    rnd = random.Random(a.seed)
    seen: set[tuple[Any, ...]] = set()
    lost = kills = 0
    finished = False
    t0 = time.monotonic()
    print(f"$ {' '.join(cmd)}  (CRASHLAB_RESULTS={out})", flush=True)
    while kills < a.kills and time.monotonic() - t0 < a.budget:
        before = len(verdicts(db))
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        after = rnd.uniform(lo, hi)
        try:
            proc.wait(timeout=after)
            print(f"finished before kill {kills + 1} (exit {proc.returncode})", flush=True)
            finished = True
            break
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            kills += 1
        now = verdicts(db)
        gone = seen - now
        lost += len(gone)
        seen |= now
        print(
            f"kill {kills} after {after:.1f} s: verdicts {before} -> {len(now)}, lost"
            f" {len(gone)}; unfinished runs (id, status, results): {unfinished(db)}",
            flush=True,
        )
    if not finished:
        r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        print(f"final resume: exit {r.returncode}", flush=True)
    now = verdicts(db)
    lost += len(seen - now)
    dups = duplicates(db)
    print(f"kills {kills}, lost {lost}, duplicated {sum(dups.values())} {dups}")
    print(f"verdicts {len(now)}; states without a verdict:", end=" ")
    print(
        query(
            db,
            "SELECT count(*) FROM crash_states s WHERE NOT EXISTS (SELECT 1 FROM verdicts v"
            " WHERE v.run_id = s.run_id AND v.state_id = s.id)",
        )[0][0]
    )
    print("elements (status, interruptions, failures):", end=" ")
    print(query(db, "SELECT status, interruptions, failures FROM campaign_elements"))
    print(f"wall {time.monotonic() - t0:.0f} s; store {db}")
    return 1 if lost or sum(dups.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
