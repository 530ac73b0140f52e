#!/usr/bin/env python3
"""ACE's bounded workloads (CrashMonkey, OSDI'18), enumerated, and one recorded.

Stdlib only and deterministic: the host enumerates and samples the space by index
(``count``, ``describe``), the guest rebuilds workload ``i`` from the same index and runs
it (``record``), so only indices cross between them.

A workload is: the base (ACE's small file set, made and synced: mark 1), then ``seq``
core ops, each followed by a persistence op (fsync, fdatasync, a directory fsync or
sync; before the last op also none), then opgen's final sync. CrashMonkey's study found
most crash-consistency bugs need three ops or fewer, each ending in an fsync-family call,
which is why a small exhaustive space finds real bugs.

The space by index: a workload of ``seq`` ops is digits in mixed radix, one per op, over
``units(last)``: the (core op, persistence) pairs, with "none" only before the last op.
Some combinations are not workloads (a write to a file unlinked before); ``valid`` says
which, by replaying the names the ops need.

Op families (``families.py``: relog, reuse-name, dir-move, held-fd, data-ns-mix) are
the parts of seq-2 and seq-3 where the fsync bugs of the last years live; ``count``
counts each exactly (``python3 -m harness.guest.ace count --seq 3 --grammar ace-x``) by
dynamic programming over the walk the family and ``valid`` share, which tests check
against decoding every index of seq-2.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import io
import json
import math
import random
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import contract, families, generate
from ..model.ops import Op, parent
from ..model.oracle import FORMAT, MARK_PREFIX
from . import fifoserve, opgen, runner

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


def valid(picked: Sequence[tuple[Core, tuple[str, str]]]) -> bool:
    """Whether every op finds what it needs: the names it reads exist, the names it
    makes do not, rmdir's directory is empty, an mmap write lies inside its file."""
    files = {f: BASE_SIZE for f in FILES}
    dirs = {"", *BASE_DIRS}
    return all(_step_persist(c, pkind, ppath, files, dirs) for c, (pkind, ppath) in picked)


def _step_persist(c: Core, pkind: str, ppath: str, files: dict[str, int], dirs: set[str]) -> bool:
    """``_step``, then whether the persistence op finds its name."""
    if not _step(c, files, dirs):
        return False
    if pkind in ("fsync", "fdatasync") and files.get(ppath, -1) < 0:  # gone, or a link
        return False
    return not (pkind == "fsync_dir" and ppath not in dirs)


def _step(c: Core, files: dict[str, int], dirs: set[str]) -> bool:
    """Apply ``c`` to the names (file -> size; a symbolic link's size is -1)."""
    k = c.kind
    if k in ("create", "mkdir", "symlink", "tmpfile-link"):
        if c.path in files or c.path in dirs or parent(c.path) not in dirs:
            return False
        if k == "mkdir":
            dirs.add(c.path)
        else:
            files[c.path] = {"create": 0, "symlink": -1}.get(k, c.length)
        return True
    if k in ("rmdir", "rmdir-held"):
        pre = c.path + "/"
        busy = any(x.startswith(pre) for x in (*files, *dirs))
        if c.path not in dirs or busy:
            return False
        dirs.discard(c.path)
        return True
    if k == "rename" and c.path in dirs:
        if c.dst in dirs or c.dst in files or parent(c.dst) not in dirs:
            return False
        pre = c.path + "/"
        for d in [d for d in dirs if d == c.path or d.startswith(pre)]:
            dirs.discard(d)
            dirs.add(c.dst + d[len(c.path) :])
        for f in [f for f in files if f.startswith(pre)]:
            files[c.dst + f[len(c.path) :]] = files.pop(f)
        return True
    if c.path not in files:
        return False
    if k == "exchange":
        if c.dst not in files:
            return False
        files[c.path], files[c.dst] = files[c.dst], files[c.path]
        return True
    if k == "rename_noreplace" and c.dst in files:
        return False
    if k in ("link", "rename", "rename_noreplace"):
        over = k == "rename" and c.dst in files
        if (c.dst in files and not over) or c.dst in dirs or parent(c.dst) not in dirs:
            return False
        files[c.dst] = files[c.path]
        if k != "link":
            del files[c.path]
        return True
    size = files[c.path]
    if k in ("unlink", "unlink-held"):
        del files[c.path]
    elif size < 0:  # a symbolic link: any other op would follow it
        return False
    elif k == "mwrite":
        return c.offset + c.length <= size
    elif k in ("append", "overwrite", "write", "dwrite"):
        files[c.path] = max(size, c.offset + c.length)
    elif k == "truncate":
        files[c.path] = c.size
    elif k == "falloc" and c.mode in ("default", "zero_range"):
        files[c.path] = max(size, c.offset + c.size)
    return True


