#!/usr/bin/env python3
"""What fsync reports when the disk fails writes, inside the guest (stdlib only).

The disk under test sits on dm-flakey, loaded healthy (the host gives both tables,
``faults/dm.py``). The probe makes the
filesystem, writes ``f`` (content OLD) and fsyncs it, overwrites it with NEW without
fsync, then switches the device to the faulty table (``error_writes``, ``drop_writes``,
...) by a reload -- ``dmsetup suspend --nolockfs`` so the switch itself flushes nothing -- and asks
fsync, again and again, what happened: the fstests/"fsyncgate" protocol. It then restores
the device, fsyncs once more, unmounts, mounts cleanly and reads ``f`` back.

Every syscall that may block forever (a pool suspended by failmode=wait, a filesystem
waiting for a device) runs in a forked child with a timeout: a child stuck in the kernel
is left behind and the step says ``blocked``, so the probe still prints its facts. Prints
one JSON object of raw facts (one record per step, the kernel log lines of the run); the
host judges, this script never does.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ..model import contract
from . import runner

DM = "crashlab-flakey"
MNT = "/mnt/eio"
POOL = "eiopool"
SIZE = 256 << 10
OLD, NEW = b"O", b"N"


def sh(argv: list[str], timeout: float = 120) -> contract.Command:
    """The probes' record of a command (dustprobe's too): stderr merged into stdout in
    order, its tail."""
    record: contract.Command = runner.run(argv, timeout, merge=True).record()
    return record


def in_child(fn: Callable[[], Any], timeout: float) -> contract.Call:
    """Run ``fn`` in a forked child: its JSON-able result as ``value`` and errno 0, the
    errno of an OSError it raised, or ``blocked`` when it is stuck past ``timeout``."""
    r, w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(r)
        # Let go of the agent's pipes: a child stuck in the kernel must not hold them open.
        null = os.open(os.devnull, os.O_RDWR)
        for std in (0, 1, 2):
            os.dup2(null, std)
        try:
            msg = {"errno": 0, "value": fn()}
        except OSError as e:
            msg = {"errno": e.errno or errno.EIO}
        os.write(w, json.dumps(msg).encode())
        os._exit(0)
    os.close(w)
    deadline = start + timeout
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            chunks = []
            while chunk := os.read(r, 1 << 16):
                chunks.append(chunk)
            os.close(r)
            msg = json.loads(b"".join(chunks) or b'{"errno": -1}')
            code = msg["errno"]
            return contract.Call(
                errno=code,
                value=msg.get("value"),
                error=errno.errorcode.get(code, str(code)) if code else "",
                seconds=round(time.monotonic() - start, 3),
            )
        time.sleep(0.02)
    os.close(r)  # the child stays stuck in the kernel; its result is "blocked"
    return contract.Call(errno=None, error="blocked", seconds=round(timeout, 3))


def classify(data: bytes | str) -> str:
    if isinstance(data, str):
        return data  # the read failed: its errno name
    if len(data) == 0:
        return "empty"
    if data == NEW * SIZE:
        return "new"
    if data == OLD * SIZE:
        return "old"
    if data.strip(b"\0") == b"":
        return "zeros"
    if set(data) <= {OLD[0], NEW[0], 0}:
        return "mixed"
    return "garbage"


def read_file(path: str) -> bytes | str:
    """The file's bytes, or ``missing`` / ``read-EIO`` and the like when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return "read-" + errno.errorcode.get(e.errno or 0, str(e.errno))


def mount_state(target: str) -> str:
    """``rw``, ``ro`` or ``unmounted``: the mount's flags or the superblock's, whichever
    says read-only (an aborted ext4 journal or an XFS shutdown may leave either)."""
    with open("/proc/mounts") as fh:
        opts = [p[3] for p in (line.split() for line in fh) if len(p) > 3 and p[1] == target]
    if not opts:
        return "unmounted"
    if "ro" in opts[-1].split(","):
        return "ro"
    try:
        return "ro" if os.statvfs(target).f_flag & os.ST_RDONLY else "rw"
    except OSError as e:
        return f"error:{errno.errorcode.get(e.errno or 0, e.errno)}"


