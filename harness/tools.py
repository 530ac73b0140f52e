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
    # The lab's own build first, looked at every time (the setup may build one while
    # the lab runs); PATH's answer is remembered while it is still there to run: a host
    # check looks up e2fsck twice a state, 0.13 ms each through PATH. A miss is never
    # remembered, so a tool installed meanwhile is found.
    lab = str(paths.lab_bin())
    own = os.path.join(lab, tool)
    if os.access(own, os.X_OK):
        return own
    search = _search_path(lab)
    path = _found.get((tool, search))
    if path is None or not os.access(path, os.X_OK):
        path = shutil.which(tool, path=search)
        if path is None:
            raise ToolMissing(tool, PACKAGES.get(tool))
        _found[tool, search] = path
    return path


_found: dict[tuple[str, str], str] = {}


def available(tool: str) -> bool:
    return shutil.which(tool, path=_search_path()) is not None


def lab_built(path: str) -> bool:
    """``path`` (a resolved program) is one the lab built (paths.lab_bin), not Debian's."""
    return Path(path).parent == paths.lab_bin()


def _search_path(lab: str | None = None) -> str:
    # The lab's own builds first (paths.lab_bin says which); fsck tools live in
    # /usr/sbin, which a non-login root shell may not have on PATH.
    extra = ["/usr/sbin", "/sbin"]
    parts = os.environ.get("PATH", "").split(os.pathsep)
    first = lab if lab is not None else str(paths.lab_bin())
    return os.pathsep.join([first, *parts, *(p for p in extra if p not in parts)])
