"""Blocks explained: what each write of a crash state's log is on the filesystem.

Given a state's image and log entries, each block an entry writes is named: superblock,
group descriptors, a bitmap, an inode table (which inodes, by name), a journal block
(which transaction, and for a copy, what the copied block is), a directory or file
block (which one, at what offset), an extent-tree block. Read with the filesystem's
userspace tools on image files only (``ext.py``, ``xfs.py``, ``btrfs.py``); the host
kernel never sees an image. XFS and btrfs metadata blocks carry a magic number or a
header, read from the bytes the write itself holds (``content``).

Ownership (which file a block belongs to) is asked of ``owners``, images in order: the
state's image after userspace journal recovery first, then the log's final image. A
block written before the transaction that allocates it committed has no owner in the
state yet; the final image usually knows it, and the explanation says where it came
from, since a block freed and reused later would be named by its last owner.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.record.logwrites import FLUSH, FUA, METADATA, Entry
from harness.triage import btrfs, ext, xfs
from harness.triage.what import Explained, What

EXT = ("ext2", "ext3", "ext4")
_FLAGS = ((FLUSH, "FLUSH"), (FUA, "FUA"), (METADATA, "META"))
# Explainers reading the written bytes too: (image, writes, owner images, content).
_OTHERS = {"xfs": xfs.explain, "btrfs": btrfs.explain}

__all__ = ["Explained", "Explanation", "What", "describe", "explain", "flags_text", "runs"]


@dataclass(frozen=True)
class Explanation:
    block_size: int  # the filesystem's; sectors (512) where it is not explained
    writes: tuple[Explained, ...]
    unit: str = "block"

    def lines(self) -> list[str]:
        """One line per write, one indented line per run of blocks that are one thing."""
        out = []
        for x in self.writes:
            e = x.entry
            out.append(f"entry {e.index}: sectors {e.sector}+{e.nr_sectors} [{flags_text(e)}]")
            for first, last, w in runs(x.blocks, self.block_size):
                many = f"{self.unit}s {first}-{last}"
                where = f"{self.unit} {first}" if first == last else many
                out.append(f"  {where}: {describe(w)}")
        return out


def flags_text(e: Entry) -> str:
    return "|".join(name for bit, name in _FLAGS if e.flags & bit) or "-"


def explain(
    fs_type: str,
    image: Path,
    entries: Sequence[Entry],
    owners: Sequence[tuple[Path, str]],
    content: Callable[[Entry], bytes],
) -> Explanation:
    """Each write of ``entries`` with what its blocks are in ``image``; ``owners``: the
    images asked which file owns a block, in order, each with what to call it ("" for
    the state's own); ``content``: the bytes an entry writes (XFS and btrfs need them)."""
    writes = [e for e in entries if e.is_write]
    if fs_type in _OTHERS:
        bs, explained = _OTHERS[fs_type](image, writes, owners, content)
        return Explanation(bs, tuple(explained))
    if fs_type not in EXT:
        unknown = What(f"not explained for {fs_type} yet")
        every = tuple(
            Explained(e, tuple((s, unknown) for s in range(e.sector, e.sector + e.nr_sectors)))
            for e in writes
        )
        return Explanation(512, every, unit="sector")
    lay = ext.layout(image)
    bs = lay.block_size
    numbers = {e.index: range(e.offset // bs, (e.offset + e.length - 1) // bs + 1) for e in writes}
    live = ext.transactions(image) if lay.journal else {}
    # The filesystem blocks to name: the written ones, and those journal copies are of.
    asked = {b for r in numbers.values() for b in r}
    asked |= {j.fs_block for j in live.values() if j.fs_block is not None}
    names = _Names(lay, owners, asked)
    out = []
    for e in writes:
        blocks = []
        for b in numbers[e.index]:
            j = lay.journal_block(b)
            blocks.append((b, names.what(b) if j is None else _journal(j, live.get(j), names)))
        out.append(Explained(e, tuple(blocks)))
    return Explanation(bs, tuple(out))


def _journal(j: int, jb: ext.JournalBlock | None, names: _Names) -> What:
    if j == 0:
        return What("journal", "journal superblock")
    if jb is None:
        return What("journal", f"journal block {j}", detail="no live transaction holds it")
    subject = f"transaction {jb.transaction}"
    if jb.role != "copy" or jb.fs_block is None:
        return What("journal", subject, detail=f"{jb.role} block (journal block {j})")
    of = names.what(jb.fs_block)
    return What("journal", subject, detail=f"copy of fs block {jb.fs_block}: {describe(of)}")


class _Names:
    """Layout and ownership of the blocks asked about, resolved in one pass per image."""

    def __init__(self, lay: ext.Layout, owners: Sequence[tuple[Path, str]], asked: set[int]):
        self.lay = lay
        self.owner: dict[int, tuple[ext.Inode, str]] = {}
        table = {b: r for b in asked if (r := lay.region(b)) and r.kind == "inode table"}
        todo = {b for b in asked if lay.region(b) is None and lay.journal_block(b) is None}
        self.table_inodes: dict[int, ext.Inode] = {}
        for image, source in owners:
            found = ext.owners(image, todo)
            wanted = set(found.values())
            if not self.table_inodes:
                wanted |= {n for b, r in table.items() for n in lay.inodes_in(r, b)}
            info = ext.inodes(image, wanted)
            if not self.table_inodes:
                # In use: named, or a reserved inode with a role (the journal).
                self.table_inodes = {n: i for n, i in info.items() if i.paths or i.links}
            for b, n in found.items():
                self.owner[b] = (info[n], source)
            todo -= set(found)

    def what(self, b: int) -> What:
        r = self.lay.region(b)
        if r is not None:
            subject = f"group {r.group}"
            if r.kind != "inode table":
                return What(r.kind, subject)
            inos = self.lay.inodes_in(r, b)
            used = [self.table_inodes[n] for n in inos if n in self.table_inodes]
            named = ", ".join(f"<{i.number}> {i.name}" for i in used) or "none in use"
            return What(r.kind, subject, detail=f"inodes {inos[0]}-{inos[-1]}: {named}")
        if b not in self.owner:
            return What("free", detail="no inode owns it in the state or at the log's end")
        inode, source = self.owner[b]
        if b in inode.tree:
            return What("extent tree", inode.name, source=source)
        kind = "directory" if inode.kind == "directory" else "file data"
        if inode.number in ext.RESERVED:
            kind = ext.RESERVED[inode.number]
        return What(kind, inode.name, inode.offset(b, self.lay.block_size), source=source)


def describe(w: What) -> str:
    """One line for one block (or a run of them, given its first offset)."""
    text = w.kind + (f" of {w.subject}" if w.subject else "")
    if w.offset is not None:
        text += f" at byte {w.offset}"
    if w.detail:
        text += f": {w.detail}"
    return text + (f" [owner {w.source}]" if w.source else "")


def runs(blocks: Sequence[tuple[int, What]], block_size: int) -> list[tuple[int, int, What]]:
    """Consecutive blocks that are one thing (same kind, subject, detail; offsets
    contiguous) merged: (first block, last block, what the first is)."""
    out: list[tuple[int, int, What]] = []
    for b, w in blocks:
        if out:
            first, last, prev = out[-1]
            step = (b - first) * block_size
            same = (prev.kind, prev.subject, prev.detail, prev.source) == (
                w.kind,
                w.subject,
                w.detail,
                w.source,
            )
            contiguous = (prev.offset is None and w.offset is None) or (
                prev.offset is not None and w.offset == prev.offset + step
            )
            if b == last + 1 and same and contiguous:
                out[-1] = (first, b, prev)
                continue
        out.append((b, b, w))
    return out
