"""What a block of an XFS image holds, read with ``xfs_db -r -f`` on the image file.

The superblock gives the geometry: the allocation groups (AGs) and where the internal
log lies. The first sectors of each AG are its headers (superblock copy, AGF, AGI,
AGFL). Any other metadata block says what it is by the magic number at its start, read
from the bytes the *write* put there, so a block freed and reused is named by what this
write holds. Which file owns a block, and at what offset, comes from ``blockget -n`` /
``blockuse -n`` / ``ncheck`` / ``bmap`` on the owner images. ``blockget`` refuses an image
whose log is dirty (xfs_db cannot replay a log, and the host kernel never mounts an
image), so for a crash state ownership usually comes from the log's end image.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness import proc
from harness.errors import HarnessError
from harness.record.logwrites import SECTOR, Entry
from harness.triage.what import Explained, What

ROOT_NAME = "/"
_HEADERS = ("superblock", "AGF", "AGI", "AGFL")  # one sector each, in this order
_LOG_MAGIC = 0xFEEDBABE
# v5 magics first, then v4's; the kinds a report reader knows them by.
_MAGIC = {
    b"XFSB": "superblock",
    b"XAGF": "AGF",
    b"XAGI": "AGI",
    b"XAGL": "AGFL",
    b"AB3B": "free-space btree by block",
    b"AB3C": "free-space btree by size",
    b"IAB3": "inode btree",
    b"FIB3": "free-inode btree",
    b"RMB3": "reverse-map btree",
    b"R3FC": "refcount btree",
    b"BMA3": "extent btree",
    b"XDB3": "directory",
    b"XDD3": "directory",
    b"XDF3": "directory free index",
    b"XSLM": "symlink",
    b"ABTB": "free-space btree by block",
    b"ABTC": "free-space btree by size",
    b"IABT": "inode btree",
    b"FIBT": "free-inode btree",
    b"BMAP": "extent btree",
    b"XD2B": "directory",
    b"XD2D": "directory",
    b"XD2F": "directory free index",
}
_DA_MAGIC = {  # 16-bit, in the da block header at byte 8 (v5, then v4)
    0x3DF1: "directory leaf",
    0x3DFF: "directory leaf",
    0x3EBE: "directory node",
    0x3BEE: "attribute leaf",
    0xD2F1: "directory leaf",
    0xD2FF: "directory leaf",
    0xFEBE: "directory node",
    0xFBEE: "attribute leaf",
}
_BTREES = {k for k in _MAGIC.values() if k.endswith("btree") or "btree by" in k}
# blockget's names for what a block is used as, for blocks without a magic number.
_USES = {
    "data": "file data",
    "rldata": "file data",
    "cowdata": "file data",
    "dir": "directory",
    "attr": "attributes",
    "symlink": "symlink",
    "free1": "free",
    "free2": "free",
    "freelist": "free list",
    "inode": "inode cluster",
    "log": "log",
    "sb": "AG headers",
    "agf": "AGF",
    "agi": "AGI",
    "agfl": "AGFL",
    "btbno": "free-space btree by block",
    "btcnt": "free-space btree by size",
    "btino": "inode btree",
    "btfino": "free-inode btree",
    "btrmap": "reverse-map btree",
    "btrefcnt": "refcount btree",
    "btbmapa": "extent btree",
    "btbmapd": "extent btree",
}
_USE = re.compile(r"^block \d+ \((\d+)/(\d+)\) type (\w+)(?: inode (\d+))?")
_BMAP = re.compile(r"^\w+ offset (\d+) startblock \d+ \((\d+)/(\d+)\) count (\d+)")


@dataclass(frozen=True)
class Geometry:
    block_size: int
    sect_size: int
    ag_blocks: int
    agblklog: int
    inopblog: int
    inode_size: int
    log_start: int  # linear block number of the internal log (0: external)
    log_blocks: int
    root_ino: int
    roles: tuple[tuple[int, str], ...] = ()  # inodes with a role and no name

    def linear(self, agno: int, agbno: int) -> int:
        return agno * self.ag_blocks + agbno

    def in_log(self, block: int) -> bool:
        """``block`` is in the internal log (an external log is on another device)."""
        return 0 < self.log_start <= block < self.log_start + self.log_blocks

    def inodes_in(self, block: int) -> range:
        """The inode numbers whose records lie in linear ``block``."""
        agno, agbno = divmod(block, self.ag_blocks)
        first = (agno << (self.agblklog + self.inopblog)) | (agbno << self.inopblog)
        return range(first, first + self.block_size // self.inode_size)


@dataclass
class Owners:
    """What one image's ``blockget`` says of the blocks asked: (use, inode) by linear
    block, every inode's names (``ncheck``), and the owning inodes' extents."""

    uses: dict[int, tuple[str, int | None]] = field(default_factory=dict)
    names: dict[int, list[str]] = field(default_factory=dict)
    extents: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)

    def name(self, ino: int) -> str:
        return " = ".join(self.names.get(ino, [])) or f"inode {ino}"

    def offset(self, ino: int, block: int, block_size: int) -> int | None:
        for logical, physical, count in self.extents.get(ino, []):
            if physical <= block < physical + count:
                return (logical + block - physical) * block_size
        return None


def xfs_db(image: Path, commands: Iterable[str]) -> str:
    """The output of one read-only ``xfs_db`` session running ``commands`` on ``image``."""
    argv: list[str | Path] = ["xfs_db", "-r", "-f"]
    for c in commands:
        argv += ["-c", c]
    return proc.run([*argv, image], check=False).stdout


def geometry(image: Path) -> Geometry:
    """The superblock's geometry.

    :raise HarnessError: xfs_db cannot read a superblock in ``image``.
    """
    keys = "blocksize sectsize agblocks agblklog inopblog inodesize logstart logblocks rootino"
    roles = {"rbmino": "realtime bitmap", "rsumino": "realtime summary"}
    out = xfs_db(image, ["sb 0", f"print {keys} {' '.join(roles)}"])
    sb = {k.strip(): v.strip() for k, _, v in (ln.partition("=") for ln in out.splitlines())}
    try:
        v = {k: int(sb[k]) for k in keys.split()}
    except (KeyError, ValueError):
        raise HarnessError(f"xfs_db could not read the superblock of {image}", detail=out) from None
    agno, agbno = divmod(v["logstart"], 1 << v["agblklog"])
    return Geometry(
        v["blocksize"],
        v["sectsize"],
        v["agblocks"],
        v["agblklog"],
        v["inopblog"],
        v["inodesize"],
        agno * v["agblocks"] + agbno if v["logstart"] else 0,
        v["logblocks"],
        v["rootino"],
        tuple((int(sb[k]), role) for k, role in roles.items() if sb.get(k, "null").isdigit()),
    )


def owners(image: Path, geo: Geometry, blocks: Iterable[int]) -> Owners:
    """What ``blockget`` says of ``blocks`` (linear numbers) in ``image``; empty where it
    refuses the image (a dirty log, a damaged AG)."""
    # ncheck names directory entries: not the root, nor the realtime inodes.
    found = Owners(names={geo.root_ino: [ROOT_NAME], **{n: [r] for n, r in geo.roles}})
    todo = sorted(set(blocks))
    commands = ["blockget -n"]
    for first, count in _spans(todo, geo.ag_blocks):
        agno, agbno = divmod(first, geo.ag_blocks)
        commands += [f"fsblock {(agno << geo.agblklog) | agbno}", f"blockuse -n -c {count}"]
    out = xfs_db(image, [*commands, "ncheck"])
    for line in out.splitlines():
        if m := _USE.match(line):
            ino = int(m.group(4)) if m.group(4) else None
            found.uses[geo.linear(int(m.group(1)), int(m.group(2)))] = (m.group(3), ino)
        elif (parts := line.split(None, 1)) and len(parts) == 2 and parts[0].isdigit():
            # ncheck: "131 d1/f2"; a directory also as "262272 d1/.".
            path = "/" + parts[1].removesuffix("/.")
            found.names.setdefault(int(parts[0]), []).append(path.rstrip("/") or "/")
    inos = sorted({i for _, i in found.uses.values() if i is not None})
    commands = [c for i in inos for c in (f"echo @inode {i}", f"inode {i}", "bmap")]
    ino = 0
    for line in xfs_db(image, commands).splitlines() if inos else []:
        if line.startswith("@inode "):
            ino = int(line.split()[1])
        elif m := _BMAP.match(line):
            phys = geo.linear(int(m.group(2)), int(m.group(3)))
            found.extents.setdefault(ino, []).append((int(m.group(1)), phys, int(m.group(4))))
    return found


def _spans(blocks: Sequence[int], ag_blocks: int) -> list[tuple[int, int]]:
    """Sorted block numbers as (first, count) runs, a run never crossing an AG (blockuse
    counts in fsblock numbers, which jump at an AG's end)."""
    out: list[tuple[int, int]] = []
    for b in blocks:
        if out and out[-1][0] + out[-1][1] == b and b % ag_blocks:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((b, 1))
    return out


def explain(
    image: Path,
    writes: Sequence[Entry],
    images: Sequence[tuple[Path, str]],
    content: Callable[[Entry], bytes],
) -> tuple[int, list[Explained]]:
    """Each of ``writes`` block by block (``image``'s geometry, the written bytes, and
    ownership asked of ``images`` in order): the block size and the explanations."""
    geo = geometry(image)
    bs = geo.block_size
    numbers = {e.index: range(e.offset // bs, (e.offset + e.length - 1) // bs + 1) for e in writes}
    asked = {b for r in numbers.values() for b in r if not geo.in_log(b)}
    named = [(owners(img, geo, asked), source) for img, source in images]
    out = []
    for e in writes:
        data = content(e)
        blocks: list[tuple[int, What]] = []
        record: What | None = None  # the log record a log write's later blocks continue
        for b in numbers[e.index]:
            lo = max(e.offset, b * bs)
            piece = data[lo - e.offset : min(e.offset + e.length, (b + 1) * bs) - e.offset]
            if geo.in_log(b):
                record = _log(geo, lo, piece, record)
                blocks.append((b, record))
            else:
                what = _block(geo, b, lo, piece, named)
                # mkfs zeroes whole regions: say so rather than what the place will hold.
                zeros = not any(piece) and what.kind not in _HEADERS
                blocks.append((b, replace(what, detail="zeros") if zeros else what))
        out.append(Explained(e, tuple(blocks)))
    return bs, out


def _log(geo: Geometry, at: int, piece: bytes, record: What | None) -> What:
    """A block of the internal log: the record whose header it holds, or the one the
    write began; else the cycle stamped in its first word."""
    base = geo.log_start * geo.block_size
    if not any(piece):
        return What("log", detail="zeros")
    for s in range(0, len(piece) - 23, SECTOR):
        magic, cycle, _, length, lsn = struct.unpack_from(">IIIIQ", piece, s)
        if magic == _LOG_MAGIC and not length:
            # A cleared log is empty records, one a sector: one line for them all.
            return What("log", f"cycle {cycle}", detail="empty records")
        if magic == _LOG_MAGIC:
            where = f"record at log sector {lsn & 0xFFFFFFFF}"
            return What("log", f"cycle {cycle}", detail=f"{where}, {length} bytes of log items")
    if record is not None:
        return record
    cycle = struct.unpack_from(">I", piece)[0] if len(piece) >= 4 else 0
    where = f"log sector {(at - base) // SECTOR}"
    return What("log", f"cycle {cycle}", detail=f"{where}, in a record an earlier write began")


def _block(
    geo: Geometry, b: int, at: int, piece: bytes, named: Sequence[tuple[Owners, str]]
) -> What:
    agno = b // geo.ag_blocks
    ag = f"AG {agno}"
    in_ag = at - geo.linear(agno, 0) * geo.block_size
    if in_ag < len(_HEADERS) * geo.sect_size:
        first = in_ag // geo.sect_size
        last = min(len(_HEADERS), -(-(in_ag + len(piece)) // geo.sect_size))
        heads = _HEADERS[first:last]
        if len(heads) == 1:
            return What(heads[0], ag)
        return What("AG headers", ag, detail=", ".join(heads))
    kind = _magic(piece)
    if kind == "inode cluster":
        return What(kind, ag, detail=_inodes(geo, b, piece, named))
    if kind in _BTREES:
        level = struct.unpack_from(">H", piece, 4)[0]
        if piece[:4] == b"BMA3":  # long-format header: the owning inode at byte 56
            ino = struct.unpack_from(">Q", piece, 56)[0]
            return What(kind, _name(named, ino) or f"inode {ino}", detail=f"level {level}")
        return What(kind, ag, detail=f"level {level}")
    for o, source in named:
        if b in o.uses:
            use, ino = o.uses[b]
            what = kind or _USES.get(use, use)
            if ino is None:
                return What(what, ag, source=source)
            return What(what, o.name(ino), o.offset(ino, b, geo.block_size), source=source)
    if not any(o.uses for o, _ in named):
        why = "xfs_db's blockget refused the state and the log's end image"
        return What(kind or "unknown", detail=f"no owner known: {why}")
    return What(kind or "free", detail="no inode owns it in the state or at the log's end")


def _name(named: Sequence[tuple[Owners, str]], ino: int) -> str:
    return next((o.name(ino) for o, _ in named if ino in o.names), "")


def _magic(piece: bytes) -> str | None:
    """The metadata kind the written bytes announce, if any."""
    if piece[:2] == b"IN" and len(piece) > 4 and piece[4] in (1, 2, 3):
        return "inode cluster"
    if kind := _MAGIC.get(bytes(piece[:4])):
        return kind
    if len(piece) >= 10:
        return _DA_MAGIC.get(struct.unpack_from(">H", piece, 8)[0])
    return None


def _inodes(geo: Geometry, b: int, piece: bytes, named: Sequence[tuple[Owners, str]]) -> str:
    """The inodes of an inode-cluster block, and those the write leaves in use (a
    non-zero mode), by name where an owner image has one."""
    inos = geo.inodes_in(b)
    used = []
    for k, ino in enumerate(inos):
        rec = piece[k * geo.inode_size : k * geo.inode_size + 4]
        if len(rec) == 4 and rec[:2] == b"IN" and struct.unpack_from(">H", rec, 2)[0]:
            used.append(f"<{ino}> {_name(named, ino)}".rstrip())
    return f"inodes {inos[0]}-{inos[-1]}: " + (", ".join(used) or "none in use")
