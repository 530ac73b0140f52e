#!/bin/sh
# Rebuild the minimal crash state with fstests' src/log-writes/replay-log.
# Entries are numbered as replay-log counts them: every entry, marks included, from 0.
set -e
LOG=${LOG:-log.raw}
DEV=${1:?usage: replay.sh DEVICE (zeroed, at least 134217728 bytes: truncate -s 134217728 s.img; losetup -f --show s.img)}
replay-log --log "$LOG" --replay "$DEV" --limit 1291
# then, as fstests' generic/482 does: mount (the kernel's own recovery), fsck
#   mount -t btrfs $DEV $MNT
#   umount $MNT && fsck -n $DEV
