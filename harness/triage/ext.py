"""What a block of an ext2/3/4 image holds, read with e2fsprogs on the image file.

``dumpe2fs`` gives the fixed layout (superblocks, group descriptors, bitmaps, inode
tables); ``debugfs -c`` (catastrophic mode: read-only, no bitmaps needed, so a damaged
crash image still opens) gives the journal's extents and live transactions (``logdump``),
the inode owning a block (``icheck``), its names (``ncheck``) and extents (``stat``).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import proc
from harness.errors import HarnessError

ROOT = 2
JOURNAL_INODE = 8
# Inodes with a role but no name for ncheck (the root and lost+found have names).
RESERVED = {1: "bad blocks inode", 7: "resize inode", 8: "journal", 9: "exclude inode"}
_GROUP = re.compile(r"^Group (\d+):")
_REGIONS = (
    (re.compile(r"(?:Primary|Backup) superblock at (\d+)()"), "superblock"),
    (re.compile(r"Group descriptors at (\d+)-(\d+)"), "group descriptors"),
    (re.compile(r"Reserved GDT blocks at (\d+)-(\d+)"), "reserved GDT blocks"),
    (re.compile(r"Block bitmap at (\d+)()"), "block bitmap"),
    (re.compile(r"Inode bitmap at (\d+)()"), "inode bitmap"),
    (re.compile(r"Inode table at (\d+)-(\d+)"), "inode table"),
)
_EXTENT = re.compile(r"\((ETB\d+|\d+)(?:-(\d+))?\):(\d+)(?:-(\d+))?")


@dataclass(frozen=True, order=True)
class Region:
    start: int
    end: int  # inclusive
    kind: str
    group: int


@dataclass(frozen=True)
class Layout:
    """The fixed places of one image: block size, inode geometry, every group's
    metadata blocks (sorted), and the journal's extents (logical, physical, count)."""

    block_size: int
    inodes_per_group: int
    inode_size: int
    regions: tuple[Region, ...]
    journal: tuple[tuple[int, int, int], ...] = ()

    def region(self, block: int) -> Region | None:
        i = bisect.bisect_right([r.start for r in self.regions], block) - 1
        return self.regions[i] if i >= 0 and self.regions[i].end >= block else None

    def inodes_in(self, r: Region, block: int) -> range:
        """The inode numbers whose records lie in ``block`` of inode table ``r``."""
        per = self.block_size // self.inode_size
        first = r.group * self.inodes_per_group + (block - r.start) * per + 1
        return range(first, first + per)

    def journal_block(self, block: int) -> int | None:
        for logical, physical, count in self.journal:
            if physical <= block < physical + count:
                return logical + block - physical
        return None


@dataclass(frozen=True)
class JournalBlock:
    transaction: int
    role: str  # descriptor, commit, revoke, copy
    fs_block: int | None = None  # the filesystem block a copy is of


@dataclass
class Inode:
    number: int
    kind: str = ""  # debugfs's Type: regular, directory, symlink ...
    links: int = 0
    paths: list[str] = field(default_factory=list)
    extents: list[tuple[int, int, int]] = field(default_factory=list)  # logical, phys, count
    tree: set[int] = field(default_factory=set)  # extent-tree blocks

    @property
    def name(self) -> str:
        if self.number == ROOT:
            return "/"  # ncheck names entries in directories; the root is in none
        return " = ".join(self.paths) or RESERVED.get(self.number, f"inode {self.number}")

    def offset(self, block: int, block_size: int) -> int | None:
        for logical, physical, count in self.extents:
            if physical <= block < physical + count:
                return (logical + block - physical) * block_size
        return None


def debugfs(image: Path, commands: Sequence[str]) -> dict[str, str]:
    """Each command's output, from one read-only ``debugfs -c`` session on ``image``.

    :raise HarnessError: debugfs cannot open the image.
    """
    r = proc.run(["debugfs", "-c", "-f", "-", image], input="\n".join(commands) + "\n", check=False)
    out: dict[str, list[str]] = {}
    current: list[str] = []
    for line in r.stdout.splitlines():
        if line.startswith("debugfs: "):
            current = out.setdefault(line.removeprefix("debugfs: ").strip(), [])
        else:
            current.append(line)
    if not out and commands:
        raise HarnessError(f"debugfs could not read {image}", detail=r.stderr[-1500:])
    return {k: "\n".join(v) for k, v in out.items()}


