"""The initrd of a kernel: how its modules reach a guest whose root image was built for
another kernel (or holds the stock build of a module a mutant replaces).

It carries busybox, ``initrd-init``, the modules that find the root disk (virtio, ext4,
with their dependencies, uncompressed: busybox insmod reads only plain ``.ko``), and a
module tree that the init puts under the root's ``/lib/modules/<release>`` -- on a
tmpfs for a whole tree, over the stock files for single modules. The root image's disk
is a snapshot overlay, so nothing reaches the cached image. An initrd rather than a
modules disk: no extra disk shifts the guest's device names, the backends need no change,
and a whole 6.12 module subset is ~30 MB, which QEMU loads in well under a second.
"""

from __future__ import annotations

import gzip
import lzma
import shutil
from collections.abc import Sequence
from pathlib import Path

from harness import proc

INIT = Path(__file__).with_name("initrd-init")
BUSYBOX = Path("/usr/bin/busybox")  # busybox-static (scripts/install-host-deps)
# What finds the root disk; the rest of the tree is modprobe'd from the root.
EARLY = ("virtio_pci", "virtio_blk", "ext4")
# The parts of a module tree the lab's guests load from (device-mapper, filesystems,
# virtio, and what they depend on): a fraction of a distribution's tree.
TREE_PARTS = (
    "kernel/fs",
    "kernel/drivers/md",
    "kernel/drivers/block",
    "kernel/drivers/virtio",
    "kernel/drivers/char",
    "kernel/drivers/scsi",
    "kernel/lib",
    "kernel/crypto",
    "kernel/arch",
    "updates",
)


def plain(ko: Path, out: Path) -> Path:
    """``ko`` uncompressed into ``out`` (a ``.ko``): Debian compresses with xz, a user's
    tree may use any of the kernel's CONFIG_MODULE_COMPRESS_* (xz, gzip, zstd)."""
    dest = out / (ko.name.split(".ko")[0] + ".ko")
    if ko.suffix == ".xz":
        dest.write_bytes(lzma.decompress(ko.read_bytes()))
    elif ko.suffix == ".gz":
        dest.write_bytes(gzip.decompress(ko.read_bytes()))
    elif ko.suffix == ".zst":
        proc.run(["zstd", "-q", "-d", "-f", ko, "-o", dest])
    else:
        shutil.copy2(ko, dest)
    return dest


def compress(tree: Path) -> None:
    """xz every plain ``.ko`` under ``tree``, as kbuild's CONFIG_MODULE_COMPRESS_XZ does
    (CRC32, 1 MiB dictionary). The initrd carries the module tree, and under TCG every
    megabyte of it costs boot time: Debian's 6.1 ships its modules plain (a 89 MB initrd,
    14.4 s to the first command, against 8.5-9.6 s for 6.12's xz'd 23 MB). The guest's
    kmod loads .ko.xz; the early modules are unpacked again for busybox (``plain``)."""
    lzma2 = [{"id": lzma.FILTER_LZMA2, "preset": 3, "dict_size": 1 << 20}]
    for ko in tree.rglob("*.ko"):
        data = lzma.compress(ko.read_bytes(), check=lzma.CHECK_CRC32, filters=lzma2)
        ko.with_name(ko.name + ".xz").write_bytes(data)
        ko.unlink()


def early_modules(root: Path, release: str) -> list[Path]:
    """The early modules and their dependencies, in load order, from the tree under
    ``root/lib/modules/<release>`` (its ``modules.dep`` made by ``depmod -b``)."""
    order: list[Path] = []
    for m in EARLY:
        r = proc.run(["modprobe", "-d", root, "-S", release, "--show-depends", m])
        for line in r.stdout.splitlines():
            parts = line.split()
            if parts[:1] == ["insmod"] and Path(parts[1]) not in order:
                order.append(Path(parts[1]))
    return order


def build(
    out: Path,
    early: Sequence[Path],
    tree: Path | None,
    *,
    whole: bool,
    work: Path,
) -> None:
    """Write the initrd ``out``: ``early`` modules (loaded in this order), and ``tree``
    (a folder holding ``lib/modules/<release>/...``) for the init to put in place."""
    stage = work / "initrd"
    for d in ("bin", "dev", "proc", "newroot", "lib/modules"):
        (stage / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, stage / "bin" / "busybox")
    shutil.copy2(INIT, stage / "init")
    (stage / "init").chmod(0o755)
    names = [plain(ko, stage / "lib" / "modules").name for ko in early]
    (stage / "modules.order").write_text("".join(f"{n}\n" for n in names))
    if tree is not None:
        shutil.copytree(tree, stage / "tree", symlinks=True)
        if whole:
            (stage / "tree" / "whole").touch()
    files = sorted(str(p.relative_to(stage)) for p in stage.rglob("*"))
    listing = "".join(f"{f}\n" for f in files)
    proc.run(["cpio", "-o", "-H", "newc", "--quiet", "-F", out.resolve()], input=listing, cwd=stage)