def selection(
    seq: int,
    sample: int,
    seed: int,
    limit: int = 0,
    classes: Sequence[str] = (),
    indices: Sequence[int] = (),
    relog: bool = False,
    grammar: str = "ace",
    family: str = "",
) -> list[int]:
    """The valid indices a run takes: all of them in order, or ``sample`` of them drawn
    by ``seed`` (sorted); only those whose core ops are all of ``classes`` when given
    (the sample is drawn among those); ``limit`` keeps the first few (a CI slice).
    ``indices`` replaces the whole space by these workloads (the filters still apply);
    ``relog`` keeps only workloads that act again on a file they fsync'd (``relogs``);
    ``family`` only those of that op family (``families.py``)."""
    keep = set(classes)
    if relog:
        family = family or "relog"

    def wanted(i: int) -> bool:
        picked = decode(seq, i, grammar)
        return (
            valid(picked)
            and (not keep or all(c.op_class in keep for c, _ in picked))
            and (not family or families.matches(family, picked))
        )

    if indices:
        chosen = sorted({i for i in indices if wanted(i)})
        if sample:
            chosen = sorted(random.Random(seed).sample(chosen, min(sample, len(chosen))))
        return chosen[:limit] if limit else chosen
    if sample:
        rng = random.Random(seed)
        total = space(seq, grammar)
        if sample > total:
            raise ValueError(f"a sample of {sample} is larger than seq-{seq}'s {total} workloads")
        out: set[int] = set()
        tries = 0
        # Rejection sampling over the whole space: a narrow class filter on seq-3 accepts
        # about one index in a few thousand, still seconds for a few thousand workloads.
        while len(out) < sample and tries < 5000 * sample:
            tries += 1
            i = rng.randrange(total)
            if i not in out and wanted(i):
                out.add(i)
        picked = sorted(out)
    else:
        picked = [i for i in range(space(seq, grammar)) if wanted(i)]
    return picked[:limit] if limit else picked


def relogs(picked: Sequence[tuple[Core, tuple[str, str]]]) -> bool:
    """Whether a core op acts on a file an earlier op's fsync or fdatasync persisted with
    no sync between (the ``relog`` family: its inode is in the running transaction's log,
    btrfs's log tree or ext4's fast commit)."""
    return bool(families.matches("relog", picked))


def shuffled(seq: int, seed: int, grammar: str = "ace", family: str = "") -> Iterator[int]:
    """Every valid workload of ``family`` (all when empty) once, in an order fixed by
    ``seed``: an affine permutation of the index space (a stride coprime with its size),
    so a budgeted run taken up again walks the same order and skips what it recorded."""
    total = space(seq, grammar)
    rng = random.Random(seed)
    stride = rng.randrange(1, total) if total > 1 else 1
    while math.gcd(stride, total) != 1:
        stride += 1
    offset = rng.randrange(total)
    for k in range(total):
        i = (offset + k * stride) % total
        picked = decode(seq, i, grammar)
        if valid(picked) and (not family or families.matches(family, picked)):
            yield i


def count(seq: int, grammar: str = "ace", family: str = "") -> int:
    """Exactly how many valid workloads of ``seq`` ops (of ``family`` when given) there
    are, by dynamic programming: the names left and the family's walk after a prefix are
    all its suffixes depend on, and few prefixes differ in them."""

    @functools.cache
    def rest(state: tuple[Any, ...], walk: Any, left: int) -> int:
        if left == 0:
            return 1 if not family or walk.hit else 0
        total = 0
        for c, (pkind, ppath) in units(left == 1, grammar):
            files, dirs = dict(state[0]), set(state[1])
            if not _step_persist(c, pkind, ppath, files, dirs):
                continue
            nxt = families.advance(walk, c, pkind, ppath) if family else None
            total += rest((tuple(sorted(files.items())), frozenset(dirs)), nxt, left - 1)
        return total

    base = (tuple(sorted({f: BASE_SIZE for f in FILES}.items())), frozenset({"", *BASE_DIRS}))
    return rest(base, families.start(family) if family else None, seq)


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
        from ..model import opfile

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


UNSUPPORTED = (errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL)
# A workload's recording failed because a guest disk did (the host's file), not the
# workload: the search records it once more (search/experiment.py).
DISK_FAILED = "a disk failed"


