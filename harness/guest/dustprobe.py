#!/usr/bin/env python3
"""Bad sectors under a live filesystem, inside the guest (stdlib only): dm-dust.

``zfs``: a mirror or raidz vdev one of whose disks sits on dm-dust; data is written, the pool
exported, bad blocks are added under part of the data and enabled, the pool imported and
scrubbed. ZFS must count read errors on that side, rewrite the blocks from the other
side or parity (a write to a dm-dust bad block clears it, as a disk remaps a sector) and lose
nothing. ``ext4``: one file's first block is made bad; reading the file (page cache
dropped) must fail with EIO, not return other data.

Prints a ``contract.DustFacts`` of raw facts; the host judges.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from ..model import contract
from . import runner
from .eioprobe import in_child, sh

DM = "crashlab-dust"
LIN = "crashlab-lin"
BLOCK = 4096
POOL = "dustpool"


def dust(dev: str, sectors: int) -> str:
    return f"0 {sectors} dust {dev} 0 {BLOCK}"


def add_bad(blocks: range) -> contract.Command:
    for b in blocks:
        sh(["dmsetup", "message", DM, "0", "addbadblock", str(b)])
    sh(["dmsetup", "message", DM, "0", "enable"])
    counted: contract.Command = sh(["dmsetup", "message", DM, "0", "countbadblocks"])
    return counted


def zfs(a: argparse.Namespace) -> contract.DustFacts:
    c: dict[str, contract.Command] = {}
    vdevs = []
    for i, dev in enumerate(a.devs.split(",")):
        sectors = int(sh(["blockdev", "--getsz", dev]).output.strip())
        # The healthy sides on dm-linear: ZFS takes dm devices whole, with no partition
        # table to wait for (the guest runs without udev).
        name, table = (
            (DM, dust(dev, sectors)) if i == a.bad_disk else
            (f"{LIN}{i}", f"0 {sectors} linear {dev} 0")
        )  # fmt: skip
        c[f"dm{i}"] = sh(["dmsetup", "create", name, "--table", table])
        vdevs.append(f"/dev/mapper/{name}")
    c["create"] = sh(
        ["zpool", "create", "-f", "-O", "compression=off", POOL, a.layout, *vdevs], 300
    )
    c["write"] = sh(
        ["sh", "-c", f"head -c {a.data_mb}M /dev/urandom > /{POOL}/data && zpool sync {POOL}"],
        600,
    )
    sha_before = sh(["sha256sum", f"/{POOL}/data"], 300).output.split()[:1]
    c["export"] = sh(["zpool", "export", POOL], 300)
    # Bad blocks past the labels and metaslab headers, where the data went.
    first = (4 << 20) // BLOCK
    c["badblocks"] = add_bad(range(first, first + a.bad_blocks))
    c["import"] = sh(["zpool", "import", "-d", "/dev/mapper", POOL], 300)
    t = time.monotonic()
    c["scrub"] = sh(["sh", "-c", f"zpool scrub {POOL} && zpool wait -t scrub {POOL}"], 1800)
    scrub_seconds = round(time.monotonic() - t, 3)
    # read whole: the host parses it
    status = runner.run(["zpool", "status", "-j", "--json-int", POOL], 120, merge=True).stdout
    sha_after = sh(["sha256sum", f"/{POOL}/data"], 300).output.split()[:1]
    c["badblocks_after"] = sh(["dmsetup", "message", DM, "0", "countbadblocks"])
    return contract.DustFacts(
        fs="zfs", commands=c, layout=a.layout, bad_disk=a.bad_disk, sha_before=sha_before,
        sha_after=sha_after, scrub_seconds=scrub_seconds, status=status,
    )  # fmt: skip


def ext4(a: argparse.Namespace) -> contract.DustFacts:
    c: dict[str, contract.Command] = {}
    raw = a.devs.split(",")[0]
    sectors = int(sh(["blockdev", "--getsz", raw]).output.strip())
    c["dm"] = sh(["dmsetup", "create", DM, "--table", dust(raw, sectors)])
    dev = f"/dev/mapper/{DM}"
    c["mkfs"] = sh(["mkfs.ext4", "-q", "-F", "-b", str(BLOCK), dev], 300)
    os.makedirs("/mnt/dust", exist_ok=True)
    c["mount"] = sh(["mount", dev, "/mnt/dust"])
    with open("/mnt/dust/f", "wb") as f:
        f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
    c["umount"] = sh(["umount", "/mnt/dust"])
    # stdout whole: the file's first block (the tail of the output would hold a later one)
    blocks = runner.run(["debugfs", "-R", "blocks /f", dev], 120).stdout.split()
    c["badblocks"] = add_bad(range(int(blocks[0]), int(blocks[0]) + 1))
    c["mount_again"] = sh(["mount", dev, "/mnt/dust"])

    def read() -> int:
        with open("/mnt/dust/f", "rb") as f:
            return len(f.read())

    got = in_child(read, a.timeout)
    return contract.DustFacts(fs="ext4", commands=c, file_block=int(blocks[0]), read=got)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fs", choices=("zfs", "ext4"), required=True)
    ap.add_argument("--devs", required=True, help="comma-separated disks (zfs: the pool's)")
    ap.add_argument("--layout", default="mirror", help="zfs: mirror, raidz1, raidz2")
    ap.add_argument("--bad-disk", type=int, default=0, help="zfs: the disk on dm-dust")
    ap.add_argument("--data-mb", type=int, default=64)
    ap.add_argument("--bad-blocks", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args()
    sh(["dmesg", "-C"])
    print((zfs(a) if a.fs == "zfs" else ext4(a)).to_json())
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
