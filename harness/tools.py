"""Which Debian package provides each program the lab runs: one registry for install hints."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from harness import paths
from harness.errors import ToolMissing

PACKAGES: dict[str, str] = {
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "mmdebstrap": "mmdebstrap",
    "mkfs.ext4": "e2fsprogs",
    "e2fsck": "e2fsprogs",
    "e2undo": "e2fsprogs",
    "debugfs": "e2fsprogs",
    "dumpe2fs": "e2fsprogs",
    "mkfs.xfs": "xfsprogs",
    "xfs_repair": "xfsprogs",
    "xfs_db": "xfsprogs",
    "mkfs.btrfs": "btrfs-progs",
    "btrfs": "btrfs-progs",
    "mkfs.jfs": "jfsutils",
    "fsck.jfs": "jfsutils",
    "jfs_logdump": "jfsutils",
    "jfs_tune": "jfsutils",
    "losetup": "mount",
    "fallocate": "util-linux",
    "mkfs.reiserfs": "reiserfsprogs",
    "reiserfsck": "reiserfsprogs",
    "mkfs.f2fs": "f2fs-tools",
    "fsck.f2fs": "f2fs-tools",
    "zdb": "zfsutils-linux (contrib, bookworm-backports)",
    "busybox": "busybox-static",
    "cpio": "cpio",
    "sqlite3": "sqlite3",
    "fio": "fio",
    "libvirtd": "libvirt-daemon-system",
    "virtlogd": "libvirt-daemon-system",
    "virsh": "libvirt-clients",
    "vagrant": "vagrant",
    # Kernels under test (harness/kernel): fetched, unpacked, a mutant module built.
    "apt-get": "apt",
    "dpkg-deb": "dpkg",
    "depmod": "kmod",
    "modprobe": "kmod",
    "modinfo": "kmod",
    "patch": "patch",
    "make": "make",
    "git": "git",
    "strip": "binutils",
    "zstd": "zstd",
    # fstests' fsstress, built from a checkout (harness/record/fsstress.py)
    "gcc": "gcc (and xfslibs-dev for fsstress)",
}


def require(tool: str) -> str:
    """Return the full path of ``tool`` or raise ToolMissing naming its package."""
    path = shutil.which(tool, path=_search_path())
    if path is None:
        raise ToolMissing(tool, PACKAGES.get(tool))
    return path


def available(tool: str) -> bool:
    return shutil.which(tool, path=_search_path()) is not None


def lab_built(path: str) -> bool:
    """``path`` (a resolved program) is one the lab built (paths.lab_bin), not Debian's."""
    return Path(path).parent == paths.lab_bin()


def _search_path() -> str:
    # The lab's own builds first (paths.lab_bin says which); fsck tools live in
    # /usr/sbin, which a non-login root shell may not have on PATH.
    extra = ["/usr/sbin", "/sbin"]
    parts = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join([str(paths.lab_bin()), *parts, *(p for p in extra if p not in parts)])
