"""Which blocks of an ext3/ext4 image ``e2fsck -E journal_only -p`` can write, read from
the image itself, so the host check can save exactly those and put them back instead of
running e2fsck with an undo file (``-z``), whose writes cost more than the journal
replay (bench/README.md).

The set (``replay_writes``) is a superset, from e2fsprogs 1.47's own code:

- every block tagged in the journal's descriptor blocks from the journal superblock's
  ``s_start`` / ``s_sequence`` on, walked as ``do_one_pass`` walks them (e2fsck/recovery.c:
  tag sizes for 32/64-bit and csum v2/v3, ``SAME_UUID``, ``LAST_TAG``, the descriptor
  tail, wrap-around) until the first block whose magic or sequence does not follow;
  revokes and commit checksums only ever replay less, so they are ignored;
- the journal superblock (``e2fsck_journal_release`` rewrites it);
- the primary superblock and group descriptors (``ext2fs_flush``), and the backup
  superblocks and descriptors: preen fixes such as a missing UUID clear
  ``EXT2_FLAG_MASTER_SB_ONLY``;
- the inode-table blocks of the reserved inodes (the journal inode rewritten from its
  backup in the superblock, the resize inode cleared by ``check_resize_inode``).

Anything this reader does not fully understand raises :class:`Unsure` and the caller
falls back to ``-z``: no journal superblock, an external journal, fast commits, a
feature or block type it does not know, orphans to release after the replay
(``release_orphan_inodes`` writes inodes, bitmaps and extent blocks anywhere), meta_bg
(descriptors in every meta group), MMP (its block), quota (``e2fsck_hide_quota``),
bigalloc, a journal inode it cannot map, a journaled superblock with another geometry.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import operator
import os
import struct
from collections.abc import Iterator

from harness.replay.changes import Changes

SB_OFFSET = 1024
SB_MAGIC = 0xEF53
JOURNAL_INO = 8
JBD2_MAGIC = 0xC03B3998
DESCRIPTOR, COMMIT, SB_V1, SB_V2, REVOKE = 1, 2, 3, 4, 5
FLAG_SAME_UUID, FLAG_LAST_TAG = 0x2, 0x8
# jbd2 incompat: revoke, 64bit, async_commit, csum v2, csum v3 (fast_commit 0x20 is not)
J_INCOMPAT_KNOWN = 0x1 | 0x2 | 0x4 | 0x8 | 0x10
J_INCOMPAT_64BIT, J_INCOMPAT_CSUM_V2, J_INCOMPAT_CSUM_V3 = 0x2, 0x8, 0x10
J_COMPAT_CHECKSUM = 0x1

COMPAT_HAS_JOURNAL, COMPAT_SPARSE_SUPER2 = 0x4, 0x200
COMPAT_FAST_COMMIT, COMPAT_ORPHAN_FILE = 0x400, 0x1000
INCOMPAT_RECOVER, INCOMPAT_JOURNAL_DEV, INCOMPAT_META_BG = 0x4, 0x8, 0x10
INCOMPAT_64BIT, INCOMPAT_MMP = 0x80, 0x100
RO_COMPAT_SPARSE_SUPER, RO_COMPAT_QUOTA, RO_COMPAT_BIGALLOC = 0x1, 0x100, 0x200
RO_COMPAT_ORPHAN_PRESENT = 0x10000
EXTENTS_FL, ENCRYPT_FL = 0x80000, 0x800
EXTENT_MAGIC = 0xF30A


_HEADER = struct.Struct(">III")  # a journal block's magic, block type, sequence


class Unsure(Exception):
    """The image has something this reader does not model: use e2fsck's undo file."""


class _Image:
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