def cmd_record(a: argparse.Namespace) -> contract.AceRecord:
    """Record workload ``--index`` on a fresh filesystem under its own dm-log-writes
    log: dm-linear slices of the data and log disks, so one guest records many."""
    # Names of this workload's own, and tables that name devices by number: a path in
    # /dev/mapper made by dmsetup without udev can outlive its device and name the next
    # one made, so a reused name could log one workload's writes into another's slice.
    lw = f"{a.name}-{a.index}"
    dut, log = f"{lw}-dut", f"{lw}-log"

    def sh(step: str, argv: list[str]) -> str:
        r = runner.run(argv, a.timeout)
        if r.rc != 0:
            raise StepFailed(step, argv, r.stderr or r.stdout)
        return str(r.stdout)

    def mark(text: str) -> None:
        sh("mark", ["dmsetup", "message", lw, "0", "mark", text])

    def number(name: str) -> str:
        out = sh("dm-create", ["dmsetup", "info", "-c", "--noheadings", "-o", "major,minor", name])
        return out.strip()

    start = time.monotonic()
    result: dict[str, Any] = {"index": a.index}
    made: list[str] = []
    try:
        for name, disk, offset in ((dut, a.dut, a.dut_offset), (log, a.log, a.log_offset)):
            sectors = a.size // 512 if name == dut else a.log_size // 512
            table = f"0 {sectors} linear {disk} {offset // 512}"
            sh("dm-create", ["dmsetup", "create", name, "--table", table])
            made.append(name)
        table = f"0 {a.size // 512} log-writes {number(dut)} {number(log)}"
        sh("dm-create", ["dmsetup", "create", lw, "--table", table])
        made.append(lw)
        dev = f"/dev/mapper/{lw}"
        sh("mkfs", [*json.loads(a.mkfs), dev])
        mark("crashlab:mkfs")
        sh("mount", [*json.loads(a.mount), dev, a.root])
        body = opgen.execute(
            a.root,
            _ops(a),
            mark_cmd="dmsetup",
            dm_name=lw,
            fsync_names=a.fsync_names == "yes",
            noop_sync=a.noop_sync,
            flush_after_sync=a.flush_after_sync,
            ordered=a.ordered_metadata,
        )
        sh("umount", ["umount", a.root])
        mark("crashlab:umount")
        result["oracle"] = {"format": FORMAT, "mark_prefix": MARK_PREFIX, **body}
        result["status"] = "recorded" if body["complete"] else _failed(body, a.source)
    except StepFailed as e:
        result["status"] = "failed"
        result["error"] = str(e)
    finally:
        runner.run(["umount", a.root], a.timeout)
        for name in reversed(made):
            r = runner.run(["dmsetup", "remove", name], a.timeout)
            if r.rc != 0:  # the next workload must not find this one's devices
                result["status"] = "failed"
                result["error"] = f"dmsetup remove {name}: {(r.stderr or r.stdout).strip()}"
        # dm-log-writes says it lost entries only in the kernel log: read it (and clear
        # it) per workload, so a lost log fails this workload, not its whole batch.
        kmsg = runner.run(["dmesg", "-c"], a.timeout).stdout.splitlines()
        said = runner.log_writes_errors(kmsg)
        disks = runner.disk_errors(kmsg)
        if said or disks:
            # A lost log, or a disk the host failed: this workload is a harness outcome
            # alone, with the kernel's own lines (the block layer's first) kept.
            result["status"] = "failed"
            lost = "dm-log-writes: " + " | ".join(said[:5])
            result["error"] = lost if said else DISK_FAILED
            result["kernel"] = [*disks, *said][:20]
    result["seconds"] = round(time.monotonic() - start, 3)
    return contract.AceRecord(**result)


def serve(folder: str) -> None:
    """Record workloads one after another for as long as the guest lives (fifoserve.py):
    each request the JSON list of ``record``'s arguments, each reply its record.

    Starting Python and importing this module cost 0.9 s a workload under TCG, beside
    its 1.4 s of recording (btrfs, seq-2). A request that raises gets a record of
    status ``failed`` whose error is the traceback (index -1: it may not have said
    one), the lab's own failure for that workload; the devices it made are gone
    (``cmd_record`` removes them on the way out), so the next one starts clean.
    """

    def handle(line: str) -> str:
        return cmd_record(record_args(json.loads(line))).to_json()

    def failed(text: str) -> str:
        error = contract.excerpt(text)
        return contract.AceRecord(index=-1, status="failed", seconds=0.0, error=error).to_json()

    fifoserve.serve(folder, handle, failed)


def record_args(argv: list[str]) -> argparse.Namespace:
    """``record``'s arguments parsed as ``ace.py record`` parses them; arguments it
    refuses are a ValueError that says why (argparse would print it and exit)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(["record", *argv])
    except SystemExit:
        raise ValueError(f"record {argv}: {err.getvalue().strip()}") from None


def _ops(a: argparse.Namespace) -> list[Any]:
    """The workload's ops: ACE's ``--index``, or ``--keep`` of a ``--source``'s."""
    if a.source is None:
        return ops_of(a.seq, a.index, a.grammar)
    ops = source_ops(json.loads(a.source))
    keep = [int(i) for i in a.keep.split(",") if i] if a.keep is not None else range(len(ops))
    return [ops[i] for i in keep]


