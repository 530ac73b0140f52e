"""What a block of a btrfs image holds, read with ``btrfs inspect-internal`` on the image
file.

A physical byte is mapped to a logical address through the chunk tree (``dump-tree -t
chunk``). In a metadata or system chunk it is part of a tree block, whose header (owner
tree, level, generation) is read from the bytes the *write* put there: btrfs is
copy-on-write, so a block freed and reused is named by what this write holds. The log
tree is where fsync bugs live, so its blocks are named as such. In a data chunk, the
file and offset come from the file extents of the fs tree and the log tree
(``dump-tree -t fs``, ``-t tree_log``) of the owner images: a crash state's fsync'd data is
referenced only by its unreplayed log tree, which the host never replays.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from harness import proc
from harness.errors import HarnessError
from harness.record.logwrites import Entry
from harness.triage.what import Explained, What

SUPERS = (64 << 10, 64 << 20, 256 << 30)  # the superblock and its mirrors, physical bytes
SUPER_SIZE = 4096
RESERVED = 1 << 20  # the device's first MiB: never in a chunk
HEADER = 101  # bytes of a tree block header up to its level
FS_TREE_DIR = 256  # the fs tree's root directory
_TREES = {
    1: "root tree",
    2: "extent tree",
    3: "chunk tree",
    4: "device tree",
    5: "fs tree",
    7: "csum tree",
    8: "quota tree",
    9: "uuid tree",
    10: "free space tree",
    11: "block group tree",
    -6: "log tree",
    -7: "log fixup tree",
    -8: "relocation tree",
    -9: "data relocation tree",
}
_CHUNK = re.compile(r"key \(FIRST_CHUNK_TREE CHUNK_ITEM (\d+)\)")
_LENGTH = re.compile(r"^\s+length (\d+) owner \d+ stripe_len \d+ type (\S+)")
_STRIPE = re.compile(r"^\s+stripe (\d+) devid \d+ offset (\d+)")
_ITEM = re.compile(r"^\s+item \d+ key \((\d+) (\w+) (\d+)\)")
_REF = re.compile(r"^\s+index \d+ namelen \d+ name: (.*)$")
_DISK = re.compile(r"^\s+extent data disk byte (\d+) nr (\d+)")
_OFFSET = re.compile(r"^\s+extent data offset (\d+) nr (\d+)")
_LOG_ROOT = re.compile(r"key \(TREE_LOG ROOT_ITEM \d+\).*\n.* root_dirid \d+ bytenr (\d+)")


@dataclass(frozen=True)
class Chunk:
    logical: int
    length: int
    kind: str  # DATA|single, METADATA|DUP, SYSTEM|DUP ...
    stripes: tuple[int, ...]  # physical offsets of its copies on the (one) device


@dataclass
class Files:
    """An image's file extents ((disk start, length, inode, file offset) by logical
    address) and names ((parent, name) by inode), from its fs tree and its log tree."""

    extents: list[tuple[int, int, int, int, str]] = field(default_factory=list)
    refs: dict[int, list[tuple[int, str]]] = field(default_factory=dict)

    def path(self, ino: int, depth: int = 0) -> str:
        if ino == FS_TREE_DIR:
            return "/"
        if ino not in self.refs or depth > 64:
            return f"inode {ino}"
        return " = ".join(
            f"{self.path(parent, depth + 1).rstrip('/')}/{name}" for parent, name in self.refs[ino]
        )

    def owner(self, logical: int) -> tuple[int, int, str] | None:
        """(inode, byte offset in the file, tree) of the file extent holding ``logical``."""
        for start, length, ino, offset, tree in self.extents:
            if start <= logical < start + length:
                return ino, offset + logical - start, tree
        return None


def inspect(image: Path, args: Sequence[str]) -> str:
    return proc.run(["btrfs", "inspect-internal", *args, image], check=False).stdout


def sector_size(image: Path) -> tuple[int, int]:
    """(sectorsize, nodesize) from the superblock.

    :raise HarnessError: ``dump-super`` finds no btrfs superblock in ``image``.
    """
    out = inspect(image, ["dump-super"])
    sb = dict(ln.split(None, 1) for ln in out.splitlines() if len(ln.split(None, 1)) == 2)
    try:
        return int(sb["sectorsize"]), int(sb["nodesize"])
    except (KeyError, ValueError):
        raise HarnessError(f"btrfs dump-super found no superblock in {image}", detail=out) from None


def chunks(image: Path) -> list[Chunk]:
    """The chunk tree's chunks (empty if ``image``'s chunk tree cannot be read)."""
    out: list[Chunk] = []
    logical, length, kind, stripes = 0, 0, "", list[int]()
    for line in inspect(image, ["dump-tree", "--noscan", "-t", "chunk"]).splitlines():
        if m := _CHUNK.search(line):
            if kind:
                out.append(Chunk(logical, length, kind, tuple(stripes)))
            logical, kind, stripes = int(m.group(1)), "", []
        elif m := _LENGTH.match(line):
            length, kind = int(m.group(1)), m.group(2)
        elif m := _STRIPE.match(line):
            stripes.append(int(m.group(2)))
    if kind:
        out.append(Chunk(logical, length, kind, tuple(stripes)))
    return out


def files(image: Path) -> Files:
    """The file extents and names of ``image``'s fs tree, then of its log trees (what an
    fsync logged since the last commit; their extents are the newer, so asked first)."""
    found = Files()
    _items(inspect(image, ["dump-tree", "--noscan", "-t", "fs"]), found, "")
    # The log root tree lists each subvolume's log tree; dump-tree does not follow them.
    roots = inspect(image, ["dump-tree", "--noscan", "-t", "tree_log"])
    for bytenr in _LOG_ROOT.findall(roots):
        log = inspect(image, ["dump-tree", "--noscan", "--follow", "-b", bytenr])
        _items(log, found, "log tree")
    return found


def _items(text: str, found: Files, label: str) -> None:
    """Add the INODE_REF names and EXTENT_DATA extents of a ``dump-tree`` listing."""
    key: tuple[int, str, int] = (0, "", 0)
    disk = 0
    for line in text.splitlines():
        if m := _ITEM.match(line):
            key, disk = (int(m.group(1)), m.group(2), int(m.group(3))), 0
        elif key[1] == "INODE_REF" and (m := _REF.match(line)):
            refs = found.refs.setdefault(key[0], [])
            if (key[2], m.group(1)) not in refs:
                refs.append((key[2], m.group(1)))
        elif key[1] == "EXTENT_DATA" and (m := _DISK.match(line)):
            disk = int(m.group(1))  # 0: a hole
        elif key[1] == "EXTENT_DATA" and disk and (m := _OFFSET.match(line)):
            extent = (disk + int(m.group(1)), int(m.group(2)), key[0], key[2], label)
            found.extents.insert(0 if label else len(found.extents), extent)
            disk = 0


def explain(
    image: Path,
    writes: Sequence[Entry],
    images: Sequence[tuple[Path, str]],
    content: Callable[[Entry], bytes],
) -> tuple[int, list[Explained]]:
    """Each of ``writes`` block by block (sectorsize blocks): the chunk map of ``image``
    (else of an owner image), the written bytes, and data ownership asked of ``images``
    in order. Returns the block size and the explanations."""
    ss, nodesize = sector_size(image)
    found = next((c for img in (image, *(i for i, _ in images)) if (c := chunks(img))), [])
    with image.open("rb") as f:
        at = _Place(found, nodesize, [(files(img), source) for img, source in images], f)
        out = []
        for e in writes:
            data = content(e)
            blocks = []
            for b in range(e.offset // ss, (e.offset + e.length - 1) // ss + 1):
                blocks.append((b, at.what(b * ss, e, data)))
            out.append(Explained(e, tuple(blocks)))
    return ss, out


@dataclass
class _Place:
    """What lies at a physical byte: the chunks, the owners' files, and the tree-block
    headers seen so far (a tree block written in pieces -- mkfs writes 4 KiB at a time --
    has its header in the first piece only)."""

    chunks: Sequence[Chunk]
    nodesize: int
    owners: Sequence[tuple[Files, str]]
    image: BinaryIO
    headers: dict[int, tuple[bytes, int]] = field(default_factory=dict)  # at: (header, entry)

    def what(self, phys: int, e: Entry, data: bytes) -> What:
        for k, at in enumerate(SUPERS):
            if at <= phys < at + SUPER_SIZE:
                return _super(k, at, e, data)
        for c in self.chunks:
            for copy, start in enumerate(c.stripes):
                if start <= phys < start + c.length:
                    logical = c.logical + phys - start
                    dup = f", copy {copy + 1} of {len(c.stripes)}" if len(c.stripes) > 1 else ""
                    if "METADATA" in c.kind or "SYSTEM" in c.kind:
                        node = logical - (logical - c.logical) % self.nodesize
                        head, note = self.header(phys - (logical - node), e, data)
                        # Mixed block groups (mkfs --mixed) hold both: a header says which.
                        if "DATA" not in c.kind or _bytenr(head) == node:
                            return _tree_block(node, head, dup, note)
                    return _data(logical, self.owners)
        if phys < RESERVED:
            return What("reserved", detail="the device's first MiB, in no chunk")
        return What("unallocated", detail="in no chunk of the chunk tree")

    def header(self, at: int, e: Entry, data: bytes) -> tuple[bytes, str]:
        """The header of the tree block at physical ``at``: from this write, else from
        an earlier write explained, else as the image holds it (a later tree block may
        have taken the place since: its generation says so)."""
        if e.offset <= at and len(head := data[at - e.offset : at - e.offset + HEADER]) == HEADER:
            self.headers[at] = (head, e.index)
            return head, ""
        if at in self.headers:
            head, index = self.headers[at]
            return head, f" (header in entry {index})"
        self.image.seek(at)
        return self.image.read(HEADER), " (header not in this write: the image's)"


def _super(k: int, at: int, e: Entry, data: bytes) -> What:
    which = "primary" if k == 0 else f"mirror {k}"
    head = data[at - e.offset : at - e.offset + 104] if e.offset <= at else b""
    if len(head) < 104:
        return What("superblock", detail=which)
    generation, _, _, log_root = struct.unpack_from("<QQQQ", head, 72)
    log = f"log tree at {log_root}" if log_root else "no log tree"
    return What("superblock", detail=f"{which}, generation {generation}, {log}")


def _tree_block(node: int, head: bytes, dup: str, note: str = "") -> What:
    """A block of the tree block at logical ``node`` whose header is ``head``."""
    if _bytenr(head) != node:
        return What("tree block", detail=f"logical {node}: no tree block header there{dup}")
    generation, owner, items = struct.unpack_from("<QqI", head, 80)
    level = head[100]
    tree = _TREES.get(owner, f"subvolume {owner} tree" if owner >= 256 else f"tree {owner}")
    shape = "leaf" if level == 0 else "node"
    detail = f"{shape}, level {level}, generation {generation}, {items} items, logical {node}"
    return What("tree block", tree, detail=detail + dup + note)


def _bytenr(head: bytes) -> int | None:
    """The logical address a tree block header says it is at."""
    return struct.unpack_from("<Q", head, 48)[0] if len(head) >= HEADER else None


def _data(logical: int, owners: Sequence[tuple[Files, str]]) -> What:
    for f, source in owners:
        if hit := f.owner(logical):
            ino, offset, tree = hit
            where = ", ".join(s for s in (f"in the {tree}" if tree else "", source) if s)
            return What("file data", f.path(ino), offset, source=where)
    return What("free", detail="no file extent refers to it in the state or at the log's end")
