#!/bin/bash
# Runs inside a lab guest from /tmp, disk0 mounted on /fst (harness/fstests/check.py does
# both): fstests' own `./check TEST...`, unchanged, on the guest's virtio disks found by
# serial. Usage: guest.sh FSTYP TEST...
#   disk0  this script, the built xfstests tree and bc (the guest image has no bc, which
#          fstests' common/config requires)
#   disk1  TEST_DEV (made on the host: ext4 for generic/482; FSTYP's own in the guest
#          otherwise)   disk2  SCRATCH_DEV
#   disk3  LOGWRITES_DEV: dm-log-writes tests leave their log here (their cleanup removes
#          the dm devices, never the log), for the host to check with `scenario check-log`.
# The guest runs udevd (vm run --udev): fstests waits for dm devices with `udevadm wait`.
# Everything else is fstests' defaults (mkfs and mount options, TIME_FACTOR = LOAD_FACTOR = 1).
set -u
# The lab's guest commands run with DM_DISABLE_UDEV=1 (no udevd in its other guests); here
# udevd runs, and with both, dmsetup prints "Udev is running and DM_DISABLE_UDEV ... is
# set" into the test's output, which fails every dm-flakey test's golden .out.
unset DM_DISABLE_UDEV
fstyp=${1:?usage: guest.sh FSTYP TEST...}
shift
dev() { readlink -f "/dev/disk/by-id/virtio-$1"; }
mkdir -p /mnt/test /mnt/scratch
export PATH="/fst/bin:$PATH"
cd /fst/xfstests || exit 3
if ! blkid -p "$(dev disk1)" | grep -q "TYPE=\"$fstyp\""; then
	"mkfs.$fstyp" -f "$(dev disk1)" >/dev/null 2>&1 || "mkfs.$fstyp" -F -q "$(dev disk1)"
fi
cat > local.config <<CONF
export FSTYP=$fstyp
export TEST_DEV=$(dev disk1)
export TEST_DIR=/mnt/test
export SCRATCH_DEV=$(dev disk2)
export SCRATCH_MNT=/mnt/scratch
export LOGWRITES_DEV=$(dev disk3)
CONF
echo "uname: $(uname -r)  cpus: $(nproc)"
cat local.config
start=$(date +%s)
./check "$@"
rc=$?
echo "check exit status $rc, $(( $(date +%s) - start )) s in the guest"
cd / && sync && umount /fst
exit $rc