def _failed(body: dict[str, Any], source: str | None) -> str:
    """An op the filesystem does not support is a skipped workload; an op of a subset
    of a workload (``--source``) that fails (a write to a file whose create was left
    out) makes the subset no workload; another failure is the lab's to explain."""
    if body.get("errno") in UNSUPPORTED:
        return "unsupported"
    return "invalid" if source is not None and body.get("errno") is not None else "failed"


class StepFailed(Exception):
    def __init__(self, step: str, argv: list[str], output: str) -> None:
        super().__init__(f"{step}: {' '.join(argv)}: {output.strip()[-800:]}")


def cmd_list(a: argparse.Namespace) -> int:
    fam = a.family
    for i in selection(a.seq, a.sample, a.seed, a.limit, a.classes, grammar=a.grammar, family=fam):
        print(json.dumps(describe(a.seq, i, a.grammar)))
    return 0


def cmd_count(a: argparse.Namespace) -> int:
    """Per sequence length: the indices, the valid workloads, and each family's."""
    for seq in a.seq:
        cells = [f"{count(seq, a.grammar):,} valid of {space(seq, a.grammar):,} indices"]
        cells += [f"{f} {count(seq, a.grammar, f):,}" for f in families.FAMILIES]
        print(f"{a.grammar} seq-{seq}: " + "; ".join(cells))
    return 0


def cmd_index(a: argparse.Namespace) -> int:
    """The workload (id and ops) of each shape, as ``list`` prints them."""
    for ops in a.ops:
        i = index_of(ops, a.grammar)
        print(json.dumps(describe(len(ops.split(";")), i, a.grammar)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ace", description=(__doc__ or "").splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="the workloads a run takes, one JSON line each")
    ls.add_argument("--seq", type=int, default=1)
    ls.add_argument("--sample", type=int, default=0)
    ls.add_argument("--seed", type=int, default=1)
    ls.add_argument("--limit", type=int, default=0)
    ls.add_argument("--classes", nargs="*", default=(), help="only these core op classes")
    ls.add_argument("--grammar", choices=GRAMMARS, default="ace")
    ls.add_argument("--family", choices=sorted(families.FAMILIES), default="")
    ls.set_defaults(func=cmd_list)
    n = sub.add_parser("count", help="exact counts per sequence length and op family")
    n.add_argument("--seq", type=int, nargs="+", default=[1, 2, 3])
    n.add_argument("--grammar", choices=GRAMMARS, default="ace")
    n.set_defaults(func=cmd_count)
    x = sub.add_parser("index", help="the workload of ops spelt as list spells them")
    x.add_argument("--grammar", choices=GRAMMARS, default="ace")
    x.add_argument("ops", nargs="+", help="e.g. 'mkdir(B); append(foo) fsync(foo)'")
    x.set_defaults(func=cmd_index)
    r = sub.add_parser("record", help="record one workload under its own log")
    r.add_argument("--seq", type=int, default=1)
    r.add_argument("--grammar", choices=GRAMMARS, default="ace")
    r.add_argument("--index", type=int, required=True, help="ACE's index; names the devices")
    r.add_argument("--source", help="another workload's ops, as JSON (source_ops)")
    r.add_argument("--keep", help="only these ops of --source, by index: 0,3,4")
    r.add_argument("--name", required=True, help="the dm-log-writes device's name")
    r.add_argument("--dut", required=True)
    r.add_argument("--dut-offset", type=int, required=True)
    r.add_argument("--size", type=int, required=True, help="the filesystem's device size")
    r.add_argument("--log", required=True)
    r.add_argument("--log-offset", type=int, required=True)
    r.add_argument("--log-size", type=int, required=True)
    r.add_argument("--mkfs", required=True, help="mkfs argv as JSON, without the device")
    r.add_argument("--mount", required=True, help="mount argv as JSON, without dev and dir")
    r.add_argument("--root", required=True)
    r.add_argument("--fsync-names", choices=("yes", "no"), default="yes")
    r.add_argument("--noop-sync", action="store_true")
    r.add_argument("--flush-after-sync", action="store_true")
    r.add_argument("--ordered-metadata", action="store_true", help="oracle rule 18 too")
    r.add_argument("--timeout", type=float, default=300)
    s = sub.add_parser("serve", help="record workloads asked through FIFOs in FOLDER")
    s.add_argument("folder")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.command == "record":
        print(cmd_record(a).to_json())
        return 0
    if a.command == "serve":
        serve(a.folder)  # answers until the guest is gone
        return 0
    status: int = a.func(a)
    return status


if __name__ == "__main__":
    sys.exit(main())