class _Super:
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
        geometry and every field ``_base`` and ``_Journal`` decide on."""
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


def replay_writes(fd: int, changes: Changes | None = None) -> list[tuple[int, int]]:
    """The byte ranges (offset, length; sorted, merged) ``e2fsck -E journal_only -p`` may
    write in the image open on ``fd``.

    ``changes``: the working image's tracker (``Replayer.changes``). What this call read
    and found is kept in it, and the next call reads again only what the replayer's
    writes since touched: between two states the journal usually grew by a transaction
    or two, or its tail moved on, and ~500 journal blocks were read again for nothing
    (2.3 ms a state, bench/README.md).

    :raise Unsure: something here is not modelled; save the image another way.
    """
    since = changes.take() if changes is not None else None
    memo = changes.memo if changes is not None else None
    img = _Image(fd)
    if changes is not None:
        changes.memo = None  # set again once this call has an answer it trusts
    if isinstance(memo, _Memo) and since is not None and (how := memo.again(img, since)):
        walk = memo
        STATS[how] += 1
    else:
        walk = _Memo.read(img)
        STATS["afresh" if changes is not None else "untracked"] += 1
    if changes is not None:
        changes.memo = walk
    # After keeping the walk: orphans come and go between states (fsstress-482 has them
    # in most), and a walk dropped for them was read afresh at the next state.
    if walk.sb.orphans() or walk.orphan_steps:
        raise Unsure("orphan inodes to release after the replay")
    return walk.result


def _base(img: _Image) -> tuple[_Super, int, set[int]]:
    """The superblock, after refusing what is not modelled, group 0's inode table, and
    the blocks the replay writes whatever the journal holds."""
    sb = _Super(img.read(SB_OFFSET, 1024))
    if sb.incompat & (INCOMPAT_META_BG | INCOMPAT_JOURNAL_DEV | INCOMPAT_MMP):
        raise Unsure("meta_bg, a journal device or MMP (e2fsck writes its MMP block)")
    if sb.ro_compat & (RO_COMPAT_BIGALLOC | RO_COMPAT_QUOTA):
        raise Unsure("bigalloc or quota (e2fsck_hide_quota may move quota inodes)")
    if sb.compat & (COMPAT_FAST_COMMIT | COMPAT_ORPHAN_FILE):
        raise Unsure("fast commits or an orphan file")
    if not sb.compat & COMPAT_HAS_JOURNAL and (
        sb.incompat & INCOMPAT_RECOVER or sb.journal_inum or sb.journal_dev or any(sb.journal_uuid)
    ):
        raise Unsure("journal fields without has_journal")
    itable = _itable(img, sb)
    return sb, itable, _metadata_blocks(sb, itable)


def _metadata_blocks(sb: _Super, itable: int) -> set[int]:
    """Superblocks and descriptors (primary and backups), reserved inodes' table blocks."""
    out: set[int] = {SB_OFFSET // sb.bs}
    for g in range(sb.groups):
        if sb.has_super(g):
            first = sb.first_data + g * sb.bpg
            out.update(range(first, first + 1 + sb.desc_blocks))
    last = max(sb.first_ino - 1, JOURNAL_INO)
    out.update(range(itable, itable + ((last * sb.inode_size) - 1) // sb.bs + 1))
    return out


def _itable(img: _Image, sb: _Super) -> int:
    """Group 0's inode table, from its descriptor (the first after the superblock)."""
    gd = img.read((sb.first_data + 1) * sb.bs, sb.desc_size)
    itable = _u32(gd, 0x8) | (_u32(gd, 0x28) << 32 if sb.desc_size >= 64 else 0)
    if not itable or itable >= sb.blocks:
        raise Unsure("group 0's inode table is out of range")
    return itable


def _inode(img: _Image, sb: _Super, ino: int) -> bytes:
    if not 0 < ino <= sb.ipg:
        raise Unsure(f"inode {ino} outside group 0")
    return img.read(_itable(img, sb) * sb.bs + (ino - 1) * sb.inode_size, 128)


class _Journal:
    """The internal journal: its logical blocks mapped to the image's, its superblock."""

    def __init__(self, img: _Image, sb: _Super) -> None:
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


# How each call with a tracker went: "kept" (nothing it read was written), "grown" (the
# walk went on from where it stopped), "moved" (the tail moved to a step of the walk),
# "afresh" (read again). For the bench and the tests.
STATS: collections.Counter[str] = collections.Counter()
_JSB = struct.Struct(">IIIIIIII")  # magic, type, sequence; blocksize, maxlen, first, seq, start
# Past this many bytes written since the last call, read everything again (a discard of
# the whole device, a state far from the last one).
_AGAIN_MAX_BYTES = 64 << 20


_Shape = tuple[int, int, int, int, int, int, int]


def _journal_super(jsb: bytes) -> tuple[_Shape | None, int, int]:
    """A journal superblock's shape (type, block size, maxlen, first, compat, incompat,
    ro_compat; None without the magic or a superblock type), sequence and start."""
    magic, btype, _, j_bs, maxlen, first, seq, start = _JSB.unpack_from(jsb)
    if magic != JBD2_MAGIC or btype not in (SB_V1, SB_V2):
        return None, seq, start
    features = struct.unpack_from(">III", jsb, 36) if btype == SB_V2 else (0, 0, 0)
    return (btype, j_bs, maxlen, first, *features), seq, start


class _Memo:
    """One walk of the journal: what it read, where it stopped, what it found; kept
    between calls on the same working image so that the next one (:meth:`again`) reads
    only what changed.

    The walk is a function of the blocks it read: the superblock, group 0's descriptor,
    the journal inode and its map, the journal superblock (``setup``), and then the
    header block of each step (a descriptor, commit or revoke: ``steps``) up to the
    first block that does not follow (``end``). So with none of those written since,
    the answer stands (the superblock and the descriptor may be, if what the walk took
    from them stays); with only ``end`` written, the journal grew and the walk goes on
    from there; with the journal superblock written, its tail moved on to a step of
    this walk (jbd2 checkpointed) and the answer is that step's suffix.
    """

    def __init__(self, sb: _Super, base: set[int]) -> None:
        self.sb, self.bs = sb, sb.bs
        self.base = base
        self.result: list[tuple[int, int]] = _ranges(base, sb.bs)
        self.steps: list[tuple[int, int, int]] = []  # (image block, journal block, sequence)
        self.runs_at: list[int] = []  # len(runs) before each step
        self.runs: list[list[int]] = []
        self.supers: set[int] = set()  # journaled superblock copies read
        self.orphan_steps: list[int] = []  # steps whose superblock copy lists orphans
        self.end: tuple[int, int, int] | None = None  # where the walk stopped, and its sequence
        self.out: set[int] = set(base)
        self.headers: set[int] = set()
        self.at: dict[tuple[int, int], int] = {}  # (journal block, sequence) -> step
        self.setup: set[int] = set()
        self.itable = 0  # group 0's inode table, as the setup found it
        self.j: _Journal | None = None

    @classmethod
    def read(cls, img: _Image) -> _Memo:
        img.reads = []
        sb, itable, base = _base(img)
        m = cls(sb, base)
        m.itable = itable
        if sb.compat & COMPAT_HAS_JOURNAL:
            m._open_journal(img)
        m.setup = {b for off, n in img.reads for b in range(off // m.bs, (off + n - 1) // m.bs + 1)}
        img.reads = None
        if m.j is not None and m.start:
            m._walk(img, m.start, m.seq0)
        return m

    def _open_journal(self, img: _Image) -> None:
        sb = self.sb
        j = _Journal(img, sb)
        shape, seq, start = _journal_super(j.block(0))
        if shape is None:
            raise Unsure("no journal superblock")
        _, j_bs, maxlen, first, compat, incompat, ro_compat = shape
        if incompat & ~J_INCOMPAT_KNOWN or ro_compat or compat & ~J_COMPAT_CHECKSUM:
            raise Unsure(f"journal features {compat:#x}/{incompat:#x}/{ro_compat:#x}")
        if j_bs != sb.bs or not 0 < first < maxlen or maxlen > j.length:
            raise Unsure("journal superblock geometry")
        if start and not first <= start < maxlen:
            raise Unsure("journal s_start outside the log")
        self.j, self.jsb_block = j, j.phys(0)
        self.jsb_shape = shape
        self.maxlen, self.first, self.start, self.seq0 = maxlen, first, start, seq
        self.tags = Tags(incompat, sb.bs)
        self.base.add(self.jsb_block)
        self.out.add(self.jsb_block)
        self.result = _ranges(self.out, sb.bs)

    def _wrap(self, b: int) -> int:
        return b - (self.maxlen - self.first) if b >= self.maxlen else b

    def _walk(self, img: _Image, pos: int, seq: int) -> None:
        """Walk on from journal block ``pos`` expecting ``seq``, as e2fsck's recovery
        pass does, until a block does not follow."""
        j, sb, bs = self.j, self.sb, self.bs
        assert j is not None
        sb_block = SB_OFFSET // bs
        first_new = len(self.runs)
        for _ in range(self.maxlen + 1 - len(self.steps)):
            where = j.phys(pos)
            head = img.read(where * bs, bs)
            magic, btype, hseq = _HEADER.unpack_from(head)
            if magic != JBD2_MAGIC or hseq != seq:
                self.end = (where, pos, seq)
                # Every descriptor's targets, made one set at the end: a full journal has
                # hundreds of small transactions, and a set update per descriptor cost a
                # tenth of the walk.
                self.out.update(itertools.chain.from_iterable(self.runs[first_new:]))
                self.result = _ranges(self.out, bs)
                return
            self.at[pos, seq] = len(self.steps)
            self.steps.append((where, pos, seq))
            self.runs_at.append(len(self.runs))
            self.headers.add(where)
            pos = self._wrap(pos + 1)
            if btype == COMMIT:
                seq = (seq + 1) & 0xFFFFFFFF
            elif btype == DESCRIPTOR:
                targets, highest, supers = self.tags.cached(where, head, sb_block)
                if highest >= sb.blocks:
                    raise Unsure("a journal tag targets a block past the filesystem's end")
                self.runs.append(targets)
                for k in supers:  # the superblock the replay will leave
                    copy_at = j.phys(self._wrap(pos + k))
                    self.supers.add(copy_at)
                    copy = _Super(img.read(copy_at * bs, bs)[SB_OFFSET % bs :][:1024])
                    if copy.orphans():
                        self.orphan_steps.append(len(self.steps) - 1)
                    if copy.key() != sb.key():
                        raise Unsure("a journaled superblock with another geometry")
                pos = self._wrap(pos + len(targets))
            elif btype != REVOKE:
                raise Unsure(f"journal block type {btype}")
        raise Unsure("the journal walk does not end")

    def again(self, img: _Image, since: list[tuple[int, int]]) -> str:
        """Bring the answer up to the image after the writes ``since``, reading only
        what they touched; how (``STATS``), or "" when that is not this walk's to tell
        (read afresh).

        :raise Unsure: the journal grew into something not modelled.
        """
        if sum(n for _, n in since) > _AGAIN_MAX_BYTES:
            return ""
        bs = self.bs
        hit = {b for off, n in since for b in range(off // bs, (off + n - 1) // bs + 1)}
        sb_block, gd_block = SB_OFFSET // bs, self.sb.first_data + 1
        if self.j is None or hit & (self.setup - {self.jsb_block, sb_block, gd_block}):
            return ""
        if hit & self.supers or not self._setup_stands(img, hit, sb_block, gd_block):
            return ""
        how = "kept"
        if self.jsb_block in hit:
            if not self._tail_moved(img):
                return ""
            how = "moved"
        if hit & self.headers:
            return ""
        if self.end is not None and self.end[0] in hit:
            _, pos, seq = self.end
            self.end = None
            self._walk(img, pos, seq)
            how = "grown" if how == "kept" else how
        return how

    def _setup_stands(self, img: _Image, hit: set[int], sb_block: int, gd_block: int) -> bool:
        """The superblock or group 0's descriptor was written (jbd2 checkpoints them
        often): the walk stands if what it took from them did not change."""
        try:
            if sb_block in hit:
                sb = _Super(img.read(SB_OFFSET, 1024))
                if sb.setup_key() != self.sb.setup_key():
                    return False
                self.sb = sb  # its orphans may have changed
            return gd_block not in hit or _itable(img, self.sb) == self.itable
        except Unsure:
            return False

    def _tail_moved(self, img: _Image) -> bool:
        """The journal superblock was written: if only its tail moved, to a step of
        this walk, keep the walk from that step on."""
        shape, seq, start = _journal_super(img.read(self.jsb_block * self.bs, self.bs))
        k = self.at.get((start, seq))
        if shape is None or shape != self.jsb_shape or not start or k is None:
            return False
        if k:
            cut = self.runs_at[k]
            self.steps, self.runs_at = self.steps[k:], [r - cut for r in self.runs_at[k:]]
            self.runs = self.runs[cut:]
            self.orphan_steps = [i - k for i in self.orphan_steps if i >= k]
            self.headers = {w for w, _, _ in self.steps}
            self.at = {(p, q): i for i, (_, p, q) in enumerate(self.steps)}
            self.out = self.base | set(itertools.chain.from_iterable(self.runs))
            self.result = _ranges(self.out, self.bs)
        self.start, self.seq0 = start, seq
        return True


# The low byte of a tag's flags (big-endian, at byte 7 in both tag layouts) marks the end
# of a run of evenly spaced tags when it has LAST_TAG or lacks SAME_UUID (a UUID follows).
_RUN_ENDS = bytes(1 if f & FLAG_LAST_TAG or not f & FLAG_SAME_UUID else 0 for f in range(256))


_first, _second = operator.itemgetter(0), operator.itemgetter(1)


def _indices(xs: list[int], x: int) -> Iterator[int]:
    """Where ``x`` is in ``xs`` (the search runs in C: ``x`` is rarely there)."""
    k = -1
    while x in xs[k + 1 :]:
        k = xs.index(x, k + 1)
        yield k


# Descriptor blocks read before, by where they are, with what the walk needs of them
# (``Tags.cached``): consecutive states share most of their journal, and reading tags
# costs more than comparing 4 KiB.
_Summary = tuple[list[int], int, tuple[int, ...]]
_SEEN: dict[tuple[int, int, bool, int, int], tuple[bytes, _Summary]] = {}
_SEEN_MAX = 8192


class Tags:
    """The tags of a descriptor block, read as e2fsck's ``count_tags`` and replay loop
    read them (e2fsck/recovery.c): ``journal_tag_bytes`` long (16 with csum v3; else 12,
    +2 with csum v2, -4 without 64bit), each but a SAME_UUID one followed by a 16-byte
    UUID, up to LAST_TAG or the end of the block less its checksum tail."""

    def __init__(self, incompat: int, block_size: int) -> None:
        csum = incompat & (J_INCOMPAT_CSUM_V2 | J_INCOMPAT_CSUM_V3)
        if incompat & J_INCOMPAT_CSUM_V3:
            self.size = 16
        else:
            self.size = 12 + (2 if csum else 0) - (0 if incompat & J_INCOMPAT_64BIT else 4)
        self.high = bool(incompat & J_INCOMPAT_64BIT)
        self.room = block_size - (4 if csum else 0)
        # blocknr (and blocknr_high at byte 8 with 64bit), the rest skipped
        pad = self.size - (12 if self.high else 4)
        self._fmt = struct.Struct(f">I4xI{pad}x" if self.high else f">I{pad}x")

    def cached(self, where: int, block: bytes, sb_block: int) -> _Summary:
        """``targets(block)``, the highest of them and where ``sb_block`` is among them,
        remembered for the block at ``where`` while its bytes stay."""
        key = (where, self.size, self.high, self.room, sb_block)
        hit = _SEEN.get(key)
        if hit is not None and hit[0] == block:
            return hit[1]
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()
        targets = self.targets(block)
        summary = (targets, max(targets, default=0), tuple(_indices(targets, sb_block)))
        _SEEN[key] = (block, summary)
        return summary

    def targets(self, block: bytes) -> list[int]:
        """The filesystem block of each tag, in order (one journal block follows each).

        Tags come in runs at a fixed stride, so each run is read by ``iter_unpack`` and
        its end found by ``translate``/``find``: a 4 KiB descriptor holds ~250 tags and a
        large journal thousands of descriptors, too many for a loop over tags in Python.
        """
        out: list[int] = []
        size, t = self.size, 12
        while t + size <= self.room:
            k = (self.room - t) // size
            end = block[t + 7 : t + k * size : size].translate(_RUN_ENDS).find(1)
            n = k if end < 0 else end + 1
            run = self._fmt.iter_unpack(block[t : t + n * size])
            if not self.high:
                out += map(_first, run)
            else:
                pairs = list(run)
                if any(map(_second, pairs)):
                    out += [lo | hi << 32 for lo, hi in pairs]
                else:
                    out += map(_first, pairs)
            t += n * size
            if end < 0:
                break
            flags = block[t - size + 7]
            if flags & FLAG_LAST_TAG:
                break
            t += 16  # the UUID after a tag without SAME_UUID
        return out


def _ranges(blocks: set[int], bs: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for b in sorted(blocks):
        if out and out[-1][0] + out[-1][1] == b * bs:
            out[-1] = (out[-1][0], out[-1][1] + bs)
        else:
            out.append((b * bs, bs))
    return out
