#!/usr/bin/env python3
"""The guest's side of a recovery-time cell (stdlib only; copied in by the host).

``populate``: mkfs, mount, a seeded tree of small files and directories and a fill by
fallocate (never writing gigabytes under TCG), sync; prints what the filesystem reports
(inodes and blocks used) and leaves it mounted.
``churn``: starts a metadata-heavy loop (create, write, rename, unlink, mkdir, utime on
the population, an fsync every N operations) detached from the agent, and returns; the
host kills the guest while it runs.
``stop``: SIGKILL the churn and wait for it to be gone (the dm-log-writes recording
unmounts its filesystem after the mark).
``replay``: in a fresh guest, mount the crash image (the kernel's own journal/log
replay, timed), count what is there, umount (timed).
Each prints its message of raw facts (``contract``: Populated, Churning, Stopped,
Replayed); the host judges.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

from ..model import contract, kernlog
from . import runner


def run(argv: list[str], timeout: float) -> contract.Command:
    """A command's record (``output``: its tail)."""
    record: contract.Command = runner.run(argv, timeout).record()
    return record


def usage(mnt: str) -> contract.Usage:
    """What the filesystem says it holds (btrfs reports no inode counts: 0)."""
    st = os.statvfs(mnt)
    files = dirs = 0
    for _, ds, fs in os.walk(mnt):
        dirs += len(ds)
        files += len(fs)
    return contract.Usage(
        files=files,
        dirs=dirs,
        inodes_used=st.f_files - st.f_ffree,
        inodes_total=st.f_files,
        blocks_used=st.f_blocks - st.f_bfree,
        block_size=st.f_frsize,
    )


def populate(a: argparse.Namespace) -> contract.Populated:
    mk = run([*json.loads(a.mkfs), a.dev], a.timeout)
    if mk.rc != 0:
        return contract.Populated(mkfs=mk)
    os.makedirs(a.mnt, exist_ok=True)
    opts = ["-o", a.mount_opts] if a.mount_opts else []
    m = run(["mount", "-t", a.fs, *opts, a.dev, a.mnt], a.timeout)
    if m.rc != 0:
        return contract.Populated(mkfs=mk, mount=m)
    rng = random.Random(a.seed)
    start = time.monotonic()
    top = max(1, int(a.dirs**0.5))
    dirs = [os.path.join(a.mnt, "pop", f"t{i % top:03d}", f"d{i:05d}") for i in range(a.dirs)]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    for i in range(a.files):
        size = rng.randint(1, a.file_size)
        with open(os.path.join(dirs[i % len(dirs)], f"f{i:07d}"), "wb") as f:
            f.write(rng.randbytes(min(size, 64)) * (size // 64 + 1))
            f.truncate(size)
    fill = int(a.fill / 100 * a.size)
    chunk = 1 << 30
    n = 0
    failed = None
    while fill > 0:
        part = min(chunk, fill)
        r = run(
            ["fallocate", "-l", str(part), os.path.join(a.mnt, "pop", f"fill{n:04d}")], a.timeout
        )
        if r.rc != 0:
            failed = r
            break
        fill -= part
        n += 1
    os.sync()
    return contract.Populated(
        mkfs=mk, mount=m, fallocate=failed, populate_seconds=time.monotonic() - start,
        usage=usage(a.mnt),
    )  # fmt: skip


def churn_loop(mnt: str, every: int, seed: int) -> None:
    rng = random.Random(seed)
    work = os.path.join(mnt, "churn")
    os.makedirs(work, exist_ok=True)
    pop = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(mnt, "pop")) for f in fs]
    dfd = os.open(work, os.O_RDONLY)
    i = 0
    while True:
        path = os.path.join(work, f"c{i:08d}")
        with open(path, "wb") as f:
            f.write(rng.randbytes(rng.randint(1, 4096)))
            if i % every == 0:
                f.flush()
                os.fsync(f.fileno())
                os.fsync(dfd)
        if i >= 64:
            old = os.path.join(work, f"c{i - 64:08d}")
            if i % 3:
                os.unlink(old)
            else:
                os.rename(old, os.path.join(work, f"r{i:08d}"))
        if i % 10 == 0:
            os.mkdir(os.path.join(work, f"d{i:08d}"))
        if i % 10 == 5 and i > 20:
            os.rmdir(os.path.join(work, f"d{i - 25:08d}"))
        if pop:
            os.utime(rng.choice(pop))
        i += 1


