#!/usr/bin/env python3
"""One cell of a workload experiment, inside the guest: make the filesystem, lay out fio's
files, then -- with blktrace on the device and /proc/stat read before and after -- run
the fio job with JSON output, sync, and read the space the filesystem reports.

Stdlib only; the host copies it into the guest and reads back a ``contract.IoFacts``
(stdout) and the trace files (``--trace-dir``). Every step's exit status and output tail
is in ``steps`` (its stderr's tail apart, as ``stderr``); a failed setup step stops the
probe with ``failed`` naming it.

Why lay out first: fio writes a file's full size before a random-write or read job, and
those bytes are not in its ``io_bytes``; with the layout outside the traced window, the
device bytes over fio's bytes is the write amplification of the job itself.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from ..model import contract
from . import runner

MNT = "/mnt/test"
POOL = "tank"


class Failed(Exception):
    pass


class Probe:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.steps: list[dict[str, Any]] = []
        self.env = {**os.environ, "SIZE": a.size, "RUNTIME": a.runtime}

    def sh(self, name: str, argv: list[str], *, must: bool = True) -> str:
        r = runner.run(argv, env=self.env)
        # stderr apart too: a step's error is read from it (experiments/workload)
        self.step(name, r.rc, r.stdout, r.stderr, argv=argv, seconds=round(r.seconds, 3))
        if must and r.rc != 0:
            raise Failed(name)
        out: str = r.stdout
        return out

    def step(self, name: str, rc: int | None, stdout: str, stderr: str, **more: Any) -> None:
        """A step's record: its output's tail (stdout then stderr) and stderr's apart."""
        tail = contract.excerpt
        rec = {"rc": rc, "output": tail(stdout + stderr), **more}
        self.steps.append({"step": name, **rec, "stderr": tail(stderr)})

    def make_fs(self) -> None:
        a = self.a
        os.makedirs(MNT, exist_ok=True)
        if a.fs == "zfs":
            # compression off unless the cell asks: OpenZFS 2.2+ compresses (lz4) by default,
            # btrfs and ext4 do not, and fio's layout writes compress to nothing; a space or
            # write-amplification column comparing them would measure lz4, not CoW.
            given = {"compression": "off", **json.loads(a.zfs_props)}
            props = [x for k, v in given.items() for x in ("-O", f"{k}={v}")]
            self.sh(
                "zpool-create",
                [
                    "zpool",
                    "create",
                    "-f",
                    "-o",
                    "ashift=12",
                    "-O",
                    f"mountpoint={MNT}",
                    *props,
                    POOL,
                    a.dev,
                ],
            )
            return
        self.sh("mkfs", [*json.loads(a.mkfs), a.dev])
        opts = ["-o", a.mount_opts] if a.mount_opts else []
        self.sh("mount", ["mount", "-t", a.fs, *opts, a.dev, MNT])

    def sync(self, name: str) -> None:
        self.sh(name, ["sync"])
        if self.a.fs == "zfs":
            self.sh(name + "-zpool", ["zpool", "sync", POOL])

    def snapshot(self, n: int) -> dict[str, Any]:
        t = time.monotonic()
        if self.a.fs == "zfs":
            self.sh(f"snapshot-{n}", ["zfs", "snapshot", f"{POOL}@s{n}"])
            alloc = self.sh(f"alloc-{n}", ["zpool", "list", "-Hp", "-o", "alloc", POOL])
            used = int(alloc.strip() or 0)
        else:
            self.sh(
                f"snapshot-{n}", ["btrfs", "subvolume", "snapshot", "-r", MNT, f"{MNT}/.snap{n}"]
            )
            st = os.statvfs(MNT)
            used = (st.f_blocks - st.f_bfree) * st.f_frsize
        return {"n": n, "seconds": round(t - self.t0, 3), "used_bytes": used}

    def space(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["df"] = self.sh("df", ["df", "-B1", "--output=size,used,avail", MNT], must=False)
        if self.a.fs == "zfs":
            out["zpool_list"] = self.sh(
                "zpool-list",
                ["zpool", "list", "-Hp", "-o", "name,size,alloc,free,dedupratio", POOL],
            )
            out["zfs_get"] = self.sh(
                "zfs-get",
                [
                    "zfs",
                    "get",
                    "-Hp",
                    "-o",
                    "property,value",
                    "used,logicalused,compressratio,written",
                    POOL,
                ],
            )
            out["snapshots"] = self.sh(
                "zfs-list-snapshots",
                ["zfs", "list", "-Hp", "-t", "snapshot", "-o", "name,used,referenced,written"],
            )
        if self.a.fs == "btrfs":
            out["btrfs_usage"] = self.sh(
                "btrfs-usage", ["btrfs", "filesystem", "usage", "-b", MNT], must=False
            )
        return out

    def run(self) -> contract.IoFacts:
        a = self.a
        facts: dict[str, Any] = {}
        try:
            self.make_fs()
            fio = ["fio", f"--directory={MNT}", f"--randseed={a.seed}"]
            self.sh("layout", [*fio, "--create_only=1", a.job])
            self.sync("sync-layout")
            tracer = self.start_trace() if a.trace_dir else None
            snaps: list[dict[str, Any]] = []
            stop = threading.Event()
            cpu0 = read_cpu()
            self.t0 = time.monotonic()
            worker = None
            if a.snapshot_every:
                worker = threading.Thread(target=self.snapshots, args=(stop, snaps))
                worker.start()
            self.sh("fio", [*fio, "--output-format=json", f"--output={a.fio_out}", a.job])
            stop.set()
            if worker:
                worker.join()
            self.sync("sync")
            facts["seconds"] = round(time.monotonic() - self.t0, 3)
            facts["cpu"] = cpu_delta(cpu0, read_cpu())
            if tracer is not None:
                self.stop_trace(tracer)
            facts["snapshots"] = snaps
            facts["space"] = self.space()
        except Failed as e:
            return contract.IoFacts(fs=a.fs, failed=str(e), steps=self.steps, **facts)
        return contract.IoFacts(fs=a.fs, steps=self.steps, **facts)

    def snapshots(self, stop: threading.Event, out: list[dict[str, Any]]) -> None:
        n = 0
        while not stop.wait(float(self.a.snapshot_every)):
            n += 1
            try:
                out.append(self.snapshot(n))
            except Failed:
                return

    def start_trace(self) -> Any:
        if not os.path.ismount("/sys/kernel/debug"):
            self.sh("debugfs", ["mount", "-t", "debugfs", "none", "/sys/kernel/debug"])
        os.makedirs(self.a.trace_dir, exist_ok=True)
        tracer = runner.start(["blktrace", "-d", self.a.dev, "-o", "trace", "-D", self.a.trace_dir])
        # blktrace is tracing once its per-CPU relay files exist under debugfs.
        name = os.path.basename(os.path.realpath(self.a.dev))
        for _ in range(100):
            if (
                os.path.exists(f"/sys/kernel/debug/block/{name}/trace0")
                or tracer.p.poll() is not None
            ):
                break
            time.sleep(0.1)
        if tracer.p.poll() is not None:  # it ended before tracing: its output says why
            self.traced(tracer.wait(None))
            raise Failed("blktrace")
        time.sleep(0.5)
        return tracer

    def stop_trace(self, tracer: Any) -> None:
        self.traced(tracer.stop(signal.SIGINT, timeout=120))

    def traced(self, r: Any) -> None:
        """blktrace's step, as ``sh`` records one; a failed trace stops the probe."""
        self.step("blktrace", r.rc, r.stdout, r.stderr)
        if r.rc != 0:
            raise Failed("blktrace")


def read_cpu() -> list[int]:
    """The aggregate ``cpu`` line of /proc/stat: user nice system idle iowait irq softirq
    steal (USER_HZ ticks summed over the CPUs)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return [int(x) for x in fields[1:9]]


def cpu_delta(before: list[int], after: list[int]) -> dict[str, float]:
    d = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(d) or 1
    user, nice, system, idle, iowait, irq, softirq, steal = d

    def pct(n: int) -> float:
        return round(100.0 * n / total, 2)

    return {
        "user_pct": pct(user + nice),
        "system_pct": pct(system + irq + softirq),
        "iowait_pct": pct(iowait),
        "idle_pct": pct(idle),
        "steal_pct": pct(steal),
        "busy_pct": pct(user + nice + system + irq + softirq + steal),
        "ticks": total,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fs", required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--mkfs", default="[]", help="JSON argv without the device")
    ap.add_argument("--mount-opts", default="")
    ap.add_argument("--zfs-props", default="{}", help="JSON {property: value}")
    ap.add_argument("--job", required=True)
    ap.add_argument("--size", required=True)
    ap.add_argument("--runtime", required=True)
    ap.add_argument("--seed", default="1")
    ap.add_argument("--fio-out", required=True)
    ap.add_argument("--trace-dir", default="")
    ap.add_argument("--snapshot-every", type=float, default=0.0)
    a = ap.parse_args()
    sys.stdout.write(Probe(a).run().to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
