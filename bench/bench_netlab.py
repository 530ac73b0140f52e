"""What a cut link costs a campaign across hosts (issue 38 item 4).

The campaign of tests/test_netlab.py (host-only check-log elements of a recorded ext4
log, 6 elements) on a scheduler and two workers, each in its own network namespace
(tests/netlab.py), ``--repeat`` times without a cut and with one worker's link cut as it
begins its first element; a fresh lab each time. Prints each campaign's wall seconds, the
medians and their difference: the cut's cost (how long the scheduler takes to drop the
worker: ``--ttl``, ``--connect``, ``--tcp``, tests/netlab.py; plus the element run
again). Root only.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_netlab.py --repeat 3        # the lab's
    PYTHONPATH=$PWD .venv/bin/python bench/bench_netlab.py --tcp 30s         # distributed's
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests")]

import netlab  # noqa: E402
import test_netlab  # noqa: E402


def once(cut: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="crashlab-netlab-") as d:
        root = Path(d)
        cache, image = test_netlab.source_cache(root)
        f = test_netlab.campaign_files(root / "campaign")
        with netlab.netlab(root / "hosts", ship_from=cache, image_hash=image) as lab:
            r, seen = test_netlab.run_campaign(
                lab, f, root / "lab.sqlite", lab.workers[0] if cut else None
            )
        if r.returncode != 1:  # the mkfs elements' findings
            raise SystemExit(f"campaign exit {r.returncode}:\n{r.stdout[-2000:]}{r.stderr}")
        print(f"  {'cut' if cut else 'no cut'}: {seen}", flush=True)
        return float(seen["wall"] or 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ttl", default=netlab.WORKER_TTL, help="the scheduler's worker TTL")
    ap.add_argument(
        "--connect", default=netlab.CONNECT_TIMEOUT, help="the scheduler's connect timeout"
    )
    ap.add_argument("--tcp", default=netlab.TCP_TIMEOUT, help="the scheduler's TCP timeout")
    args = ap.parse_args()
    if why := netlab.available():
        raise SystemExit(f"no netlab: {why}")
    netlab.WORKER_TTL, netlab.CONNECT_TIMEOUT = args.ttl, args.connect
    netlab.TCP_TIMEOUT = args.tcp
    walls = {cut: [once(cut) for _ in range(args.repeat)] for cut in (False, True)}
    a, b = statistics.median(walls[False]), statistics.median(walls[True])
    print(
        f"worker TTL {args.ttl}, connect {args.connect}, TCP {args.tcp}: no cut {a:.1f} s,"
        f" one link cut {b:.1f} s (median of {args.repeat}): the cut cost {b - a:+.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
