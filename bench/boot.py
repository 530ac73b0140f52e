"""Boot time: QEMU start -> first guest command answered, against the floor.

The floor is the same kernel with a busybox initramfs that prints one line, on the same
accelerator: no disk, no agent, nothing of ours. Goal: ours <= 1.5 x floor.

    python bench/boot.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from harness.image import build as image
from harness.vm import accel
from harness.vm.backend import GuestSpec, start_guest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    img = image.require_image()
    acc = accel.choose(img)
    floor, ours = [], []
    for _ in range(args.runs):
        t = accel.floor_boot(img.kernel, acc, timeout=120)
        if t is None:
            raise SystemExit("floor boot failed")
        floor.append(t)
        start = time.monotonic()
        with start_guest(GuestSpec()) as guest:
            guest.run(["true"], check=True)
            ours.append(time.monotonic() - start)
    f, o = statistics.median(floor), statistics.median(ours)
    print(f"accelerator: {acc}")
    print(
        "floor (kernel + busybox initramfs to first line):"
        f" median {f:.2f} s  {[round(x, 2) for x in floor]}"
    )
    print(
        "crashlab guest (QEMU start to first command answered):"
        f" median {o:.2f} s  {[round(x, 2) for x in ours]}"
    )
    print(f"ratio: {o / f:.2f} x floor (goal <= 1.5)")


if __name__ == "__main__":
    main()
