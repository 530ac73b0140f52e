"""fstests' own generic/482 in a lab guest, then ``scenario check-log`` on the log it left.

    python3 bench/fstests_482.py --xfstests XFSTESTS_DIR -o DIR [--check-log-only]

1. Stages a built xfstests tree (``make`` in it first; Debian needs xfslibs-dev, uuid-dev,
   libacl1-dev, libattr1-dev, autoconf, automake, libtool) and the host's ``bc`` (the
   guest image has none and fstests' common/config requires it) onto an ext4 image made
   with ``mkfs.ext4 -d``: no host mount.
2. Boots one disposable guest (``scenario vm run``, under the guest lock) with that disk,
   TEST_DEV, SCRATCH_DEV and LOGWRITES_DEV, and runs ``./check generic/482`` unchanged
   (bench/fstests_482_guest.sh): fstests records the log and checks every FUA itself.
3. Copies fstests' results off the image with ``debugfs rdump`` (no host mount) and runs
   ``scenario check-log`` on LOGWRITES_DEV's image (host check and guest mounts, under
   the lock) from fstests' ``mkfs`` mark, into a private store under DIR.

Prints and writes ``DIR/summary.json``: generic/482's verdict and time, the log's
entries, marks and FUAs, check-log's states and verdicts, the wall times. The host kernel
never touches a replayed image: only the guest mounts, the host runs e2fsck/debugfs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import proc
from harness.fstests import check
from harness.record.logwrites import open_log

REPO = Path(__file__).resolve().parent.parent
LOCK = check.LOCK
# generic/482 makes a 200 MiB thin volume (_small_fs_size_mb 200 for ext4) and records
# that: the log's device size (check.SIZES gives SCRATCH_DEV the 280 MiB dm-thin needs).
DEVICE_SIZE = "200M"


def python() -> list[str]:
    return [sys.executable, "-m", "harness"]


def env() -> dict[str, str]:
    return {"PYTHONPATH": str(REPO)}


def run_482(fst: Path, disks: dict[str, Path], out: Path, timeout: float) -> dict[str, Any]:
    """``./check generic/482`` in one guest (harness/fstests/check.py); its output in
    DIR/guest.out."""
    c = check.run(fst, disks, ["generic/482"], fstyp="ext4", out=out, timeout=timeout)
    took = re.search(r"generic/482\s+(\d+)s", c.output)
    full = out / "fstests-results" / "generic" / "482.full"
    # generic/482's loop logs each FUA it replays to (and then fsck's) as "=== replay to N ===".
    replayed = re.findall(r"=== replay to (\d+) ===", full.read_text()) if full.exists() else []
    return {
        "verdict": c.verdict("generic/482"),
        "fsck_states": len(replayed),
        "exit_status": c.exit_status,
        "test_seconds": int(took.group(1)) if took else None,
        "wall_seconds_with_lock_wait": c.seconds,
    }


def log_facts(log: Path) -> dict[str, Any]:
    """What the log holds, as the lab's parser reads it."""
    with open_log(log) as lg:
        s = lg.stats()
        mkfs = lg.find_mark("mkfs")
        fuas = [e.index for e in lg.entries if e.is_fua and mkfs is not None and e.index > mkfs]
        return {
            "entries": s.entries,
            "flushes": s.flushes,
            "fuas": s.fuas,
            "discards": s.discards,
            "marks": {str(i): m for i, m in lg.marks.items()},
            "mkfs_entry": mkfs,
            "fuas_after_mkfs": len(fuas),
            "used_bytes": lg.used,
        }


def check_log(log: Path, out: Path) -> dict[str, Any]:
    """``scenario check-log`` from fstests' mkfs mark, into DIR/crashlab (a private store)."""
    store = out / "crashlab"
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir()
    db = store / "crashlab.db"
    argv = [
        "flock", LOCK, *python(), "check-log", log, "--fs", "ext4",
        "--device-size", DEVICE_SIZE, "--after-mark", "mkfs", "--db", db,
        # every FUA, as generic/482 checks them (check-log's default spreads 40)
        "--max-states", "100000",
    ]  # fmt: skip
    start = time.monotonic()
    r = proc.run(argv, check=False, env={**env(), "CRASHLAB_RESULTS": str(store)})
    wall = time.monotonic() - start
    (out / "check-log.out").write_text(r.stdout + "\n--- stderr ---\n" + r.stderr)
    con = sqlite3.connect(db)
    run_id, status, summary = con.execute(
        "SELECT id, status, summary FROM runs ORDER BY started_at DESC LIMIT 1"
    ).fetchone()
    con.close()
    return {
        "exit_status": r.returncode,
        "run": run_id,
        "run_status": status,
        "summary": json.loads(summary or "null"),
        "wall_seconds_with_lock_wait": round(wall, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--xfstests", type=Path, required=True, help="a built xfstests checkout")
    ap.add_argument("-o", "--out", type=Path, required=True, help="work and results directory")
    ap.add_argument("--timeout", type=float, default=5400, help="seconds generic/482 may take")
    ap.add_argument(
        "--check-log-only", action="store_true", help="keep DIR's log, run check-log again"
    )
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    summary_path = a.out / "summary.json"
    summary: dict[str, Any] = {}
    if a.check_log_only:
        summary = json.loads(summary_path.read_text())
    else:
        fst = check.stage(a.xfstests.resolve(), a.out)
        disks = check.fresh_disks(a.out)
        summary["generic/482"] = run_482(fst, disks, a.out, a.timeout)
        if summary["generic/482"]["verdict"] == "harness error":
            # No check summary: the guest or the script failed before fstests judged.
            tail = (a.out / "guest.out").read_text()[-3000:]
            print(f"generic/482 did not run to a verdict; {a.out}/guest.out ends:\n{tail}")
            return 3
    log = a.out / "logwrites.img"
    summary["log"] = log_facts(log)
    summary["check-log"] = check_log(log, a.out)
    summary_path.write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
