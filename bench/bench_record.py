"""Record real logs for the benchmarks, and measure what recording costs the workload.

    python3 bench/bench_record.py record SCENARIO -o DIR [--set KEY=VALUE ...] [--seed N]
    python3 bench/bench_record.py overhead SCENARIO [--set ...] [--runs 3]

``record`` is ``scenario record`` that keeps the guest's final disk, ``DIR/dut.raw``, so
that replaying every entry of ``DIR/log.raw`` can be compared with it byte for byte.

``overhead`` boots one guest with a plain disk and a log disk and runs the scenario's fio
job alternately on the plain disk and on dm-log-writes over it (mkfs, mount, fio, umount
each time), ``--runs`` times each; it reports the fio job's wall time in the guest and
the ratio logged / plain. One guest for both, so both see the same (TCG) machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.config import scenario
from harness.config.crash import FsSpec
from harness.crashstate import recording
from harness.errors import HarnessError
from harness.record import recorder as record
from harness.record.logwrites import open_log
from harness.vm.backend import Disk, Guest, GuestSpec, start_guest


def load(name: str, sets: list[str]) -> scenario.Scenario:
    sc = scenario.load(name, sets)
    if not isinstance(sc, scenario.Scenario):
        raise SystemExit(f"{name}: only crash scenarios record a dm-log-writes log")
    return sc


def cmd_record(args: argparse.Namespace) -> None:
    sc = load(args.scenario, args.set)
    seed = sc.seed if args.seed is None else args.seed
    rec = record.record(
        args.output, sc.fs, recording.workload_spec(sc), seed, timeout=sc.check.timeout
    )
    (args.output / "oracle.json").write_text(json.dumps(rec.oracle))
    (args.output / "recording.json").write_text(
        json.dumps(
            {
                "scenario": sc.name,
                "set": args.set,
                "seed": seed,
                "device_size": rec.device_size,
                "seconds": rec.seconds,
                "guest_kernel": rec.guest_kernel,
                "accelerator": rec.accelerator,
            },
            indent=1,
        )
    )
    with open_log(rec.log_path) as lg:
        s = lg.stats()
        end = lg.used
        print(
            f"{rec.log_path}: {s.entries} entries, {s.flushes} FLUSH, {s.fuas} FUA, "
            f"{s.marks} marks, {s.discards} DISCARD, {s.bytes_written / 1e6:.1f} MB written; "
            f"log ends at byte {end} ({end / 1e6:.1f} MB); kernel {rec.guest_kernel}"
        )


def _fio_once(guest: Guest, fs: FsSpec, logged: bool, job: str) -> float:
    def sh(argv: list[str]) -> str:
        r = guest.run(argv)
        if not r.ok:
            raise HarnessError(f"{' '.join(argv)}: exit {r.exitcode}: {(r.err or r.out)[-500:]}")
        return r.out

    dut = sh(["readlink", "-f", guest.disk("dut")]).strip()
    dev = dut
    if logged:
        log = sh(["readlink", "-f", guest.disk("log")]).strip()
        sectors = sh(["blockdev", "--getsz", dut]).strip()
        # A fresh log each run: zero its super block so the target starts an empty log.
        sh(["dd", "if=/dev/zero", f"of={log}", "bs=4096", "count=1", "oflag=direct"])
        sh(["dmsetup", "create", "bench-lw", "--table", f"0 {sectors} log-writes {dut} {log}"])
        dev = "/dev/mapper/bench-lw"
    sh(["wipefs", "-a", "-q", dev])
    sh(fs.mkfs_argv(dev))
    sh(fs.mount_argv(dev, record.MOUNTPOINT))
    guest.write_file("/tmp/job.fio", job.encode())
    start = time.monotonic()
    sh(["fio", f"--directory={record.MOUNTPOINT}", "--output-format=terse", "/tmp/job.fio"])
    sh(["sync"])
    seconds = time.monotonic() - start
    sh(["umount", record.MOUNTPOINT])
    if logged:
        sh(["dmsetup", "remove", "bench-lw"])
    return seconds


def cmd_overhead(args: argparse.Namespace) -> None:
    sc = load(args.scenario, args.set)
    fs = sc.fs
    job = recording.workload_spec(sc).fio_job
    if not job:
        raise SystemExit(f"{sc.name} has no fio job")
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp:
        d = Path(tmp)
        dut, log = d / "dut.raw", d / "log.raw"
        for path, size in ((dut, fs.disk_size), (log, max(4 * fs.disk_size, 1 << 30))):
            with open(path, "wb") as f:
                f.truncate(size)
        spec = GuestSpec(disks=(Disk(dut, "dut"), Disk(log, "log")), command_timeout=1800)
        times: dict[bool, list[float]] = {False: [], True: []}
        with start_guest(spec) as guest:
            guest.run(["mkdir", "-p", record.MOUNTPOINT], check=True)
            for i in range(args.runs):
                for logged in (False, True) if i % 2 == 0 else (True, False):
                    t = _fio_once(guest, fs, logged, job)
                    times[logged].append(t)
                    print(f"run {i}: {'dm-log-writes' if logged else 'plain disk   '} {t:7.2f} s")
    plain, logged_ = statistics.median(times[False]), statistics.median(times[True])
    print(
        f"fio job (+ sync), median of {args.runs}: plain {plain:.2f} s, on dm-log-writes "
        f"{logged_:.2f} s; ratio {logged_ / plain:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("scenario")
    r.add_argument("-o", "--output", type=Path, required=True)
    r.add_argument("--set", action="append", default=[])
    r.add_argument("--seed", type=int)
    o = sub.add_parser("overhead")
    o.add_argument("scenario")
    o.add_argument("--set", action="append", default=[])
    o.add_argument("--runs", type=int, default=3)
    o.add_argument("--scratch", type=Path)
    args = ap.parse_args()
    {"record": cmd_record, "overhead": cmd_overhead}[args.cmd](args)


if __name__ == "__main__":
    main()
