"""Op families: named sets of ACE workload shapes (``workload.family``), each a part of
the seq-2 / seq-3 space where this decade's crash-consistency bugs were found.

A family is a predicate over a workload's ops, computed by one walk (``advance``) that
keeps only what the family needs, so ``acespace.count`` can count a family exactly by
dynamic programming over the walk's states instead of decoding millions of indices. A
sync ends every family's window: it commits the running transaction, and with it
whatever the shape needed to be still in flight.

- ``relog``: a core op acts on a file an earlier op fsync'd or fdatasync'd (no sync
  between). The inode is already in the running transaction's log (btrfs's log tree,
  ext4's fast commit), where the rename / link fsync bugs live (btrfs_log_new_name and its
  fixes; 5254d4181add).
- ``reuse-name``: a name removed earlier (unlink, rmdir, a rename's source) is made again
  (create, mkdir, link, a rename's destination). Logged directory entries of the old inode
  and the new one share a key; replaying the log must drop one and keep the other (btrfs's
  "unlink then create the same name, fsync" fixes, ext4 fast commit's dentry tags).
- ``dir-move``: a directory is renamed, then (that op's persistence or a later one's) an
  fsync of the directory, of something inside it or of its old parent. Logging a moved
  directory must log its new parent and drop the old entry (btrfs's log_new_dir_dentries
  and "fsync of a file in a renamed directory" fixes; f2fs's and ext4's rename-dir bugs).
- ``held-fd``: fsync or fdatasync through a descriptor opened before its name was
  unlinked or its directory removed (``ace-x`` only: ``ace`` holds no descriptor). The
  inode has no name left to log, yet the fsync must persist what it promised and must not
  resurrect the name (btrfs's logging of unlinked inodes, ext4 orphan handling).
- ``new-dir-name`` (``ace-n`` only): a name made (create, link, a rename's destination)
  inside a directory made since the last sync, then an fsync-family call. Logging the
  new name must log the new directory first, and mark what it logged of the parent as
  such: btrfs's btrfs_log_new_name fixes of 2025 (bfe3d755ef7c, 5630f7557de6) lost the
  directory or its other new entries, because the parent looked already logged.
- ``data-ns-mix``: a data op (write, mmap write, fallocate, truncate) and a namespace op
  (create, link, rename, exchange, unlink) on one inode, with no persistence op between
  them, then one fsync-family call. One fsync must commit both the inode's new extents and
  its new names; bugs drop one when the other made the inode "already logged" (ext4's
  rename-with-delalloc, btrfs's fsync after a link and a write, xfs's rename + truncate).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from .ops import RENAMES

FAMILIES: dict[str, str] = {
    "relog": "act again on a file fsync'd earlier, no sync between",
    "reuse-name": "make again a name removed earlier, no sync between",
    "dir-move": "move a directory, then fsync it, something inside it or its old parent",
    "held-fd": "fsync through a descriptor held across an unlink or rmdir (ace-x, ace-n)",
    "data-ns-mix": "a data op and a namespace op on one inode, then one fsync",
    "new-dir-name": "a name made in a directory made since the last sync, then an fsync (ace-n)",
}
# The grammars a family needs: what it reaches exists only there (ace holds no
# descriptor; only ace-n names a file inside a directory the workload made).
GRAMMARS_OF: dict[str, tuple[str, ...]] = {
    "held-fd": ("ace-x", "ace-n"),
    "new-dir-name": ("ace-n",),
}
WHY_GRAMMAR = {
    "held-fd": "needs a descriptor held across a namespace change (ace holds none)",
    "new-dir-name": "needs a name made inside a new directory (only ace-n makes one)",
}

FSYNCS = frozenset({"fsync", "fdatasync", "fsync_dir", "fsync_fd", "fdatasync_fd"})
DATA = frozenset({"append", "overwrite", "write", "dwrite", "mwrite", "falloc", "truncate"})
NAMESPACE = frozenset({"create", "link", *RENAMES, "exchange", "unlink", "unlink-held",
                       "tmpfile-link"})  # fmt: skip
MAKES = frozenset({"create", "mkdir", "symlink", "tmpfile-link"})  # c.path, new
MOVES = frozenset({"link", *RENAMES})  # c.dst, new
REMOVES = frozenset({"unlink", "unlink-held", "rmdir", "rmdir-held", *RENAMES})
DIR_MOVES = frozenset({"rename-dir", "rename-dir-out"})


def closest(name: str) -> list[str]:
    """The families nearest a mistyped name (every one when none is near)."""
    return difflib.get_close_matches(name, FAMILIES, n=3, cutoff=0.4) or sorted(FAMILIES)


def _parent(p: str) -> str:
    return p.rsplit("/", 1)[0] if "/" in p else ""


@dataclass(frozen=True)
class Walk:
    """What one family remembers of the ops so far (hashable: ``acespace.count`` memoises
    on it)."""

    family: str
    hit: bool = False
    names: frozenset[str] = frozenset()  # relog: fsync'd files; reuse-name: removed names
    moved: frozenset[tuple[str, str]] = frozenset()  # dir-move: (new name, old parent)
    inodes: tuple[tuple[str, int], ...] = (("foo", 0), ("A/foo", 1))  # data-ns-mix
    pending: frozenset[tuple[int, str]] = frozenset()  # (inode, "d" or "n") since a persist
    made: int = 2  # data-ns-mix: the next new inode's number (never one reused)


def start(family: str) -> Walk:
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; closest: {', '.join(closest(family))}")
    return Walk(family)


def advance(w: Walk, c: Any, pkind: str, ppath: str) -> Walk:
    """The walk after core op ``c`` (an ``ace.Core``) and its persistence op."""
    if w.hit:
        return w
    f = w.family
    if f == "relog":
        return _relog(w, c, pkind, ppath)
    if f == "reuse-name":
        made = c.path if c.kind in MAKES else c.dst if c.kind in MOVES else ""
        if made and made in w.names:
            return replace(w, hit=True)
        removed = {c.path} if c.kind in REMOVES else set()
        return replace(w, names=frozenset() if pkind == "sync" else w.names | removed)
    if f == "dir-move":
        moved = w.moved | ({(c.dst, _parent(c.path))} if c.op_class in DIR_MOVES else set())
        if pkind in FSYNCS and any(
            ppath in (new, old) or ppath.startswith(new + "/") for new, old in moved
        ):
            return replace(w, hit=True)
        return replace(w, moved=frozenset() if pkind == "sync" else moved)
    if f == "held-fd":
        return replace(w, hit=pkind in ("fsync_fd", "fdatasync_fd"))
    if f == "new-dir-name":
        return _new_dir_name(w, c, pkind)
    return _mix(w, c, pkind)


def _relog(w: Walk, c: Any, pkind: str, ppath: str) -> Walk:
    # As acespace.relogs always did: the op's own path fsync'd before, no sync between.
    if c.path in w.names:
        return replace(w, hit=True)
    if pkind in ("fsync", "fdatasync"):
        return replace(w, names=w.names | {ppath})
    return replace(w, names=frozenset()) if pkind == "sync" else w


def _new_dir_name(w: Walk, c: Any, pkind: str) -> Walk:
    # names: the directories made since the last sync, "+" marking one given a name since
    made = c.path if c.kind in MAKES else c.dst if c.kind in MOVES else ""
    names = set(w.names)
    if c.kind == "mkdir":
        names.add(c.path)
    elif made and _parent(made) in names:
        names.add("+" + _parent(made))
    if pkind in FSYNCS and any(n.startswith("+") for n in names):
        return replace(w, hit=True)
    return replace(w, names=frozenset() if pkind == "sync" else frozenset(names))


def _mix(w: Walk, c: Any, pkind: str) -> Walk:
    ino = dict(w.inodes)
    tag = "d" if c.kind in DATA else "n" if c.kind in NAMESPACE else ""
    touched = {ino[p] for p in (c.path, c.dst) if p in ino}
    if c.kind in MAKES:
        ino[c.path], touched = w.made, {w.made}
    elif c.kind == "link":
        ino[c.dst] = ino[c.path]
    elif c.kind in RENAMES:
        pre = c.path + "/"
        for name in [n for n in ino if n == c.path or n.startswith(pre)]:
            ino[c.dst + name[len(c.path) :]] = ino.pop(name)
    elif c.kind == "exchange":
        ino[c.path], ino[c.dst] = ino[c.dst], ino[c.path]
    elif c.kind in ("unlink", "unlink-held"):
        ino.pop(c.path, None)
    pending = w.pending | ({(i, tag) for i in touched} if tag else set())
    if pkind in FSYNCS and any((i, "d") in pending and (i, "n") in pending for i, _ in pending):
        return replace(w, hit=True)
    keep = pending if pkind == "none" else frozenset()
    made = w.made + (c.kind in MAKES)
    return replace(w, inodes=_canonical(ino), pending=frozenset(keep), made=made)


def _canonical(ino: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(ino.items()))


# Families the op generator cannot draw: every name it makes is new (f7, d3), and it
# renames files only.
OPGEN_NEVER = {
    "reuse-name": "the op generator never makes a name again (each name it draws is new)",
    "dir-move": "the op generator never renames a directory",
}


@dataclass(frozen=True)
class _Core:
    """An op generator's op as the walk reads a core op (ace.Core's fields it uses)."""

    kind: str
    path: str = ""
    dst: str = ""
    op_class: str = ""


PERSISTS = {"fsync": "fsync", "fdatasync": "fdatasync", "fsync_dir": "fsync_dir",
            "sync": "sync", "syncfs": "sync", "fsync_fd": "fsync_fd"}  # fmt: skip


def opgen_steps(ops: Iterable[Any]) -> list[tuple[Any, tuple[str, str]]]:
    """An op generator's ops (opgen.Op) as the walk's (core, persistence) steps: each op
    a core with no persistence, a persistence op a step of its own. An fsync_fd is the
    held-descriptor kind only when its file lost the name it was opened by."""
    steps: list[tuple[Any, tuple[str, str]]] = []
    opened: dict[str, str] = {}  # descriptor -> the name it was opened by
    held: set[str] = set()  # descriptors whose name is gone
    for op in ops:
        if op.kind == "open":
            opened[op.fd] = op.path
        elif op.kind in ("unlink", "rename"):
            held |= {fd for fd, name in opened.items() if name == op.path}
        if op.kind in PERSISTS:
            path = opened.get(op.fd, "") if op.kind == "fsync_fd" else op.path
            kind = "fsync" if op.kind == "fsync_fd" and op.fd not in held else PERSISTS[op.kind]
            steps.append((_Core("none"), (kind, path)))
        else:
            steps.append((_Core(op.kind, op.path, op.dst, op.kind), ("none", "")))
    return steps


def matches_ops(family: str, ops: Iterable[Any]) -> bool:
    """Whether an op generator's workload is of ``family``."""
    return matches(family, opgen_steps(ops))


def matches(family: str, picked: Iterable[tuple[Any, tuple[str, str]]]) -> bool:
    """Whether a workload's ops (``ace.decode``'s) are of ``family``."""
    w = start(family)
    for c, (pkind, ppath) in picked:
        w = advance(w, c, pkind, ppath)
    return w.hit
