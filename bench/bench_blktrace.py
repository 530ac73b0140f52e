"""What blktrace costs the workload it traces: the same fio job, with and without blktrace,
in one guest.

    python3 bench/bench_blktrace.py SCENARIO [--cell N] [--set KEY=VALUE ...] [--runs 3]

Boots one guest with one disk and runs ``harness/guest/ioprobe.py`` (mkfs, layout, fio,
sync -- exactly what a workload item does) on cell N of the workload scenario,
alternately with and without ``--trace-dir`` (the order flips every run, so drift in a
shared host does not favour one side), ``--runs`` times each. It reports fio's throughput
(read + write MB/s) per run and the ratio of the medians, untraced / traced: 1.0 is
free, 1.1 is a 10 % slowdown (the issue's goal is <= 1.1x).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.config import scenario
from harness.experiments.workload import iometrics
from harness.experiments.workload.settings import IoCell, WorkloadScenario
from harness.record import recorder as record
from harness.vm.backend import Disk, Guest, GuestSpec, start_guest


def once(g: Guest, sc: WorkloadScenario, cell: IoCell, dev: str, traced: bool) -> float:
    g.run(["sh", "-c", "umount /mnt/test; zpool destroy tank; rm -rf /tmp/crashlab/trace"])
    args = [
        "--fs", cell.type, "--dev", dev, "--mkfs", json.dumps(cell.mkfs_argv()),
        "--mount-opts", ",".join(cell.mount_opts()),
        "--zfs-props", json.dumps(cell.properties), "--job", f"{record.GUEST_DIR}/job.fio",
        "--size", str(sc.fio.size), "--runtime", str(sc.fio.runtime),
        "--fio-out", f"{record.GUEST_DIR}/fio.json",
        *(["--trace-dir", f"{record.GUEST_DIR}/trace"] if traced else []),
    ]  # fmt: skip
    r = g.run(["python3", f"{record.GUEST_DIR}/ioprobe.py", *args], timeout=sc.timeout)
    facts = json.loads(r.out)
    if "failed" in facts:
        raise SystemExit(f"ioprobe failed at {facts['failed']}: {facts['steps'][-1]}")
    text = g.read_file(f"{record.GUEST_DIR}/fio.json").decode()
    jobs = iometrics.fio_jobs(json.loads(text[text.find("{") :]))
    d = iometrics.derive(jobs, facts["cpu"], None, {}, [])
    return d.get("read_mbps", 0.0) + d.get("write_mbps", 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--cell", type=int, default=0, help="index into the scenario's cells")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    sc = scenario.load(a.scenario, a.set)
    if not isinstance(sc, WorkloadScenario):
        raise SystemExit(f"{a.scenario}: not a workload scenario")
    cell = sc.cells[a.cell]
    mbps: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        disk = Path(tmp) / "dut.raw"
        with open(disk, "wb") as f:
            f.truncate(sc.disk_size)
        spec = GuestSpec(
            disks=(Disk(disk, "dut"),), udev=cell.type == "zfs", command_timeout=sc.timeout
        )
        with start_guest(spec) as g:
            if cell.type == "zfs":
                g.run(["modprobe", "zfs"], check=True, timeout=300)
            record.install_scripts(g)
            g.write_file(f"{record.GUEST_DIR}/job.fio", sc.fio.job.encode())
            dev = g.run(["readlink", "-f", g.disk("dut")], check=True).out.strip()
            print(f"{sc.name}, cell {cell.name()}, {g.accelerator}")
            for i in range(a.runs):
                for traced in (False, True) if i % 2 == 0 else (True, False):
                    v = once(g, sc, cell, dev, traced)
                    mbps[traced].append(v)
                    print(f"run {i}: {'blktrace' if traced else 'untraced'} {v:8.3f} MB/s")
    plain, traced_ = statistics.median(mbps[False]), statistics.median(mbps[True])
    print(
        f"fio MB/s, median of {a.runs}: untraced {plain:.3f}, traced {traced_:.3f}; "
        f"slowdown untraced/traced {plain / traced_:.3f}x"
    )


if __name__ == "__main__":
    main()