def churn(a: argparse.Namespace) -> contract.Churning:
    """Fork the loop into its own session with no pipe to the agent, so the agent's
    guest-exec returns while it runs (qemu-ga waits for the output pipes to close)."""
    pid = os.fork()
    if pid:
        return contract.Churning(pid=pid)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    try:
        churn_loop(a.mnt, a.fsync_every, a.seed)
    finally:
        os._exit(0)


def stop(a: argparse.Namespace) -> contract.Stopped:
    """SIGKILL the churn and wait until it is gone, so its filesystem can be unmounted
    (a process in the middle of an fsync dies only when the fsync returns)."""
    start = time.monotonic()
    try:
        os.kill(a.pid, 9)
    except ProcessLookupError:
        return contract.Stopped(stopped=True, was_running=False, seconds=0.0)
    while time.monotonic() - start < a.timeout:
        try:
            os.kill(a.pid, 0)
        except ProcessLookupError:
            return contract.Stopped(
                stopped=True, was_running=True, seconds=time.monotonic() - start
            )
        time.sleep(0.05)
    return contract.Stopped(
        stopped=False, was_running=True, seconds=time.monotonic() - start, stuck=stuck(a.pid)
    )


def stuck(pid: int) -> str:
    """A task that outlived SIGKILL is blocked in the kernel: every blocked task the
    kernel lists on sysrq w, then the churn's own wait channel and stack."""
    parts = []
    for name in ("wchan", "stack"):
        try:
            with open(f"/proc/{pid}/{name}") as f:
                parts.append(f"{name}: {f.read().strip()}")
        except OSError as e:
            parts.append(f"{name}: {e}")
    try:
        with open("/proc/sysrq-trigger", "w") as f:
            f.write("w")
    except OSError as e:
        parts.append(f"sysrq w: {e}")
    k = runner.run(["dmesg"], 60).stdout
    blocked = k[k.rfind("sysrq: Show Blocked State") :] if "Show Blocked" in k else ""
    # the churn's own stack last: the excerpt keeps the tail
    return contract.excerpt("\n".join([blocked, *parts]))


def replay(a: argparse.Namespace) -> contract.Replayed:
    os.makedirs(a.mnt, exist_ok=True)
    opts = ["-o", a.mount_opts] if a.mount_opts else []
    # its recovery may be its fsck's log replay, then the mount
    replayed = runner.before_mount(a.fs, a.dev, a.timeout)
    m = run(["mount", "-t", a.fs, *opts, a.dev, a.mnt], a.timeout)
    found = usage(a.mnt) if m.rc == 0 else None
    umount = run(["umount", a.mnt], a.timeout) if m.rc == 0 else None
    k = runner.run(["dmesg"], 60).stdout.splitlines()  # whole: its lines are picked below
    # this device's lines only: one guest may mount several crash images in turn
    name = os.path.basename(a.dev)
    return contract.Replayed(
        mount=m,
        before_mount=replayed,
        usage=found,
        umount=umount,
        disk_errors=[ln for ln in kernlog.disk_errors(k) if name in ln],
        kernel_log=[ln for ln in k if name in ln and any(w in ln for w in ("EXT", "XFS", "BTRFS"))][
            -20:
        ],
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("action", choices=("populate", "churn", "stop", "replay"))
    ap.add_argument("--dev", default="")
    ap.add_argument("--fs", default="")
    ap.add_argument("--mkfs", default="[]", help="mkfs argv as JSON, without the device")
    ap.add_argument("--mount-opts", default="")
    ap.add_argument("--mnt", default="/mnt/recovery")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--files", type=int, default=0)
    ap.add_argument("--dirs", type=int, default=1)
    ap.add_argument("--file-size", type=int, default=4096)
    ap.add_argument("--fill", type=float, default=0.0)
    ap.add_argument("--size", type=int, default=0, help="the device's size in bytes")
    ap.add_argument("--fsync-every", type=int, default=25)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--pid", type=int, default=0, help="stop: the churn's pid")
    a = ap.parse_args()
    if a.dev:
        a.dev = os.path.realpath(a.dev)
    actions = {"populate": populate, "churn": churn, "stop": stop, "replay": replay}
    facts: contract.Message = actions[a.action](a)
    sys.stdout.write(facts.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
