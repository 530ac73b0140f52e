"""Disk hotplug against the boot it saves, on both backends, same accelerator.

A ZFS sweep plugs each repetition's disks into one kept guest instead of booting a guest
per repetition (``harness.experiments.zfs.kept``). This times, per backend, boot to first
command, and ``attach_disk`` / ``detach_disk`` of a sparse 1 GiB raw disk and of a qcow2
overlay on it (what a repetition plugs) with the guest's udev running, as in the sweep;
then the ratio of plugging N disks in and out to one boot.

    flock /tmp/crashlab-guest.lock .venv/bin/python bench/bench_hotplug.py [--rounds 5] [--disks 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from harness import proc
from harness.image import build as image
from harness.vm import accel, backend
from harness.vm.backend import Disk, GuestSpec, start_guest


def measure(name: str, rounds: int, tmp: Path) -> dict[str, list[float]]:
    backend.select(name)
    raw = tmp / "plug.raw"
    with open(raw, "wb") as f:
        f.truncate(1 << 30)
    overlay = tmp / "plug.qcow2"
    proc.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", raw, overlay])
    times: dict[str, list[float]] = {}

    def lap(key: str, t: float) -> float:
        now = time.monotonic()
        times.setdefault(key, []).append(now - t)
        return now

    for _ in range(rounds):
        t = time.monotonic()
        with start_guest(GuestSpec(udev=True, hotplug_ports=1)) as g:
            g.run(["true"], check=True)
            t = lap("boot", t)
            for disk in (Disk(raw, "bench"), Disk(overlay, "bench", format="qcow2")):
                g.attach_disk(disk)
                t = lap(f"attach {disk.format}", t)
                g.detach_disk(disk.serial)
                t = lap(f"detach {disk.format}", t)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--disks", type=int, default=5, help="disks a repetition plugs")
    ap.add_argument("--backends", default="qemu,libvirt")
    args = ap.parse_args()
    acc = accel.choose(image.require_image())
    print(f"accelerator: {acc}, {args.rounds} rounds per backend")
    with tempfile.TemporaryDirectory(prefix="crashlab-bench-") as tmp:
        for name in args.backends.split(","):
            times = measure(name, args.rounds, Path(tmp))
            med = {k: statistics.median(v) for k, v in times.items()}
            for key, ts in times.items():
                print(f"{name:8s} {key:14s} median {med[key]:.3f} s  {[round(x, 3) for x in ts]}")
            plug = args.disks * (med["attach qcow2"] + med["detach qcow2"])
            print(
                f"{name:8s} {args.disks} overlays in and out: {plug:.2f} s = "
                f"{plug / med['boot']:.2f} x one boot ({med['boot']:.2f} s)"
            )


if __name__ == "__main__":
    main()