class Probe:
    def __init__(self, args: argparse.Namespace):
        self.a = args
        self.steps: list[contract.ProbeStep] = []
        self.path = f"{MNT}/f" if args.fs != "zfs" else f"/{POOL}/f"
        self.mnt = MNT if args.fs != "zfs" else f"/{POOL}"
        self.stuck = False

    def step(self, name: str, **facts: Any) -> contract.ProbeStep:
        rec = contract.ProbeStep(step=name, **facts)
        self.steps.append(rec)
        return rec

    def call(self, name: str, fn: Callable[[], Any]) -> None:
        """A step that touches the filesystem, bounded; after one call blocked, the rest
        are skipped (they would block behind it) and say so."""
        if self.stuck:
            self.step(name, errno=None, error="skipped")
            return
        rec = self.step(name, **in_child(fn, self.a.timeout).to_dict())
        self.stuck = rec.error == "blocked"

    def command(self, name: str, argv: list[str], timeout: float | None = None) -> None:
        if self.stuck:
            self.step(name, rc=None, output="skipped")
            return
        rec = self.step(name, **sh(argv, timeout or self.a.timeout).to_dict())
        self.stuck = rec.rc == -1

    def make_fs(self, dm_dev: str) -> None:
        a = self.a
        if a.fs == "zfs":
            self.command(
                "mkfs", ["zpool", "create", "-f", "-o", f"failmode={a.failmode}", POOL, dm_dev], 300
            )
            return
        self.command("mkfs", [*json.loads(a.mkfs), dm_dev], 300)
        os.makedirs(MNT, exist_ok=True)
        self.command("mount", ["mount", "-t", a.fs, "-o", a.mount_opts or "defaults", dm_dev, MNT])

    def remount(self, dm_dev: str) -> None:
        a = self.a
        if a.fs == "zfs":
            self.command("export", ["zpool", "export", POOL])
            self.command("import", ["zpool", "import", "-d", "/dev/mapper", POOL])
            return
        self.command("umount", ["umount", MNT])
        self.command(
            "mount-again", ["mount", "-t", a.fs, "-o", a.mount_opts or "defaults", dm_dev, MNT]
        )

    def reload(self, name: str, table: str) -> None:
        # --nolockfs: do not freeze the filesystem, which would flush exactly what we test.
        self.command(f"{name}-suspend", ["dmsetup", "suspend", "--nolockfs", DM])
        self.command(f"{name}-load", ["dmsetup", "load", DM, "--table", table])
        self.command(f"{name}-resume", ["dmsetup", "resume", DM])

    def run(self) -> contract.EioFacts:
        a = self.a
        self.command("dm-create", ["dmsetup", "create", DM, "--table", a.healthy])
        dm_dev = f"/dev/mapper/{DM}"
        self.make_fs(dm_dev)
        if self.stuck or any(s.rc for s in self.steps):
            return contract.EioFacts(steps=self.steps, kernel_log=kernel_log())
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(fd, OLD * SIZE, 0)
        self.call("fsync-old", lambda: os.fsync(fd))
        os.pwrite(fd, NEW * SIZE, 0)  # buffered, not yet durable
        self.reload("fault-on", a.faulty)
        up, down = a.flap or (0, 0)
        t0 = time.monotonic()  # just after dm-flakey's constructor started its clock
        for n, due in ((1, up), (2, up + down)):
            # A flapping disk (up s healthy, then down s failing, from the load on):
            # fsync-1 inside the first failing window, fsync-2 once the disk is back --
            # the transient error of fsyncgate: is it reported again, or forgotten?
            time.sleep(max(0.0, t0 + due + (0.2 if due else 0) - time.monotonic()))
            self.call(f"fsync-{n}", lambda: os.fsync(fd))

        def reopen_fsync() -> None:
            fd2 = os.open(self.path, os.O_RDWR)
            try:
                os.fsync(fd2)
            finally:
                os.close(fd2)

        def new_file() -> None:
            fd3 = os.open(self.mnt + "/g", os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.write(fd3, NEW * 4096)
                os.fsync(fd3)
            finally:
                os.close(fd3)

        self.call("reopen-fsync", reopen_fsync)
        self.call("read-cached", lambda: classify(read_file(self.path)))
        self.call("new-file-fsync", new_file)
        self.call("mount-state-faulty", lambda: mount_state(self.mnt))
        self.reload("fault-off", a.healthy)
        self.call("fsync-after-restore", reopen_fsync)
        self.call("mount-state-restored", lambda: mount_state(self.mnt))
        if not self.stuck:
            os.close(fd)  # on a stuck filesystem even close may wait: leave it to exit
        self.remount(dm_dev)
        self.call("read-after-remount", lambda: classify(read_file(self.path)))
        return contract.EioFacts(steps=self.steps, kernel_log=kernel_log())


def kernel_log() -> list[str]:
    out = runner.run(["dmesg", "--notime"], 120, merge=True).stdout
    keys = ("EXT4-fs", "XFS", "BTRFS", "ZFS", "I/O error", "Buffer I/O", "read-only", "shut")
    return [line for line in out.splitlines() if any(k in line for k in keys)][-60:]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fs", required=True)
    ap.add_argument("--mkfs", default="[]", help="JSON argv of mkfs, without the device")
    ap.add_argument("--mount-opts", default="")
    ap.add_argument("--healthy", required=True, help="the dm table that never misbehaves")
    ap.add_argument("--faulty", required=True, help="the dm table of the fault")
    ap.add_argument("--failmode", default="continue")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument(
        "--flap",
        type=lambda v: tuple(int(x) for x in v.split(",")),
        default=None,
        metavar="UP,DOWN",
        help="the faulty table flaps (dm-flakey intervals): fsync-1 in a down window,"
        " fsync-2 in the next up one",
    )
    args = ap.parse_args()
    sh(["dmesg", "-C"])
    print(Probe(args).run().to_json())
    sys.stdout.flush()
    os._exit(0)  # a child may still be stuck in the kernel: do not wait for it


if __name__ == "__main__":
    raise SystemExit(main())
