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

Anything this reader does not fully understand raises :class:`extfs.Unsure` and the
caller falls back to ``-z``: no journal superblock, an external journal, fast commits, a
feature or block type it does not know, orphans to release after the replay
(``release_orphan_inodes`` writes inodes, bitmaps and extent blocks anywhere), meta_bg
(descriptors in every meta group), MMP (its block), quota (``e2fsck_hide_quota``),
bigalloc, a journal inode it cannot map, a journaled superblock with another geometry.
"""

from __future__ import annotations

import collections
import itertools
import operator
import struct
from collections.abc import Iterator

from harness.check.extfs import (
    COMPAT_FAST_COMMIT,
    COMPAT_HAS_JOURNAL,
    COMPAT_ORPHAN_FILE,
    INCOMPAT_JOURNAL_DEV,
    INCOMPAT_META_BG,
    INCOMPAT_MMP,
    INCOMPAT_RECOVER,
    JOURNAL_INO,
    RO_COMPAT_BIGALLOC,
    RO_COMPAT_QUOTA,
    SB_OFFSET,
    Image,
    Journal,
    Super,
    Unsure,
    inode_table,
)
from harness.replay.changes import Changes

JBD2_MAGIC = 0xC03B3998
DESCRIPTOR, COMMIT, SB_V1, SB_V2, REVOKE = 1, 2, 3, 4, 5
FLAG_SAME_UUID, FLAG_LAST_TAG = 0x2, 0x8
# jbd2 incompat: revoke, 64bit, async_commit, csum v2, csum v3 (fast_commit 0x20 is not)
J_INCOMPAT_KNOWN = 0x1 | 0x2 | 0x4 | 0x8 | 0x10
J_INCOMPAT_64BIT, J_INCOMPAT_CSUM_V2, J_INCOMPAT_CSUM_V3 = 0x2, 0x8, 0x10
J_COMPAT_CHECKSUM = 0x1

_HEADER = struct.Struct(">III")  # a journal block's magic, block type, sequence


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
    img = Image(fd)
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


def _base(img: Image) -> tuple[Super, int, set[int]]:
    """The superblock, after refusing what is not modelled, group 0's inode table, and
    the blocks the replay writes whatever the journal holds."""
    sb = Super(img.read(SB_OFFSET, 1024))
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
    itable = inode_table(img, sb)
    return sb, itable, _metadata_blocks(sb, itable)


def _metadata_blocks(sb: Super, itable: int) -> set[int]:
    """Superblocks and descriptors (primary and backups), reserved inodes' table blocks."""
    out: set[int] = {SB_OFFSET // sb.bs}
    for g in range(sb.groups):
        if sb.has_super(g):
            first = sb.first_data + g * sb.bpg
            out.update(range(first, first + 1 + sb.desc_blocks))
    last = max(sb.first_ino - 1, JOURNAL_INO)
    out.update(range(itable, itable + ((last * sb.inode_size) - 1) // sb.bs + 1))
    return out


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

    def __init__(self, sb: Super, base: set[int]) -> None:
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
        self.j: Journal | None = None

    @classmethod
    def read(cls, img: Image) -> _Memo:
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

    def _open_journal(self, img: Image) -> None:
        sb = self.sb
        j = Journal(img, sb)
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

    def _walk(self, img: Image, pos: int, seq: int) -> None:
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
                    copy = Super(img.read(copy_at * bs, bs)[SB_OFFSET % bs :][:1024])
                    if copy.orphans():
                        self.orphan_steps.append(len(self.steps) - 1)
                    if copy.key() != sb.key():
                        raise Unsure("a journaled superblock with another geometry")
                pos = self._wrap(pos + len(targets))
            elif btype != REVOKE:
                raise Unsure(f"journal block type {btype}")
        raise Unsure("the journal walk does not end")

    def again(self, img: Image, since: list[tuple[int, int]]) -> str:
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

    def _setup_stands(self, img: Image, hit: set[int], sb_block: int, gd_block: int) -> bool:
        """The superblock or group 0's descriptor was written (jbd2 checkpoints them
        often): the walk stands if what it took from them did not change."""
        try:
            if sb_block in hit:
                sb = Super(img.read(SB_OFFSET, 1024))
                if sb.setup_key() != self.sb.setup_key():
                    return False
                self.sb = sb  # its orphans may have changed
            return gd_block not in hit or inode_table(img, self.sb) == self.itable
        except Unsure:
            return False

    def _tail_moved(self, img: Image) -> bool:
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
