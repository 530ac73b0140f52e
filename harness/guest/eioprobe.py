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
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

ENV = {**os.environ, "DM_DISABLE_UDEV": "1"}
DM = "crashlab-flakey"
MNT = "/mnt/eio"
POOL = "eiopool"
SIZE = 256 << 10
OLD, NEW = b"O", b"N"


def sh(argv: list[str], timeout: float = 120, keep: int = 800) -> dict[str, Any]:
    start = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, env=ENV, check=False)
        rc, out = p.returncode, (p.stdout + p.stderr).decode(errors="replace")
    except subprocess.TimeoutExpired:
        rc, out = -1, "[blocked: timed out]"
    return {
        "argv": argv,
        "rc": rc,
        "seconds": round(time.monotonic() - start, 3),
        "out": out[-keep:],
    }


def in_child(fn: Callable[[], None], timeout: float) -> dict[str, Any]:
    """Run ``fn`` in a forked child; its errno (0 on success), or ``blocked``."""
    r, w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(r)
        # Let go of the agent's pipes: a child stuck in the kernel must not hold them open.
        null = os.open(os.devnull, os.O_RDWR)
        for std in (0, 1, 2):
            os.dup2(null, std)
        code = 0
        try:
            fn()
        except OSError as e:
            code = e.errno or errno.EIO
        os.write(w, str(code).encode())
        os._exit(0)
    os.close(w)
    deadline = start + timeout
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            text = os.read(r, 32).decode() or "-1"
            os.close(r)
            code = int(text)
            return {
                "errno": code,
                "error": errno.errorcode.get(code, str(code)) if code else "",
                "seconds": round(time.monotonic() - start, 3),
            }
        time.sleep(0.02)
    os.close(r)  # the child stays stuck in the kernel; its result is "blocked"
    return {"errno": None, "error": "blocked", "seconds": round(timeout, 3)}


def reload(table: str) -> list[dict[str, Any]]:
    # --nolockfs: do not freeze the filesystem, which would flush exactly what we test.
    return [
        sh(["dmsetup", "suspend", "--nolockfs", DM]),
        sh(["dmsetup", "load", DM, "--table", table]),
        sh(["dmsetup", "resume", DM]),
    ]


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
        self.steps: list[dict[str, Any]] = []
        self.path = f"{MNT}/f" if args.fs != "zfs" else f"/{POOL}/f"
        self.mnt = MNT if args.fs != "zfs" else f"/{POOL}"

    def step(self, name: str, **facts: Any) -> dict[str, Any]:
        rec = {"step": name, **facts}
        self.steps.append(rec)
        return rec

    def make_fs(self, dm_dev: str) -> None:
        a = self.a
        if a.fs == "zfs":
            r = sh(["zpool", "create", "-f", "-o", "failmode=" + a.failmode, POOL, dm_dev], 300)
            self.step("mkfs", **r)
            return
        r = sh([*json.loads(a.mkfs), dm_dev], 300)
        self.step("mkfs", **r)
        os.makedirs(MNT, exist_ok=True)
        self.step(
            "mount", **sh(["mount", "-t", a.fs, "-o", a.mount_opts or "defaults", dm_dev, MNT])
        )

    def remount(self, dm_dev: str) -> None:
        a = self.a
        if a.fs == "zfs":
            self.step("export", **sh(["zpool", "export", POOL], a.timeout))
            self.step("import", **sh(["zpool", "import", "-d", "/dev/mapper", POOL], a.timeout))
            return
        self.step("umount", **sh(["umount", MNT], a.timeout))
        self.step(
            "mount-again",
            **sh(["mount", "-t", a.fs, "-o", a.mount_opts or "defaults", dm_dev, MNT], a.timeout),
        )

    def run(self) -> dict[str, Any]:
        a = self.a
        self.step(
            "dm-create",
            **sh(["dmsetup", "create", DM, "--table", a.healthy]),
        )
        dm_dev = f"/dev/mapper/{DM}"
        self.make_fs(dm_dev)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(fd, OLD * SIZE, 0)
        self.step("fsync-old", **in_child(lambda: os.fsync(fd), a.timeout))
        os.pwrite(fd, NEW * SIZE, 0)  # buffered, not yet durable
        self.step("fault-on", table=a.faulty, cmds=reload(a.faulty))
        for n in (1, 2):
            self.step(f"fsync-{n}", **in_child(lambda: os.fsync(fd), a.timeout))
        os.close(fd)

        def reopen_fsync() -> None:
            fd2 = os.open(self.path, os.O_RDWR)
            try:
                os.fsync(fd2)
            finally:
                os.close(fd2)

        self.step("reopen-fsync", **in_child(reopen_fsync, a.timeout))
        self.step("read-cached", content=classify(read_file(self.path)))

        def new_file() -> None:
            fd3 = os.open(self.mnt + "/g", os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.write(fd3, NEW * 4096)
                os.fsync(fd3)
            finally:
                os.close(fd3)

        self.step("new-file-fsync", **in_child(new_file, a.timeout))
        self.step("mount-state-faulty", state=mount_state(self.mnt))
        self.step("fault-off", cmds=reload(a.healthy))
        self.step("fsync-after-restore", **in_child(reopen_fsync, a.timeout))
        self.step("mount-state-restored", state=mount_state(self.mnt))
        self.remount(dm_dev)
        self.step("read-after-remount", content=classify(read_file(self.path)))
        return {"steps": self.steps, "kernel_log": kernel_log()}


def kernel_log() -> list[str]:
    out = sh(["dmesg", "--notime"], keep=200_000)["out"]
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
    args = ap.parse_args()
    sh(["dmesg", "-C"])
    print(json.dumps(Probe(args).run()))
    sys.stdout.flush()
    os._exit(0)  # a child may still be stuck in the kernel: do not wait for it


if __name__ == "__main__":
    raise SystemExit(main())
