"""An ext2/3/4 image read as e2fsprogs reads it, for ``jbd2.py``: the superblock's fields
(and where its backups are), group 0's inode table, an inode, and the internal journal's
blocks mapped to the image's (extent tree or block map). Apart from jbd2.py because none
of it is about the journal's contents or what e2fsck writes: only where things are.

What it does not model raises :class:`Unsure`, and the caller falls back to e2fsck's
undo file (jbd2.py's docstring lists what that is).
"""

from __future__ import annotations

import bisect
import os
import struct

SB_OFFSET = 1024
SB_MAGIC = 0xEF53
JOURNAL_INO = 8

COMPAT_HAS_JOURNAL, COMPAT_SPARSE_SUPER2 = 0x4, 0x200
COMPAT_FAST_COMMIT, COMPAT_ORPHAN_FILE = 0x400, 0x1000
INCOMPAT_RECOVER, INCOMPAT_JOURNAL_DEV, INCOMPAT_META_BG = 0x4, 0x8, 0x10
INCOMPAT_64BIT, INCOMPAT_MMP = 0x80, 0x100
RO_COMPAT_SPARSE_SUPER, RO_COMPAT_QUOTA, RO_COMPAT_BIGALLOC = 0x1, 0x100, 0x200
RO_COMPAT_ORPHAN_PRESENT = 0x10000
EXTENTS_FL, ENCRYPT_FL = 0x80000, 0x800
EXTENT_MAGIC = 0xF30A


class Unsure(Exception):
    """The image has something this reader does not model: use e2fsck's undo file."""


class Image:
    """The image open on ``fd``, read within its size (and the reads kept while ``reads``
    is a list: a walk's memo knows which blocks it depends on)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.reads: list[tuple[int, int]] | None = None  # what was read, while set

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or offset + length > self.size:
            raise Unsure(f"reads past the image's end (byte {offset})")
        if self.reads is not None:
            self.reads.append((offset, length))
        return os.pread(self.fd, length, offset)


def _u32(b: bytes, off: int) -> int:
    return int.from_bytes(b[off : off + 4], "little")


def _u16(b: bytes, off: int) -> int:
    return int.from_bytes(b[off : off + 2], "little")


class Super:
    """The fields of an ext2/3/4 superblock (1024 bytes) this reader needs."""

    def __init__(self, sb: bytes) -> None:
        if _u16(sb, 0x38) != SB_MAGIC:
            raise Unsure("no ext2/3/4 superblock magic")
        self.raw = sb
        self.blocks = _u32(sb, 0x4)
        self.first_data = _u32(sb, 0x14)
        log_bs = _u32(sb, 0x18)
        if log_bs > 6:
            raise Unsure(f"block size 2**{10 + log_bs}")
        self.bs = 1024 << log_bs
        self.bpg = _u32(sb, 0x20)
        self.ipg = _u32(sb, 0x28)
        self.rev = _u32(sb, 0x4C)
        self.first_ino = _u32(sb, 0x54) if self.rev else 11
        self.inode_size = _u16(sb, 0x58) if self.rev else 128
        self.compat, self.incompat, self.ro_compat = struct.unpack_from("<III", sb, 0x5C)
        self.journal_uuid = sb[0xD0:0xE0]
        self.journal_inum, self.journal_dev, self.last_orphan = struct.unpack_from("<III", sb, 0xE0)
        self.jnl_backup_type = sb[0xFD]
        self.jnl_blocks = sb[0x10C : 0x10C + 17 * 4]
        if self.incompat & INCOMPAT_64BIT:
            self.blocks |= _u32(sb, 0x150) << 32
            self.desc_size = _u16(sb, 0xFE)
        else:
            self.desc_size = 32
        self.backup_bgs = struct.unpack_from("<II", sb, 0x24C)
        if (
            not self.bpg
            or not self.ipg
            or self.first_data >= self.blocks
            or self.desc_size < 32
            or self.desc_size & (self.desc_size - 1)
            or not 128 <= self.inode_size <= self.bs
        ):
            raise Unsure("superblock geometry out of range")
        self.groups = -(-(self.blocks - self.first_data) // self.bpg)
        self.desc_blocks = -(-self.groups // (self.bs // self.desc_size))

    def key(self) -> tuple[object, ...]:
        """What a journaled copy of this superblock must keep for the set to hold."""
        return (
            self.blocks,
            self.first_data,
            self.bs,
            self.bpg,
            self.ipg,
            self.incompat & ~INCOMPAT_RECOVER,  # the replay clears RECOVER itself
            self.ro_compat,
            self.compat,
            self.desc_size,
            self.inode_size,
            self.first_ino,
            self.journal_inum,
            self.journal_dev,
            self.journal_uuid,
            self.backup_bgs,
        )

    def setup_key(self) -> tuple[object, ...]:
        """What the primary superblock must keep for a walk read from it to stand: its
        geometry and every field ``jbd2._base`` and ``Journal`` decide on."""
        return (*self.key(), self.incompat, self.jnl_backup_type, self.jnl_blocks)

    def orphans(self) -> bool:
        """Orphan inodes for e2fsck to release after the replay: writes not modelled."""
        return bool(self.last_orphan or self.ro_compat & RO_COMPAT_ORPHAN_PRESENT)

    def has_super(self, group: int) -> bool:
        """ext2fs_bg_has_super: where the backup superblocks and descriptors are."""
        if group == 0:
            return True
        if self.compat & COMPAT_SPARSE_SUPER2:
            return group in self.backup_bgs
        if group <= 1 or not self.ro_compat & RO_COMPAT_SPARSE_SUPER:
            return True
        if not group & 1:
            return False
        for base in (3, 5, 7):
            n = base
            while n < group:
                n *= base
            if n == group:
                return True
        return False


def inode_table(img: Image, sb: Super) -> int:
    """Group 0's inode table, from its descriptor (the first after the superblock)."""
    gd = img.read((sb.first_data + 1) * sb.bs, sb.desc_size)
    itable = _u32(gd, 0x8) | (_u32(gd, 0x28) << 32 if sb.desc_size >= 64 else 0)
    if not itable or itable >= sb.blocks:
        raise Unsure("group 0's inode table is out of range")
    return itable


