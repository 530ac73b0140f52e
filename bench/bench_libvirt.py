"""Boot to first command: the libvirt backend against plain QEMU, same accelerator.

Each round boots one guest on each backend, alternating which goes first (so a warm page
cache or a busy neighbour does not favour one), and times ``start_guest()`` entered to
``true`` answered by the guest agent: what a caller waits for. The libvirt time includes
opening the connection and libvirtd starting QEMU; the daemon is started (and its
capability cache warmed) by one untimed boot first. Goal: libvirt <= 1.2 x QEMU.

    flock /tmp/crashlab-guest.lock .venv/bin/python bench/bench_libvirt.py [--runs 5]

``--concurrent``: instead, libvirt guests on the one cached image (each on a root overlay
of its own), one alone against two booted at once: each round times a lone boot, then
both of a pair (on 2 cores the pair shares them, so it cannot be as fast as one).
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from harness.image import build as image
from harness.vm import accel, backend
from harness.vm.backend import GuestSpec, start_guest


def boot_to_command(name: str) -> float:
    backend.select(name)
    start = time.monotonic()
    with start_guest(GuestSpec()) as guest:
        guest.run(["true"], check=True)
        return time.monotonic() - start


def concurrent(runs: int) -> None:
    boot_to_command("libvirt")  # untimed: libvirtd up, QEMU capabilities cached
    alone: list[float] = []
    pairs: list[float] = []
    with ThreadPoolExecutor(2) as pool:
        for _ in range(runs):
            alone.append(boot_to_command("libvirt"))
            pairs += pool.map(boot_to_command, ["libvirt", "libvirt"])
    print(f"libvirt, {runs} rounds: one guest alone, then two at once on one image")
    print(f"alone    median {statistics.median(alone):.2f} s  {[round(t, 2) for t in alone]}")
    print(f"two      median {statistics.median(pairs):.2f} s  {[round(t, 2) for t in pairs]}")
    print(f"ratio two / alone: {statistics.median(pairs) / statistics.median(alone):.2f} x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--concurrent", action="store_true", help="one guest vs two at once")
    args = ap.parse_args()
    if args.concurrent:
        concurrent(args.runs)
        return
    acc = accel.choose(image.require_image())
    boot_to_command("libvirt")  # untimed: libvirtd up, QEMU capabilities cached
    times: dict[str, list[float]] = {"qemu": [], "libvirt": []}
    for i in range(args.runs):
        order = ("qemu", "libvirt") if i % 2 == 0 else ("libvirt", "qemu")
        for name in order:
            times[name].append(boot_to_command(name))
    print(f"accelerator: {acc}, {args.runs} boots each, alternating order")
    for name, ts in times.items():
        print(f"{name:8s} median {statistics.median(ts):.2f} s  {[round(t, 2) for t in ts]}")
    ratio = statistics.median(times["libvirt"]) / statistics.median(times["qemu"])
    print(f"ratio libvirt / qemu: {ratio:.2f} x (goal <= 1.2)")


if __name__ == "__main__":
    main()
