#!/bin/bash
# Runs inside a lab guest from /tmp, disk0 mounted on /fst (bench/fstests_482.py does
# both): fstests' own `./check generic/482`, unchanged, on the guest's virtio disks found
# by serial:
#   disk0  this script, the built xfstests tree and bc (the guest image has no bc, which
#          fstests' common/config requires)
#   disk1  TEST_DEV (ext4, made on the host)   disk2  SCRATCH_DEV (dm-thin is built on it)
#   disk3  LOGWRITES_DEV: generic/482 leaves its log here (its cleanup removes the dm
#          devices, never the log), for the host to check with `scenario check-log`.
# The guest runs udevd (vm run --udev): fstests waits for dm devices with `udevadm wait`.
# Everything else is fstests' defaults: ext4 with mkfs and mount defaults, fsstress
# -n 512 -p <CPUs> (TIME_FACTOR = LOAD_FACTOR = 1), a fsck after every FUA.
set -u
dev() { readlink -f "/dev/disk/by-id/virtio-$1"; }
mkdir -p /mnt/test /mnt/scratch
export PATH="/fst/bin:$PATH"
cd /fst/xfstests || exit 3
cat > local.config <<EOF
export FSTYP=ext4
export TEST_DEV=$(dev disk1)
export TEST_DIR=/mnt/test
export SCRATCH_DEV=$(dev disk2)
export SCRATCH_MNT=/mnt/scratch
export LOGWRITES_DEV=$(dev disk3)
EOF
echo "uname: $(uname -r)  cpus: $(nproc)"
cat local.config
start=$(date +%s)
./check generic/482
rc=$?
echo "check exit status $rc, $(( $(date +%s) - start )) s in the guest"
cd / && sync && umount /fst
exit $rc