def _inode(img: Image, sb: Super, ino: int) -> bytes:
    if not 0 < ino <= sb.ipg:
        raise Unsure(f"inode {ino} outside group 0")
    return img.read(inode_table(img, sb) * sb.bs + (ino - 1) * sb.inode_size, 128)


class Journal:
    """The internal journal: its logical blocks mapped to the image's, its superblock."""

    def __init__(self, img: Image, sb: Super) -> None:
        if sb.journal_inum != JOURNAL_INO or sb.journal_dev or any(sb.journal_uuid):
            raise Unsure("an external journal or a journal in another inode")
        inode = _inode(img, sb, JOURNAL_INO)
        mode, size = _u16(inode, 0), _u32(inode, 0x4) | (_u32(inode, 0x6C) << 32)
        if not _u16(inode, 0x1A) or mode & 0xF000 != 0x8000 or _u32(inode, 0x20) & ENCRYPT_FL:
            raise Unsure("the journal inode is not a regular file in use")
        i_block = inode[0x28:0x64]
        # e2fsck falls back to the superblock's copy of i_block when the inode looks
        # wrong, and then maps the journal from that copy: only agree when they agree.
        if sb.jnl_backup_type == 1 and (
            sb.jnl_blocks[:60] != i_block or _u32(sb.jnl_blocks, 64) != size & 0xFFFFFFFF
        ):
            raise Unsure("the journal inode differs from its backup in the superblock")
        self.img, self.bs, self.fs_blocks = img, sb.bs, sb.blocks
        self.length = size // sb.bs
        runs: list[tuple[int, int, int]] = []
        if _u32(inode, 0x20) & EXTENTS_FL:
            self._extents(i_block, runs, 5)
        else:
            self._blockmap(i_block, runs)
        runs.sort()
        self._starts = [r[0] for r in runs]
        self._runs = runs
        # One extent is the common case (mke2fs allocates the journal contiguously):
        # then a logical block maps by an addition, walked a thousand times a state.
        self._single = runs[0][1] if len(runs) == 1 else None
        covered = 0
        for lo, _, n in runs:  # e2fsck rejects a journal with holes
            if lo != covered:
                raise Unsure("the journal inode has holes")
            covered = lo + n
        if covered < self.length or self.length < 1024:
            raise Unsure("the journal inode maps fewer blocks than its size")
        if any(p <= 0 or p + n > sb.blocks for _, p, n in runs):
            raise Unsure("the journal maps outside the filesystem")

    def _extents(self, node: bytes, runs: list[tuple[int, int, int]], depth_left: int) -> None:
        magic, entries, _, depth = struct.unpack_from("<HHHH", node, 0)
        if magic != EXTENT_MAGIC or depth_left <= 0 or 12 + 12 * entries > len(node):
            raise Unsure("the journal's extent tree is not readable")
        for k in range(entries):
            e = 12 + 12 * k
            if depth:
                leaf = _u32(node, e + 4) | (_u16(node, e + 8) << 32)
                self._extents(self._fs_block(leaf), runs, depth_left - 1)
                continue
            n = _u16(node, e + 4)
            if n > 32768:  # an unwritten extent: e2fsck maps it all the same
                n -= 32768
            start = _u32(node, e + 8) | (_u16(node, e + 6) << 32)
            runs.append((_u32(node, e), start, n))

    def _blockmap(self, i_block: bytes, runs: list[tuple[int, int, int]]) -> None:
        per = self.bs // 4
        phys: list[int] = list(struct.unpack_from("<12I", i_block, 0))
        for level, ptr in enumerate(struct.unpack_from("<3I", i_block, 48), start=1):
            if len(phys) >= self.length:
                break
            phys += self._indirect(ptr, level, per)
        for lo, p in enumerate(phys[: self.length]):
            if not p:
                break
            if runs and runs[-1][0] + runs[-1][2] == lo and runs[-1][1] + runs[-1][2] == p:
                runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
            else:
                runs.append((lo, p, 1))

    def _indirect(self, ptr: int, level: int, per: int) -> list[int]:
        if not ptr:
            return []
        ptrs = struct.unpack(f"<{per}I", self._fs_block(ptr))
        if level == 1:
            return list(ptrs)
        out: list[int] = []
        for p in ptrs:
            if not p:
                break
            out += self._indirect(p, level - 1, per)
        return out

    def _fs_block(self, blk: int) -> bytes:
        if not 0 < blk < self.fs_blocks:
            raise Unsure(f"the journal maps to block {blk}, outside the filesystem")
        return self.img.read(blk * self.bs, self.bs)

    def phys(self, logical: int) -> int:
        if self._single is not None and 0 <= logical < self.length:
            return self._single + logical
        i = bisect.bisect_right(self._starts, logical) - 1
        lo, p, n = self._runs[max(i, 0)]
        if i < 0 or logical >= lo + n or logical >= self.length:
            raise Unsure(f"journal block {logical} is not mapped")
        return p + logical - lo

    def block(self, logical: int) -> bytes:
        return self._fs_block(self.phys(logical))
