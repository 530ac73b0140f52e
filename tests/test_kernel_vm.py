"""Kernels under test, for real: a Debian kernel package fetched, unpacked and booted
with its own modules. A mutant built, booted and caught -- and the stock kernel on the
same workload clean -- is one of the known-answer controls (tests/test_controls.py)."""

from __future__ import annotations

import pytest

from harness.image import build as image
from harness.kernel import add, mutant
from harness.kernel.boot import booting
from harness.vm.backend import GuestSpec, start_guest

pytestmark = pytest.mark.vm

# The smallest reachable kernel of another series than the image's 6.1.
OTHER = "linux-image-6.12.95+deb12-amd64"


def test_a_debian_kernel_boots_with_its_own_modules(guest_image: image.Image) -> None:
    k = add.add(f"deb:{OTHER}", guest_image)
    assert k.release == "6.12.95+deb12-amd64" and k.source["version"].startswith("6.12.95")
    assert k.options["DM_LOG_WRITES"] == "m" and not k.modules["zfs"]
    with booting(k.name), start_guest(GuestSpec()) as g:
        assert g.run(["uname", "-r"], check=True).out.strip() == k.release
        g.run(["modprobe", "dm-log-writes"], check=True)
        g.run(["modprobe", "dm-flakey"], check=True)
        targets = g.run(["dmsetup", "targets"], check=True).out
    assert "log-writes" in targets and "flakey" in targets
    # Outside booting(), guests boot the image's own kernel again.
    assert image.require_image().kernel == guest_image.kernel


@pytest.mark.skipif(not mutant.SOURCE_TAR.is_file(), reason="linux-source-6.1 not installed")
def test_the_mutant_module_is_the_one_loaded(guest_image: image.Image) -> None:
    """A mutant's ext4 is the one the guest runs, and it mounted the root: built here, out
    of tree and unsigned, the kernel taints it O and E (the stock one, Debian's, neither).
    Stripped, its initrd stays near the image's own (unstripped it was 41 MB)."""
    k = add.add("mutant:ext4-fsync-no-flush", guest_image)
    assert k.source["build"] == mutant.BUILD and k.dir is not None
    assert (k.dir / "initrd.img").stat().st_size < 16 << 20
    for name, taint in ((k.name, "OE"), (None, "")):
        with booting(name), start_guest(GuestSpec()) as g:
            assert g.run(["cat", "/sys/module/ext4/taint"], check=True).out.strip() == taint
            assert g.run(["findmnt", "-no", "FSTYPE", "/"], check=True).out.strip() == "ext4"