def layout(image: Path) -> Layout:
    """The image's layout (``dumpe2fs``, and the journal inode's extents).

    :raise CommandFailed: dumpe2fs cannot read it (not ext2/3/4, or its superblock lost).
    """
    text = proc.run(["dumpe2fs", image]).stdout
    head = dict(
        (k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in text.splitlines())
    )
    regions: list[Region] = []
    group = 0
    for line in text.splitlines():
        if m := _GROUP.match(line):
            group = int(m.group(1))
        for rx, kind in _REGIONS:
            for m in rx.finditer(line):
                start = int(m.group(1))
                regions.append(Region(start, int(m.group(2) or start), kind, group))
    journal: tuple[tuple[int, int, int], ...] = ()
    if "Journal inode" in head:
        stat = debugfs(image, [f"stat <{JOURNAL_INODE}>"])
        journal = tuple(_extents(next(iter(stat.values()), ""))[0])
    return Layout(
        int(head["Block size"]),
        int(head["Inodes per group"]),
        int(head.get("Inode size", "128")),
        tuple(sorted(regions)),
        journal,
    )


def _extents(stat: str) -> tuple[list[tuple[int, int, int]], set[int]]:
    """The data extents and extent-tree blocks of ``stat``'s EXTENTS (or BLOCKS) list."""
    extents: list[tuple[int, int, int]] = []
    tree: set[int] = set()
    _, _, listing = stat.partition("EXTENTS:")
    if not listing:
        _, _, listing = stat.partition("BLOCKS:")
    for m in _EXTENT.finditer(listing):
        first, _, pfirst, plast = m.groups()
        if first.startswith("ETB"):
            tree.add(int(pfirst))
            continue
        count = int(plast or pfirst) - int(pfirst) + 1
        extents.append((int(first), int(pfirst), count))
    return extents, tree


def transactions(image: Path) -> dict[int, JournalBlock]:
    """The journal's live blocks (those recovery would read), by journal block number,
    from ``logdump -a``: what a crash left to replay."""
    text = next(iter(debugfs(image, ["logdump -a"]).values()), "")
    found: dict[int, JournalBlock] = {}
    seq = 0
    for line in text.splitlines():
        if m := re.match(
            r"Found expected sequence (\d+), type \d+ \((\w+)[^)]*\) at block (\d+)", line
        ):
            seq = int(m.group(1))
            found[int(m.group(3))] = JournalBlock(seq, m.group(2))
        elif m := re.match(r"\s+FS block (\d+) logged at journal block (\d+)", line):
            found[int(m.group(2))] = JournalBlock(seq, "copy", int(m.group(1)))
    return found


def owners(image: Path, blocks: Iterable[int]) -> dict[int, int]:
    """The inode owning each of ``blocks`` in ``image`` (``icheck``); free ones are absent."""
    todo = sorted(set(blocks))
    if not todo:
        return {}
    text = next(iter(debugfs(image, ["icheck " + " ".join(map(str, todo))]).values()), "")
    found: dict[int, int] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 2 and parts[0].isdigit() and parts[1].strip().isdigit():
            found[int(parts[0])] = int(parts[1])
    return found


def inodes(image: Path, numbers: Iterable[int]) -> dict[int, Inode]:
    """Names, type and extents of each inode (``ncheck`` and ``stat``, one session)."""
    todo = sorted(set(numbers))
    if not todo:
        return {}
    ncheck = "ncheck " + " ".join(map(str, todo))
    out = debugfs(image, [ncheck, *(f"stat <{n}>" for n in todo)])
    found = {n: Inode(n) for n in todo}
    for line in out.get(ncheck, "").splitlines():
        num, _, path = line.partition("\t")
        if num.strip().isdigit() and int(num) in found:
            # debugfs prints names under the root as "//f7".
            found[int(num)].paths.append("/" + path.lstrip("/"))
    for n in todo:
        stat = out.get(f"stat <{n}>", "")
        if m := re.search(r"Type: (\w+)", stat):
            found[n].kind = m.group(1)
        if m := re.search(r"Links: (\d+)", stat):
            found[n].links = int(m.group(1))
        found[n].extents, found[n].tree = _extents(stat)
    return found


def file_blocks(image: Path, names: Iterable[str]) -> dict[str, set[int]]:
    """The data blocks of each file named (a path from the root), from ``stat``; a name
    the image does not have is absent."""
    todo = sorted(set(names))
    if not todo:
        return {}
    out = debugfs(image, [f"stat /{n.lstrip('/')}" for n in todo])
    found: dict[str, set[int]] = {}
    for n in todo:
        text = out.get(f"stat /{n.lstrip('/')}", "")
        if "Inode:" not in text:
            continue
        extents, _ = _extents(text)
        found[n] = {p + k for _, p, count in extents for k in range(count)}
    return found
