"""ACE's bounded workloads (CrashMonkey, OSDI'18): the grammar and its index space
(stdlib only: the host and the guest import it).

Deterministic: the host enumerates and samples the space by index (``acespace``,
``describe``), the guest rebuilds workload ``i`` from the same index and runs it
(``guest/ace.py record``), so only indices cross between them.

A workload is: the base (ACE's small file set, made and synced: mark 1), then ``seq``
core ops, each followed by a persistence op (fsync, fdatasync, a directory fsync or
sync; before the last op also none), then opgen's final sync. CrashMonkey's study found
most crash-consistency bugs need three ops or fewer, each ending in an fsync-family call,
which is why a small exhaustive space finds real bugs.

The space by index: a workload of ``seq`` ops is digits in mixed radix, one per op, over
``units(last)``: the (core op, persistence) pairs, with "none" only before the last op.
Some combinations are not workloads (a write to a file unlinked before);
``acespace.valid`` says which, by replaying the names the ops need.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Any

from . import generate, opfile
from .ops import Op, parent

KiB = 1024
BASE_SIZE = 16 * KiB
FILES = ("foo", "A/foo")  # ACE's files, in the root and in a directory
NEW = ("bar", "A/bar")  # names the workloads create
BASE_DIRS = ("A", "A/C")  # A/C stays empty: rmdir's target
XATTR = "user.a"


def _falloc(mode: str, offset: int, size: int) -> dict[str, Any]:
    return {"kind": "falloc", "mode": mode, "offset": offset, "size": size}


# (op class, template) per file: what ACE's write / falloc / truncate / xattr ops do to
# a file of BASE_SIZE bytes -- inside it, across its end, past it, block-aligned or not.
FILE_OPS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("append", {"kind": "append", "offset": BASE_SIZE, "length": 5000}),
    ("overwrite", {"kind": "overwrite", "offset": 1000, "length": 5000}),
    ("write-hole", {"kind": "write", "offset": 2 * BASE_SIZE, "length": 4 * KiB}),
    ("dwrite-append", {"kind": "dwrite", "offset": BASE_SIZE, "length": 8 * KiB}),
    ("dwrite-overwrite", {"kind": "dwrite", "offset": 4 * KiB, "length": 4 * KiB}),
    ("mwrite", {"kind": "mwrite", "offset": 2000, "length": 3000}),
    ("falloc", _falloc("default", BASE_SIZE, BASE_SIZE)),
    ("falloc-keep-size", _falloc("keep_size", 12 * KiB, BASE_SIZE)),
    ("punch-hole", _falloc("punch_hole", 4 * KiB, 8 * KiB)),
    ("zero-range", _falloc("zero_range", 2000, 6000)),
    ("zero-range-extend", _falloc("zero_range", 12 * KiB, BASE_SIZE)),
    ("zero-range-keep-size", _falloc("zero_range_keep_size", 12 * KiB, BASE_SIZE)),
    ("truncate-shrink", {"kind": "truncate", "size": 5000}),
    ("truncate-grow", {"kind": "truncate", "size": 4 * BASE_SIZE}),
    ("setxattr", {"kind": "setxattr", "name": "user.b", "length": 32}),
    ("setxattr-replace", {"kind": "setxattr", "name": XATTR, "length": 48}),
    ("removexattr", {"kind": "removexattr", "name": XATTR}),
    ("unlink", {"kind": "unlink"}),
)  # fmt: skip


@dataclass(frozen=True)
class Core:
    """A core op before its data is drawn: what the space enumerates."""

    op_class: str
    kind: str
    path: str = ""
    dst: str = ""
    offset: int = 0
    size: int = 0
    length: int = 0  # bytes of data (writes, xattr values)
    mode: str = ""
    name: str = ""
    target: str = ""  # symlink
    perm: int = 0  # chmod

    def label(self) -> str:
        args = ", ".join(a for a in (self.path, self.dst) if a)
        return f"{self.op_class}({args})"


GRAMMARS = ("ace", "ace-x", "ace-n")
# A workload's id names its grammar: the same index is another workload in another one.
ID_PREFIX = {"ace": "", "ace-x": "x", "ace-n": "n"}
# ``ace-n``'s names inside the directory a workload makes (``mkdir(B)``): ace and ace-x
# never put a file there, so no seq-N of theirs has btrfs's "new name in a new
# directory" log-tree bugs (docs/search.md, "Two kernels side by side").
IN_NEW_DIR = ("B/bar",)
# ... and a file taking the old name of a directory the workload moved away (or removed),
# then renamed next to it: btrfs's "conflicting inode is a moved directory" fix
# (266273eaf4d9, generic/784) needs a name that was a directory in the synced base and
# is a file now, which no name of ace-x's ever is.
DIR_NAME_FILE = "A/C"
# Multi-op cores of ``ace-x``: a descriptor held across a namespace change, and O_TMPFILE
# named by linkat (ops_of expands them; "@" is the core's descriptor).
HELD = frozenset({"unlink-held", "rmdir-held", "tmpfile-link"})
HANDLE = "@"


def extended_cores() -> list[Core]:
    """``ace-x``'s classes beyond ACE's: the operations this year's real bugs needed
    (harness/model/opfile.py's, oracle rules 13-16), after ACE's own in the same space."""
    out = [Core("symlink", "symlink", n, target="foo") for n in NEW]
    out += [Core("rename-dir-out", "rename", "A/C", "C"), Core("rmdir-held", "rmdir-held", "A/C")]
    out += [Core("exchange", "exchange", "foo", "A/foo")]
    out += [Core("tmpfile-link", "tmpfile-link", n, length=4 * KiB) for n in NEW]
    for f in FILES:
        out += [Core("truncate-zero", "truncate", f, size=0), Core("chmod", "chmod", f, perm=0o600)]
        out += [Core("unlink-held", "unlink-held", f)]
        out += [Core("rename-noreplace", "rename_noreplace", f, n) for n in NEW]
    return out


def new_dir_cores() -> list[Core]:
    """``ace-n``'s cores beyond ace-x's: a file created, linked or renamed into ``B``,
    valid only once a core op made ``B``; a file made at ``A/C`` once the directory left
    it, and that name renamed to ``bar``. ace-x's own list is unchanged, so are its ids."""
    out = [Core("creat", "create", n) for n in IN_NEW_DIR]
    for f in FILES:
        out += [Core("link", "link", f, n) for n in IN_NEW_DIR]
        out += [Core("rename", "rename", f, n) for n in IN_NEW_DIR]
    # valid once A/C is gone; while A/C is still the directory the rename moves it
    out += [Core("creat", "create", DIR_NAME_FILE), Core("rename", "rename", DIR_NAME_FILE, "bar")]
    return out


def cores(grammar: str = "ace") -> list[Core]:
    """Every core op over the file set, in a fixed order (``ace-x``: and its classes;
    ``ace-n``: and names in the new directory)."""
    out = _ace_cores()
    if grammar in ("ace-x", "ace-n"):
        out += extended_cores()
    if grammar == "ace-n":
        out += new_dir_cores()
    return out


def _ace_cores() -> list[Core]:
    out: list[Core] = [Core("creat", "create", n) for n in NEW]
    out += [Core("mkdir", "mkdir", d) for d in ("B", "A/D")]
    out += [Core("rmdir", "rmdir", "A/C"), Core("rename-dir", "rename", "A", "B")]
    for f in FILES:
        for op_class, t in FILE_OPS:
            out.append(Core(op_class, path=f, **t))
        out += [Core("link", "link", f, n) for n in NEW]
        out += [Core("rename", "rename", f, n) for n in NEW]
        out += [Core("rename-over", "rename", f, g) for g in FILES if g != f]
    return out


PERSIST_NONE = "none"


def persistence(c: Core) -> list[tuple[str, str]]:
    """(persistence op, its path) choices after ``c``: fsync and fdatasync of the files
    it leaves, fsync of the directories it changed, and sync."""
    if c.kind in ("unlink-held", "rmdir-held"):
        fd = [("fsync_fd", HANDLE)] + (
            [("fdatasync_fd", HANDLE)] if c.kind == "unlink-held" else []
        )
        return [*fd, ("fsync_dir", parent(c.path)), ("sync", "")]
    if c.kind == "symlink":  # fsync(2) of a link's name would follow it
        return [("fsync_dir", parent(c.path)), ("sync", "")]
    names = _names_after(c)
    files = [p for p in names if p in _FILE_NAMES]
    dirs = sorted(
        {parent(p) for p in (c.path, c.dst) if p} | {p for p in names if p not in _FILE_NAMES}
    )
    out = [("fsync", f) for f in files] + [("fdatasync", f) for f in files]
    out += [("fsync_dir", d) for d in dirs if d not in files]
    return [*out, ("sync", "")]


_FILE_NAMES = frozenset((*FILES, *NEW, *IN_NEW_DIR, DIR_NAME_FILE))


def _names_after(c: Core) -> list[str]:
    """The names ``c`` leaves that a persistence op can open."""
    if c.kind in ("unlink", "rmdir", "unlink-held", "rmdir-held"):
        return []
    if c.kind in ("rename", "rename_noreplace"):
        return [c.dst]
    if c.kind in ("link", "exchange"):
        return [c.path, c.dst]
    return [c.path]


@functools.cache
def units(last: bool, grammar: str = "ace") -> list[tuple[Core, tuple[str, str]]]:
    """The (core op, persistence op) pairs one digit of an index ranges over."""
    out = []
    for c in cores(grammar):
        choices = persistence(c) + ([] if last else [(PERSIST_NONE, "")])
        out += [(c, p) for p in choices]
    return out


def space(seq: int, grammar: str = "ace") -> int:
    """Number of indices of ``seq`` ops (valid or not)."""
    n = len(units(True, grammar))
    for _ in range(seq - 1):
        n *= len(units(False, grammar))
    return n


def decode(seq: int, index: int, grammar: str = "ace") -> list[tuple[Core, tuple[str, str]]]:
    """Workload ``index``'s ops: the last op is the least significant digit."""
    if not 0 <= index < space(seq, grammar):
        raise ValueError(f"index {index} is outside seq-{seq}'s {space(seq, grammar)} workloads")
    last, other = units(True, grammar), units(False, grammar)
    index, digit = divmod(index, len(last))
    picked = [last[digit]]
    for _ in range(seq - 1):
        index, digit = divmod(index, len(other))
        picked.append(other[digit])
    return picked[::-1]


def unit_label(c: Core, persist: tuple[str, str]) -> str:
    """One op of a workload as ``describe`` spells it: ``append(foo) fsync(foo)``."""
    pkind, ppath = persist
    return c.label() + ("" if pkind == PERSIST_NONE else f" {pkind}({ppath})")


def index_of(ops: str, grammar: str = "ace") -> int:
    """``decode``'s inverse: the index of the workload ``describe`` spells ``ops`` (its
    ops joined by "; "), so a bug's steps written in ACE's terms name their workload."""
    steps = [s.strip() for s in ops.split(";") if s.strip()]
    index = 0
    for n, step in enumerate(steps):
        pool = units(n == len(steps) - 1, grammar)
        where = [k for k, (c, p) in enumerate(pool) if unit_label(c, p) == step]
        if not where:
            raise ValueError(f"{step!r} is no op of {grammar}'s (spelt as describe spells it)")
        index = index * len(pool) + where[0]
    return index


def base_ops() -> list[Any]:
    """ACE's file set, made and then synced (the workload's first mark)."""
    ops = [Op("mkdir", d) for d in BASE_DIRS]
    for i, f in enumerate(FILES):
        ops += [
            Op("create", f),
            Op("append", f, offset=0, data=_bytes(f"base{i}", BASE_SIZE)),
            Op("setxattr", f, name=XATTR, data=_bytes(f"x{i}", 16)),
        ]
    return [*ops, Op("sync")]


def _bytes(seed: str, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def ops_of(seq: int, index: int, grammar: str = "ace") -> list[Any]:
    """Workload ``index`` as opgen ops (base included; opgen adds the final sync)."""
    ops = base_ops()
    for n, (c, (pkind, ppath)) in enumerate(decode(seq, index, grammar)):
        data = _bytes(f"{index}:{n}", c.length) if c.length else b""
        fd = f"h{n}"  # the core's own descriptor, if it holds one
        ops += _expand(c, data, fd)
        if pkind != PERSIST_NONE:
            ops.append(Op(pkind, fd=fd) if ppath == HANDLE else Op(pkind, ppath))
    return ops


def _expand(c: Core, data: bytes, fd: str) -> list[Any]:
    """A core's ops: one, or the held-descriptor and O_TMPFILE sequences."""
    if c.kind in ("unlink-held", "rmdir-held"):
        return [Op("open", c.path, fd=fd), Op(c.kind.removesuffix("-held"), c.path)]
    if c.kind == "tmpfile-link":
        d = parent(c.path)
        return [
            Op("tmpfile", d, fd=fd),
            Op("write_fd", fd=fd, data=data),
            Op("linkat", c.path, fd=fd),
        ]
    return [
        Op(
            c.kind, c.path, dst=c.dst, offset=c.offset, size=c.size, data=data, mode=c.mode,
            name=c.name, target=c.target, perm=c.perm,
        )
    ]  # fmt: skip


def source_ops(source: dict[str, Any]) -> list[Any]:
    """The ops of a workload source: ``{"kind": "ace", "seq", "index"}`` or
    ``{"kind": "opgen", "seed", "ops", "files", "max_size", "extended", "fsync_names",
    "bug_ops"}``
    (what triage's minimal workload re-records a subset of)."""
    if source["kind"] == "ace":
        return ops_of(int(source["seq"]), int(source["index"]), source.get("grammar", "ace"))
    if source["kind"] == "file":  # a workload file's ops (opfile.py), parsed on the host
        return list(opfile.to_ops(source["ops"]))
    return list(
        generate.draw(
            int(source["seed"]),
            int(source["ops"]),
            int(source["files"]),
            int(source["max_size"]),
            bool(source.get("extended")),
            bool(source.get("fsync_names", True)),
            bool(source.get("bug_ops")),
        )
    )


def describe(seq: int, index: int, grammar: str = "ace") -> dict[str, Any]:
    """What the host stores of a workload: its ops, op classes and persistence ops."""
    picked = decode(seq, index, grammar)
    text = "; ".join(unit_label(c, p) for c, p in picked)
    return {
        # ace-x's ids apart from ace's: the same index is another workload there.
        "id": f"{ID_PREFIX[grammar]}seq{seq}-{index:06d}",
        "index": index,
        "seq": seq,
        **({"grammar": grammar} if grammar != "ace" else {}),
        "ops": text,
        "op_class": "+".join(c.op_class for c, _ in picked),
        "persistence": "+".join(p for _, (p, _) in picked),
        # What each name is to the workload, for a finding's symptom: the op's own
        # file or the name it made.
        "roles": {
            **{c.path: "target" for c, _ in picked if c.path},
            **{c.dst: "destination" for c, _ in picked if c.dst},
        },
    }
