"""What the replayer's content identity costs: a walk over crash states with and without
``Replayer(identity=True)`` (reading ``rp.identity`` at every state), and the ratio.

    python3 bench/bench_identity.py [LOG --size BYTES] [--repeat 5] [--block 4096 512]
        [--check]

Without LOG, the recorded ext4 fixture (tests/data/logs/ext4-ops-small). The states are
the fua + mark, torn and reorder generators' (every state, seed 0), as in
tests/test_identity.py. ``--block`` times the identity at other block sizes (the
replayer's unit is ``IDENTITY_BLOCK``). ``--check`` adds the host check (e2fsck journal
replay + ``-fn``) to each state, the walk a host-only run does: the overhead that matters.
Best of ``--repeat`` runs each, alternating, on a warm page cache.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.check import host as check
from harness.record.logwrites import Log, open_log
from harness.replay import replayer as replay
from harness.replay.crashstates import CrashState, generate

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "logs"
SPECS: dict[str, list[dict[str, Any]]] = {
    "fua+mark": [{"kind": "fua"}, {"kind": "mark"}],
    "torn": [{"kind": "torn", "max_states": 1000}],
    "reorder": [{"kind": "reorder", "max_states": 1000}],
}


def walk(
    log: Log, states: list[CrashState], size: int, d: Path, block: int | None, host: bool
) -> tuple[float, int]:
    """Seconds for one walk; distinct identities seen (0 without identity)."""
    img = d / "work.img"
    img.unlink(missing_ok=True)
    seen: set[str] = set()
    if block is not None:
        replay.IDENTITY_BLOCK = block  # Identity's default unit, read when one is made
    t = time.perf_counter()
    with replay.Replayer(log, img, size, identity=block is not None) as rp:
        for _ in rp.walk(states):
            if block is not None:
                seen.add(rp.identity)
            if host:
                check.host_check("ext4", rp.image, d / "scratch")
    return time.perf_counter() - t, len(seen)


def best(repeat: int, runs: dict[str, Callable[[], tuple[float, int]]]) -> dict[str, float]:
    """Best time of each, the runs alternating so a noisy neighbour hits them alike."""
    out = {k: float("inf") for k in runs}
    for _ in range(repeat):
        for k, f in runs.items():
            out[k] = min(out[k], f()[0])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", nargs="?", type=Path)
    ap.add_argument("--size", type=int, help="device size, bytes (else recording.json)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--block", type=int, nargs="+", default=[replay.IDENTITY_BLOCK])
    ap.add_argument("--check", action="store_true", help="host-check every state too")
    ap.add_argument("--only", choices=sorted(SPECS), nargs="+", default=list(SPECS))
    a = ap.parse_args()
    default_block = replay.IDENTITY_BLOCK
    with tempfile.TemporaryDirectory(prefix="bench-identity-") as tmp:
        d = Path(tmp)
        if a.log is None:
            a.log = d / "log.raw"
            with gzip.open(FIXTURE / "ext4-ops-small.log.gz") as src, a.log.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            a.size = json.loads((FIXTURE / "ext4-ops-small.json").read_text())["device_size"]
        size = a.size or json.loads((a.log.parent / "recording.json").read_text())["device_size"]
        print(f"log {a.log} ({a.log.stat().st_size:,} bytes), device {size:,} bytes")
        print(
            f"{'states':<10} {'n':>5} {'distinct':>8} {'plain ms':>9} "
            + " ".join(f"{f'id/{b} ms':>11} {'ratio':>6}" for b in a.block)
        )
        with open_log(a.log) as log:
            for name in a.only:
                states = generate(log, SPECS[name])
                runs: dict[str, Callable[[], tuple[float, int]]] = {
                    str(b): functools.partial(walk, log, states, size, d, b, a.check)
                    for b in (None, *a.block)
                }
                distinct = walk(log, states, size, d, a.block[0], False)[1]
                t = best(a.repeat, runs)
                cols = " ".join(
                    f"{t[str(b)] * 1e3:11.1f} {t[str(b)] / t['None']:6.3f}" for b in a.block
                )
                print(f"{name:<10} {len(states):5d} {distinct:8d} {t['None'] * 1e3:9.1f} {cols}")
    replay.IDENTITY_BLOCK = default_block
    return 0


if __name__ == "__main__":
    sys.exit(main())
