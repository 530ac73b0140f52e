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
from harness.record.logwrites import open_log

REPO = Path(__file__).resolve().parent.parent
LOCK = "/tmp/crashlab-guest.lock"
GUEST_SCRIPT = Path(__file__).with_name("fstests_482_guest.sh")
# generic/482 makes a 200 MiB thin volume (_small_fs_size_mb 200 for ext4) and records
# that: the log's device size. dm-thin puts 75 MiB of metadata and 5 MiB of offset before
# the data on SCRATCH_DEV (common/dmthin), so SCRATCH_DEV needs >= 280 MiB.
DEVICE_SIZE = "200M"
SIZES = {"fst": "256M", "test": "256M", "scratch": "320M", "logwrites": "1G"}
# The binaries generic/482 runs; a tree without them is not built.
# check's summary line for each verdict; none of them means the run never got that far.
VERDICTS = (
    ("Passed all 1 tests", "passed"),
    ("Failures: generic/482", "failed"),
    ("Not run: generic/482", "not run"),
)
BUILT = ("src/log-writes/replay-log", "ltp/fsstress", "ltp/fsx", "src/feature")


def python() -> list[str]:
    return [sys.executable, "-m", "harness"]


def env() -> dict[str, str]:
    return {"PYTHONPATH": str(REPO)}


def stage(xfstests: Path, out: Path) -> Path:
    """The fstests disk image: the tree, the guest script, bc with the libraries it needs."""
    missing = [b for b in BUILT if not (xfstests / b).exists()]
    if missing:
        raise SystemExit(f"{xfstests}: not built ({', '.join(missing)} missing): run make in it")
    root = out / "stage"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(
        xfstests, root / "xfstests", symlinks=True, ignore=shutil.ignore_patterns(".git")
    )
    shutil.rmtree(root / "xfstests" / "results", ignore_errors=True)
    shutil.copy(GUEST_SCRIPT, root / GUEST_SCRIPT.name)
    (root / "bin").mkdir()
    (root / "lib").mkdir()
    bc = shutil.which("bc")
    if bc is None:
        raise SystemExit("bc is not installed on the host: apt-get install bc")
    shutil.copy(bc, root / "lib" / "bc")
    # ldd's "name => path (addr)" lines: the libraries bc needs that the guest may lack.
    for m in re.finditer(r"=> (/\S+)", proc.run(["ldd", bc]).stdout):
        shutil.copy(m.group(1), root / "lib")
    wrapper = root / "bin" / "bc"
    wrapper.write_text('#!/bin/sh\nLD_LIBRARY_PATH=/fst/lib exec /fst/lib/bc "$@"\n')
    wrapper.chmod(0o755)
    img = out / "fst.img"
    img.unlink(missing_ok=True)
    proc.run(["mkfs.ext4", "-q", "-F", "-L", "fstests", "-d", root, img, SIZES["fst"]])
    return img


def fresh_disks(out: Path) -> dict[str, Path]:
    """TEST_DEV with an ext4 on it (fstests mounts it first), sparse SCRATCH and LOGWRITES."""
    disks = {name: out / f"{name}.img" for name in ("test", "scratch", "logwrites")}
    for name, path in disks.items():
        path.unlink(missing_ok=True)
        proc.run(["truncate", "-s", SIZES[name], path])
    proc.run(["mkfs.ext4", "-q", "-F", disks["test"]])
    return disks


def run_482(fst: Path, disks: dict[str, Path], out: Path, timeout: float) -> dict[str, Any]:
    """``./check generic/482`` in one guest; its output in DIR/guest.out."""
    inner = (
        "mkdir -p /fst && mount /dev/disk/by-id/virtio-disk0 /fst && "
        f"cp /fst/{GUEST_SCRIPT.name} /tmp/ && exec bash /tmp/{GUEST_SCRIPT.name}"
    )
    # --udev: fstests' _dmsetup_create waits for the device with `udevadm wait`, which
    # without udevd in the guest never returns (seen: check sat in it for minutes).
    argv = ["flock", LOCK, *python(), "vm", "run", "--udev", "--disk", fst]
    for name in ("test", "scratch", "logwrites"):
        argv += ["--disk", disks[name]]
    argv += ["--timeout", str(timeout), "--", "sh", "-c", inner]
    start = time.monotonic()
    r = proc.run(argv, check=False, env=env(), timeout=timeout + 3600)
    wall = time.monotonic() - start
    (out / "guest.out").write_text(r.stdout + "\n--- stderr ---\n" + r.stderr)
    verdict = next((v for line, v in VERDICTS if line in r.stdout), "harness error")
    took = re.search(r"generic/482\s+(\d+)s", r.stdout)
    res = out / "fstests-results"
    shutil.rmtree(res, ignore_errors=True)
    proc.run(["debugfs", "-R", f"rdump /xfstests/results {out}", fst], check=False)
    if (out / "results").exists():
        (out / "results").rename(res)
    full = res / "generic" / "482.full"
    # generic/482's loop logs each FUA it replays to (and then fsck's) as "=== replay to N ===".
    replayed = re.findall(r"=== replay to (\d+) ===", full.read_text()) if full.exists() else []
    return {
        "verdict": verdict,
        "fsck_states": len(replayed),
        "exit_status": r.returncode,
        "test_seconds": int(took.group(1)) if took else None,
        "wall_seconds_with_lock_wait": round(wall, 1),
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
        fst = stage(a.xfstests.resolve(), a.out)
        disks = fresh_disks(a.out)
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
