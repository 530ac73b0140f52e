"""Where a workload stands in a budgeted family's seeded order (issue 46, the census's
nights): ``acespace.ordered`` (the family's members by dynamic programming, sorted by the
permutation's inverse) against its floor-free peer, walking ``acespace.shuffled`` over the
index space until the family is exhausted. Both give the same list (asserted); the
ratio is what the census command saves per family.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_ace_order.py --mode ordered
    PYTHONPATH=$PWD .venv/bin/python bench/bench_ace_order.py --mode walked
    farm-bench -n 3 -- .venv/bin/python bench/bench_ace_order.py --mode ordered \\
        --vs '.venv/bin/python bench/bench_ace_order.py --mode walked'

Defaults: new-dir-name, ace-n seq-3 (58,578 of 49,365,048 indices), seed 1: the nightly's
budgeted btrfs run. ``--check`` computes both and compares them.
"""

from __future__ import annotations

import argparse
import sys
import time

from harness.model import acespace


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--mode", choices=("ordered", "walked"), default="ordered")
    p.add_argument("--seq", type=int, default=3)
    p.add_argument("--grammar", default="ace-n")
    p.add_argument("--family", default="new-dir-name")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--check", action="store_true", help="compute both, compare, time each")
    a = p.parse_args()
    modes = ("ordered", "walked") if a.check else (a.mode,)
    got = {}
    for mode in modes:
        t = time.monotonic()
        if mode == "ordered":
            got[mode] = acespace.ordered(a.seq, a.seed, a.grammar, a.family)
        else:
            got[mode] = list(acespace.shuffled(a.seq, a.seed, a.grammar, a.family))
        print(f"{mode}: {len(got[mode]):,} workloads in {time.monotonic() - t:.1f} s")
    if a.check and got["ordered"] != got["walked"]:
        print("ORDERS DIFFER", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
