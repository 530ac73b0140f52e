#!/usr/bin/env python3
"""The durability oracle: what a crash state must hold, and the check of a mounted one.

Stdlib only; copied into the guest beside opgen.py (which drives the model while the
workload runs) and checkstate.py (which calls ``verify``).

Each rule says what Linux promises and which filesystems this lab holds to it. The
oracle never requires more (soundness): a missed finding is possible, a false one is a
bug of ours.

Marks. After every fsync / fdatasync / directory fsync / sync *returns*, the workload
places mark ``crashlab:sync:<n>``. dm-log-writes logs a completed write only when a later
flush covers it, so a cut at a mark holds exactly what some flush or FUA had made
durable by then (the volatile-cache model), and nothing the workload did afterwards.

Rules, per mark n (``marks[i]`` in the oracle file):

1. Data (``files``): a file's content is durable once fsync, fdatasync or sync returned
   after its last write or truncate (POSIX fsync/fdatasync). Its *name* is durable after
   sync, after fsync of its parent directory once the entry exists, or after fsync of the
   file itself through that name -- POSIX does not promise the last one, but journaled
   ext3/ext4, xfs and btrfs all persist it; ``fsync_names = false`` (ext2, ext4 without a
   journal) keeps to POSIX. A name counts only when every ancestor directory's name is
   durable too. Checked: the file exists, its size, its sha256.
2. The interval: a state whose last mark is n may be cut anywhere before mark n+1, so a
   file *touched* in that interval (written, truncated, renamed from or over, linked,
   unlinked, through any of its names) is not required by ``files`` -- except:
3. Exactly at the mark (``exact``): a state cut right at mark n holds nothing logged
   after it, so every file durable at n is required as it was, touched later or not.
4. Appends keep their prefix (``prefixes``): a file only appended to after mark n still
   holds its first ``size`` bytes unchanged; an append writes past the old end (and
   rewrites the old last block with the same bytes), it never changes what was there.
5. Rename-over is atomic (``either``): rename(2) replaces the target in one step, so a
   durable target renamed over by a durable file holds the old or the new content --
   never neither, never a mix -- until the rename is made durable (then rule 1).
6. Durable removal (``absent``): a name unlinked or renamed away, and then made durable
   by fsync of its directory or sync, stays gone. Before that, a stale name may come back
   (an unlink is not durable until its directory is synced), so nothing is required.
7. Link counts (``nlink``): after a sync with no link, unlink or rename of the file
   since, the inode's link count is exactly its number of names (the inode was written
   whole by the sync). Otherwise nothing: a stale name may hold an extra link.
8. Extended attributes (``xattrs``, the ``user.`` namespace): a required file's
   attributes are exactly the model's once fsync (on the filesystems that keep rule 1's
   name promise: fsync commits the whole inode, its attributes included) or sync
   returned after their last change. fdatasync does not cover them: they are not
   needed to read the data.
9. Directories (``dirs``, ``absent``): a new directory is durable like a name (its
   parent fsync'd, or sync; never by its own fsync, which no rule promises); a removed
   or renamed-away directory like a removed name (rule 6). A directory renamed keeps
   its files: their names are durable again once the new name is.
10. A new file: its (empty) content is durable from the start where rule 1's promise
   is kept -- ext4, xfs and btrfs create the inode and its entry in one transaction --
   so a file created and made durable by its directory's fsync must exist, empty. Where
   it is not kept (ext2), a directory fsync writes the entry but not the new inode.
11. Moves that keep the content (``defrag``: e4defrag, EXT4_IOC_MOVE_EXT) change no
   file's bytes, so they touch nothing: a file durable before one stays required, as
   it was, at every state during and after it. The block exchange is journaled; a
   state that shows other bytes lost data a defragmenter promised not to touch.

13. Symbolic links (``symlink``): the target is the link's data, written with its inode
   in the transaction that makes the name; once the name is durable (rule 1's name rules:
   its directory's fsync or sync -- a link cannot be fsync'd through its name, open(2)
   follows it) the link must exist and read back its target (readlink), not what it
   points at.
14. Mode and owner (``mode``, ``owner``): a file's chmod / chown is durable once sync, or
   fsync of the file where rule 1's name promise is kept (fsync commits the whole
   inode), returned after it. fdatasync does not cover them (not needed to read the
   data, as rule 8). Times (``utimes``) are not checked: every write changes them too.
15. Held descriptors (``open``, ``tmpfile``; ``fsync_fd``, ``write_fd``): fsync through a
   descriptor is fsync of its inode (rule 1's data promise), whatever names it has now;
   it makes no name durable (it was fsync'd through none). Where rule 1's name promise is
   kept, fsync commits the whole inode, its link count included: an inode whose last
   name was removed is committed unlinked, so the names removed from it stay gone (an
   fsync'd unlinked-but-open file does not come back). A held directory's fsync is that
   directory's fsync while it exists; once removed, the same holds as for a file: its
   fsync commits it removed, and its name stays gone (fstests generic/792 expects it of
   ext4, xfs and btrfs). O_TMPFILE + linkat: a new inode, named at linkat (rule 10).
16. renameat2: RENAME_NOREPLACE is rename to a free name; RENAME_EXCHANGE swaps what two
   names refer to in one step, neither name durable until its directory is synced (a
   crash before shows the old pair, which no durable requirement forbids).
17. btrfs subvolumes are directories to the namespace (rule 9); a snapshot is a new
   directory holding new inodes with the source's contents as they were. Its name is
   durable like a new directory's; its files are required only after a sync (no rule
   of the kernel's says the snapshot ioctl makes them durable).

18. Ordered metadata (profile ``ordered-metadata``, chosen per run): a namespace op
   (create, link, unlink, rename, mkdir, rmdir, symlink) is durable once a file or
   directory that changed after it is fsync'd -- one journal commits in order, so the
   commit that makes the fsync'd inode's last change durable makes every earlier one
   durable too. ext4 (data=ordered or journal, no fast commit) and xfs work this way;
   btrfs's maintainers test against it (fstests generic/785: a directory's fsync keeps
   the new subdirectory and its entry). Not POSIX, and not the default.

Profiles: ``posix`` (rules without 1's name promise), ``fsync-names`` (the journaled
filesystems' default) and ``ordered-metadata`` (and rule 18). A run's oracle says its
profile and, per mark, what each weaker one requires (``floors``); a failed check says
the weakest promise it broke (``promise``).

(Rule 12 is fio's, docs/verdicts.md and fioverify.py.)

After the final mark nothing changes: a state cut after ``crashlab:umount`` or at the end
of the log (``dm-log-writes-end``) requires what the final mark requires, exactly.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from typing import Any

FORMAT = "crashlab-oracle/2"
MARK_PREFIX = "crashlab:sync:"  # + n: the mark placed after the n-th persistence op
# Marks after the workload's final sync: nothing happens between them and it.
AFTER_FINAL = ("crashlab:umount", "dm-log-writes-end")
SYNC_OPS = frozenset(
    {"fsync", "fdatasync", "fsync_dir", "sync", "syncfs", "fsync_fd", "fdatasync_fd"}
)
# A write through an O_SYNC / O_DSYNC descriptor (or an O_DIRECT one with RWF_DSYNC)
# returns once it is durable, as if fsync / fdatasync followed it: a persistence point
# that also changes the file.
SYNCED_WRITES = {"osync_write": "fsync", "odsync_write": "fdatasync", "dwrite_dsync": "fdatasync"}
# What the workload marks in the log after it returns.
PERSIST_OPS = SYNC_OPS | frozenset(SYNCED_WRITES)
# Ops that move a file's blocks and promise its bytes unchanged (rule 11).
CONTENT_KEEPING = frozenset({"defrag"})
# Ops that change a file's bytes the way a write does (a direct or mmap'ed write).
WRITE_OPS = frozenset({"write", "append", "overwrite", "dwrite", "mwrite", *SYNCED_WRITES})
# Ops that change an inode's metadata alone (rules 13 and 14).
INODE_META_OPS = frozenset({"chmod", "chown", "utimes"})
# Ops on a descriptor the workload holds (``open``, ``tmpfile``) rather than on a name.
HANDLE_OPS = frozenset({"open", "close", "tmpfile", "write_fd", "fsync_fd", "fdatasync_fd"})
# fallocate(2) modes: (keeps the size, zeroes the range).
FALLOC_MODES: dict[str, tuple[bool, bool]] = {
    "default": (False, False),
    "keep_size": (True, False),
    "punch_hole": (True, True),
    "zero_range": (False, True),
    "zero_range_keep_size": (True, True),
}


class UsageError(Exception):
    """Bad arguments or an unreadable oracle: exit 2."""


@dataclass
class Inode:
    ino: int
    data: bytearray = field(default_factory=bytearray)
    data_durable: bool = False
    xattrs: dict[str, bytes] = field(default_factory=dict)
    xattrs_durable: bool = True  # none yet, and none is what a crash leaves
    xattrs_used: bool = False  # ever set: only then are they required (rule 8)
    version: int = 0
    names_changed: int = 0  # op count of the last create / link / unlink / rename
    symlink: str | None = None  # a symbolic link's target (rule 13)
    perm: int | None = None  # set by chmod: then required once durable (rule 14)
    owner: tuple[int, int] | None = None  # set by chown (rule 14)
    meta_durable: bool = True
    _digest: tuple[int, str] | None = None

    def changed(self) -> None:
        self.version += 1
        self.data_durable = False

    def sha256(self) -> str:
        if self._digest is None or self._digest[0] != self.version:
            self._digest = (self.version, hashlib.sha256(self.data).hexdigest())
        return self._digest[1]


def parent(path: str) -> str:
    return path.rpartition("/")[0]


class Model:
    """The namespace and contents the real file system should hold, with durability."""

    def __init__(self, fsync_names: bool = True, ordered: bool = False) -> None:
        self.fsync_names = fsync_names
        # Rule 18 (profile ordered-metadata): namespace ops persist in order.
        self.ordering = Ordering() if ordered and fsync_names else None
        self.files: dict[str, Inode] = {}
        self.file_name_durable: dict[str, bool] = {}
        self.dirs: dict[str, bool] = {"": True}
        self.removed: set[str] = set()  # names gone, their removal not yet durable
        self.gone: set[str] = set()  # names whose removal is durable (rule 6)
        self.ops = 0
        self.last_sync = -1
        self._next_ino = 1
        # Descriptors the workload holds: a file's inode (named or not), or a directory
        # by its path (None once removed).
        self.handles: dict[str, Inode | str | None] = {}
        self.removed_ino: dict[str, int] = {}  # a removed file name -> its inode
        self.held_removed: dict[str, str] = {}  # a held directory removed -> its old path

    def _new_inode(self) -> Inode:
        inode = Inode(self._next_ino, data_durable=self.fsync_names)
        self._next_ino += 1
        return inode

    def handle_inode(self, fd: str) -> Inode | None:
        h = self.handles.get(fd)
        return h if isinstance(h, Inode) else None

    def _name_appears(self, path: str, inode: Inode) -> None:
        self.file_name_durable[path] = False
        self.removed.discard(path)
        self.gone.discard(path)
        inode.names_changed = self.ops

    def _name_goes(self, path: str, inode: Inode) -> None:
        del self.file_name_durable[path]
        self.removed.add(path)
        self.removed_ino[path] = inode.ino

    def apply(self, op: Any) -> None:
        if self.ordering is not None and op.kind not in SYNC_OPS:
            paths, inodes = self.touches(op)
            self._apply(op)
            self.ordering.after(self, paths, inodes)
        else:
            self._apply(op)

    def _apply(self, op: Any) -> None:
        self.ops += 1
        k = op.kind
        if k == "create":
            # Rule 10: nothing written yet is nothing to lose; the inode itself comes
            # with the name on the filesystems that keep rule 1's name promise.
            inode = self._new_inode()
            self.files[op.path] = inode
            self._name_appears(op.path, inode)
        elif k in WRITE_OPS:
            self._put(self.files[op.path], op.offset, op.data)
            if k in SYNCED_WRITES:
                self.apply(type(op)(SYNCED_WRITES[k], op.path))
                self.ops -= 1  # one op, not two
        elif k == "sync_file_range":
            pass  # writes back a range, waits for nothing durable: no promise (man 2)
        elif k in CONTENT_KEEPING:
            pass  # rule 11: the same bytes, elsewhere on the disk
        elif k == "falloc":
            inode = self.files[op.path]
            keep, zero = FALLOC_MODES[op.mode]
            end = op.offset + op.size
            if keep:
                end = min(end, len(inode.data))
            if zero and end > op.offset:
                self._put(inode, op.offset, bytes(end - op.offset))
            elif not zero and end > len(inode.data):
                self._put(inode, len(inode.data), bytes(end - len(inode.data)))
            inode.changed()
        elif k == "setxattr":
            inode = self.files[op.path]
            inode.xattrs[op.name] = op.data
            inode.xattrs_durable, inode.xattrs_used = False, True
        elif k == "removexattr":
            inode = self.files[op.path]
            del inode.xattrs[op.name]
            inode.xattrs_durable = False
        elif k == "rewrite":  # open(O_TRUNC) + write from 0 (never drawn by the generator)
            inode = self.files[op.path]
            inode.data = bytearray(op.data)
            inode.changed()
        elif k == "truncate":
            inode = self.files[op.path]
            if op.size < len(inode.data):
                del inode.data[op.size :]
            else:
                inode.data.extend(bytes(op.size - len(inode.data)))
            inode.changed()
        elif k in ("rename", "link", "unlink", "mkdir", "rmdir"):
            self._apply_names(op)
        elif k in ("fsync", "fdatasync", "fsync_dir", "sync", "syncfs"):
            self._apply_sync(op)
        else:
            self._apply_more(op)

    def _apply_names(self, op: Any) -> None:
        """rename, link, unlink, mkdir, rmdir: names that come and go (rules 5, 6, 9)."""
        k = op.kind
        if k == "rename" and op.path in self.dirs:
            self._rename_dir(op.path, op.dst)
        elif k == "rename":
            if op.dst in self.files and self.files[op.dst] is self.files[op.path]:
                return  # POSIX: renaming a name onto another link of the same file does nothing
            if op.dst in self.files:
                self.files[op.dst].names_changed = self.ops
            inode = self.files.pop(op.path)
            self._name_goes(op.path, inode)
            self.files[op.dst] = inode
            self._name_appears(op.dst, inode)
        elif k == "link":
            self.files[op.dst] = self.files[op.path]
            self._name_appears(op.dst, self.files[op.path])
        elif k == "unlink":
            inode = self.files.pop(op.path)
            inode.names_changed = self.ops
            self._name_goes(op.path, inode)
        elif k == "mkdir":
            self.dirs[op.path] = False
            self.removed.discard(op.path)
            self.gone.discard(op.path)
        elif k == "rmdir":
            del self.dirs[op.path]
            self.removed.add(op.path)
            for fd, h in self.handles.items():
                if h == op.path:
                    self.handles[fd] = None
                    self.held_removed[fd] = op.path

    def _apply_sync(self, op: Any) -> None:
        """fsync, fdatasync, a directory's fsync, sync and syncfs (rules 1, 8, 9, 14)."""
        k = op.kind
        if k == "fsync":
            self._fsynced(self.files[op.path], op.path)
        elif k == "fdatasync":
            self.files[op.path].data_durable = True
        elif k == "fsync_dir":
            self._dir_synced(op.path)
            if self.ordering is not None:
                self.ordering.persist(self, self.ordering.dir_at.get(op.path, -1))
        elif k in ("sync", "syncfs"):  # syncfs: sync of this filesystem alone
            for inode in self.files.values():
                inode.data_durable = inode.xattrs_durable = True
            for name in self.file_name_durable:
                self.file_name_durable[name] = True
            for d in self.dirs:
                self.dirs[d] = True
            self.gone |= self.removed
            self.removed.clear()
            self.last_sync = self.ops
            if self.ordering is not None:
                self.ordering.pending.clear()
            for inode in self.files.values():
                inode.meta_durable = True

    def _fsynced(self, inode: Inode, path: str | None) -> None:
        """fsync of a file, through ``path`` or a held descriptor (``None``)."""
        inode.data_durable = True
        if not self.fsync_names:
            return
        # Where fsync commits the whole inode (rule 1's filesystems), its attributes,
        # mode and owner go with it (rules 8, 13); and an inode with no name left is
        # committed with its link count 0: its removed names stay gone (rule 15).
        inode.xattrs_durable = inode.meta_durable = True
        if self.ordering is not None:
            self.ordering.persist(self, self.ordering.inode_at.get(inode.ino, -1))
        if path is not None:
            self.file_name_durable[path] = True
        elif inode not in self.files.values():
            mine = {n for n in self.removed if self.removed_ino.get(n) == inode.ino}
            self.gone |= mine
            self.removed -= mine

    def _apply_more(self, op: Any) -> None:
        """The ops of workload files (``opfile.py``): held descriptors, symbolic links,
        metadata alone, renameat2's flags and btrfs subvolumes."""
        k = op.kind
        if k in HANDLE_OPS:
            self._apply_handle(op)
        elif k == "symlink":  # rule 13: an inode whose "data" is its target
            link = self._new_inode()
            link.symlink = op.target
            self.files[op.path] = link
            self._name_appears(op.path, link)
        elif k in INODE_META_OPS:
            meta = self.files.get(op.path)  # a directory's mode is not checked
            if meta is not None and k != "utimes":
                if k == "chmod":
                    meta.perm = op.perm
                else:
                    meta.owner = (op.uid, op.gid)
                meta.meta_durable = False
        elif k == "rename_noreplace":
            self.apply(type(op)("rename", op.path, dst=op.dst))
            self.ops -= 1
        elif k == "exchange":
            self._exchange(op)
        elif k == "linkat" and (tmp := self.handle_inode(op.fd)) is not None:
            self.files[op.path] = tmp
            self._name_appears(op.path, tmp)
        elif k in ("subvol_create", "snapshot"):
            self._subvolume(op)
        else:
            raise ValueError(f"unknown op {k!r}")

    def _apply_handle(self, op: Any) -> None:
        k = op.kind
        if k == "open":
            self.handles[op.fd] = self.files.get(op.path, op.path)
        elif k == "tmpfile":  # O_TMPFILE: an inode without a name until linkat
            self.handles[op.fd] = self._new_inode()
        elif k == "close":
            del self.handles[op.fd]
        elif k == "write_fd":
            inode = self.handle_inode(op.fd)
            assert inode is not None
            self._put(inode, op.offset, op.data)
        elif k == "fdatasync_fd" and (inode := self.handle_inode(op.fd)) is not None:
            inode.data_durable = True
        elif k == "fsync_fd" and (inode := self.handle_inode(op.fd)) is not None:
            self._fsynced(inode, None)
        elif k in ("fsync_fd", "fdatasync_fd"):
            d = self.handles[op.fd]
            if isinstance(d, str):  # a directory still there: its fsync
                self._dir_synced(d)
                if self.ordering is not None and k == "fsync_fd":
                    self.ordering.persist(self, self.ordering.dir_at.get(d, -1))
            elif k == "fsync_fd" and self.fsync_names and op.fd in self.held_removed:
                # A removed directory's inode committed with its link count 0 (rule 15).
                path = self.held_removed[op.fd]
                if path in self.removed:
                    self.removed.discard(path)
                    self.gone.add(path)

    def _exchange(self, op: Any) -> None:
        """renameat2(RENAME_EXCHANGE): both names stay, each now names the other's
        file or tree; neither is durable until its directory is synced (as rename)."""
        a, b = op.path, op.dst
        if a in self.files and b in self.files:
            ia, ib = self.files[a], self.files[b]
            self.files[a], self.files[b] = ib, ia
            for path, inode in ((a, ib), (b, ia)):
                self.file_name_durable[path] = False
                inode.names_changed = self.ops
            return
        tmp = f"{a}.crashlab-exchange"
        for src, dst in ((a, tmp), (b, a), (tmp, b)):
            self.apply(type(op)("rename", src, dst=dst))
            self.ops -= 1
        self.removed -= {a, b, tmp}

    def _subvolume(self, op: Any) -> None:
        """A subvolume is a directory to the namespace; a snapshot a new one holding a
        copy of the source's tree as it is now: new inodes, durable like new files
        (rule 10) once the snapshot's name is."""
        if op.kind == "subvol_create":
            self.apply(type(op)("mkdir", op.path))
            self.ops -= 1
            return
        dirs, files = self.under(op.path)
        for d in dirs:
            self.dirs[op.dst + d[len(op.path) :]] = False
        for f in files:
            src = self.files[f]
            copy = self._new_inode()
            copy.data = bytearray(src.data)
            copy.symlink, copy.xattrs = src.symlink, dict(src.xattrs)
            copy.data_durable = False
            path = op.dst + f[len(op.path) :]
            self.files[path] = copy
            self._name_appears(path, copy)
        self.removed.discard(op.dst)
        self.gone.discard(op.dst)

    @staticmethod
    def _put(inode: Inode, offset: int, data: bytes) -> None:
        """Bytes written at ``offset``, the file extended with zeros up to it."""
        if len(inode.data) < offset:
            inode.data.extend(bytes(offset - len(inode.data)))
        inode.data[offset : offset + len(data)] = data
        inode.changed()

    def under(self, d: str) -> tuple[list[str], list[str]]:
        """The directories and file names at or below directory ``d``."""
        pre = d + "/"
        return (
            [x for x in self.dirs if x == d or x.startswith(pre)],
            [f for f in self.files if f.startswith(pre)],
        )

    def _rename_dir(self, src: str, dst: str) -> None:
        """Rule 9: the tree moves whole; only the new top name is not yet durable."""
        dirs, files = self.under(src)

        def moved(path: str) -> str:
            return dst + path[len(src) :]

        for d in dirs:
            self.dirs[moved(d)] = self.dirs.pop(d)
        for fd, h in self.handles.items():  # a held directory moves with its tree
            if isinstance(h, str) and h in dirs:
                self.handles[fd] = moved(h)
        for f in files:
            inode = self.files.pop(f)
            self.files[moved(f)] = inode
            self.file_name_durable[moved(f)] = self.file_name_durable.pop(f)
            inode.names_changed = self.ops
        self.dirs[dst] = False
        self.removed.add(src)
        self.removed.discard(dst)
        self.gone.discard(dst)

    def _dir_synced(self, d: str) -> None:
        for name in self.file_name_durable:
            if parent(name) == d:
                self.file_name_durable[name] = True
        for sub in self.dirs:
            if sub and parent(sub) == d:
                self.dirs[sub] = True
        gone = {n for n in self.removed if parent(n) == d}
        self.gone |= gone
        self.removed -= gone

    def appends(self, op: Any) -> bool:
        """Whether ``op`` writes only past the file's end (rule 4). ACE's ``append``
        writes at the base file's size: after a truncate that grew the file, it
        overwrites bytes that were there, and is no append."""
        inode = self.files.get(op.path) if op.kind == "append" else None
        return inode is not None and op.offset >= len(inode.data)

    def touches(self, op: Any) -> tuple[set[str], set[int]]:
        """Names and inodes an op changes; call before ``apply``."""
        k = op.kind
        if k in SYNC_OPS or k == "sync_file_range" or k in CONTENT_KEEPING:
            return set(), set()
        if k in ("open", "close", "tmpfile"):
            return set(), set()
        if k == "write_fd":
            inode = self.handle_inode(op.fd)
            return set(), {inode.ino} if inode else set()
        if k == "linkat":
            inode = self.handle_inode(op.fd)
            return {op.path}, {inode.ino} if inode else set()
        if k in ("create", "mkdir", "rmdir", "symlink", "subvol_create"):
            return {op.path}, set()
        if k in INODE_META_OPS and op.path not in self.files:
            return set(), set()  # a directory's metadata: not checked
        if k == "snapshot":
            return {op.dst}, set()
        if k == "exchange" and (op.path in self.dirs or op.dst in self.dirs):
            paths: set[str] = set()
            inodes: set[int] = set()
            for a, b in ((op.path, op.dst), (op.dst, op.path)):
                p, i = self.touches(type(op)("rename", a, dst=b))
                paths |= p
                inodes |= i
            return paths, inodes
        if k in ("rename", "rename_noreplace") and op.path in self.dirs:
            dirs, files = self.under(op.path)
            moved = {op.dst + f[len(op.path) :] for f in files}
            return {*dirs, op.dst, *files, *moved}, {self.files[f].ino for f in files}
        inodes = {self.files[op.path].ino}
        if k in ("rename", "exchange") and op.dst in self.files:
            inodes.add(self.files[op.dst].ino)
        return {op.path, op.dst} - {""}, inodes

    def dir_durable(self, d: str) -> bool:
        while d:
            if not self.dirs.get(d, False):  # not durable, or removed since
                return False
            d = parent(d)
        return True

    def durable_files(self) -> dict[str, dict[str, Any]]:
        """Durable files: path -> {ino, sha256, size[, nlink]} (rules 1 and 7)."""
        names: dict[int, int] = {}
        for inode in self.files.values():
            names[inode.ino] = names.get(inode.ino, 0) + 1
        out: dict[str, dict[str, Any]] = {}
        for path, inode in self.files.items():
            if (
                inode.data_durable
                and self.file_name_durable[path]
                and self.dir_durable(parent(path))
            ):
                req: dict[str, Any] = {
                    "ino": inode.ino,
                    "sha256": inode.sha256(),
                    "size": len(inode.data),
                }
                if inode.names_changed < self.last_sync:
                    req["nlink"] = names[inode.ino]
                if inode.xattrs_used and inode.xattrs_durable:
                    req["xattrs"] = {n: v.hex() for n, v in sorted(inode.xattrs.items())}
                if inode.symlink is not None:
                    req["symlink"] = inode.symlink
                if inode.meta_durable and inode.perm is not None:
                    req["mode"] = inode.perm
                if inode.meta_durable and inode.owner is not None:
                    req["owner"] = list(inode.owner)
                out[path] = req
        return out

    def durable_dirs(self) -> list[str]:
        return sorted(d for d in self.dirs if d and self.dir_durable(d))

    def durable_absent(self) -> list[str]:
        """Names whose removal is durable (rule 6), under durable directories."""
        return sorted(n for n in self.gone if self.dir_durable(parent(n)))


class Ordering:
    """Rule 18: on the ordered-metadata profile a namespace op (create, link, unlink,
    rename, mkdir, rmdir, symlink) is durable once a file or directory changed after it
    is fsync'd: one journal commits in order, so the commit that makes the fsync'd
    inode's last change durable makes every earlier one durable too."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, str, str, Inode | None]] = []
        self.inode_at: dict[int, int] = {}  # an inode -> the op that last changed it
        self.dir_at: dict[str, int] = {}  # a directory -> the op that last changed its entries

    def after(self, model: Model, paths: set[str], inodes: set[int]) -> None:
        """Note what the op just applied (which changed ``paths`` and ``inodes``) did."""
        for ino in inodes:
            self.inode_at[ino] = model.ops
        for p in paths:
            self.dir_at[parent(p)] = model.ops
            if p in model.files:
                self.pending.append((model.ops, "name", p, model.files[p]))
            elif p in model.dirs:
                self.dir_at[p] = model.ops
                self.pending.append((model.ops, "dir", p, None))
            elif p in model.removed:
                self.pending.append((model.ops, "gone", p, None))

    def persist(self, model: Model, horizon: int) -> None:
        """Every namespace op up to op ``horizon`` is durable (those since undone by a
        later op no longer name what they made, and are passed over)."""
        keep = []
        for entry in self.pending:
            i, kind, p, inode = entry
            if i > horizon:
                keep.append(entry)
            elif kind == "name" and model.files.get(p) is inode:
                model.file_name_durable[p] = True
            elif kind == "dir" and p in model.dirs:
                model.dirs[p] = True
            elif kind == "gone" and p in model.removed:
                model.removed.discard(p)
                model.gone.add(p)
        self.pending = keep


class Recorder:
    """Keeps the marks; each mark's interval requirements are settled at the next one."""

    def __init__(self) -> None:
        self.marks: list[dict[str, Any]] = []
        self._pending: dict[str, Any] | None = None
        self._paths: set[str] = set()
        self._inodes: set[int] = set()
        self._appended: set[int] = set()  # inodes appended to in this interval ...
        self._other: set[int] = set()  # ... and inodes changed any other way
        self._either: dict[str, tuple[list[str], set[int]]] = {}

    def touch(self, op: Any, paths: set[str], inodes: set[int], append: bool) -> None:
        """Record what ``op`` changes (before the model applies it); ``append``: it
        writes only past the file's end (``Model.appends``)."""
        for path in [p for p, (_, i) in self._either.items() if p in paths or i & inodes]:
            del self._either[path]  # touched again after the rename: rule 5 no longer holds
        if self._pending is not None and op.kind == "rename":
            self._rename_over(op, self._pending["files"])
        self._paths |= paths
        self._inodes |= inodes
        (self._appended if append else self._other).update(inodes)

    def _rename_over(self, op: Any, files: dict[str, dict[str, Any]]) -> None:
        """Rule 5: both names durable at the mark and untouched since."""
        src, dst = files.get(op.path), files.get(op.dst)
        if src is None or dst is None or {op.path, op.dst} & self._paths:
            return
        if "symlink" in src or "symlink" in dst:
            return  # a link's target is not a digest: no either-or of links (conservative)
        inodes = {src["ino"], dst["ino"]}
        if not inodes & self._inodes:
            self._either[op.dst] = (sorted({dst["sha256"], src["sha256"]}), inodes)

    def settle(self) -> None:
        """Close the pending mark: split what was touched since out of its requirements."""
        entry = self._pending
        if entry is None:
            return
        kept: dict[str, Any] = {}
        touched: dict[str, Any] = {}
        prefixes: dict[str, Any] = {}
        for path, req in sorted(entry.pop("files").items()):
            ino = req.pop("ino")
            if path not in self._paths and ino not in self._inodes:
                kept[path] = req
                continue
            touched[path] = req
            if ino in self._appended and ino not in self._other:  # rule 4
                prefixes[path] = {"sha256": req["sha256"], "size": req["size"]}
        absent = entry.pop("absent")
        entry["files"] = kept
        entry["prefixes"] = prefixes
        entry["either"] = {p: shas for p, (shas, _) in self._either.items()}
        entry["absent"] = [n for n in absent if n not in self._paths]
        # Rule 3: a state cut exactly at the mark holds none of the interval's changes.
        entry["exact"] = {"files": touched, "absent": [n for n in absent if n in self._paths]}
        entry["dirs"] = [d for d in entry["dirs"] if d not in self._paths]
        self.marks.append(entry)
        self._pending = None

    @property
    def pending(self) -> dict[str, Any] | None:
        return self._pending

    def mark(self, model: Model, text: str, after_op: int) -> None:
        self.settle()
        self._pending = {
            "mark": text,
            "n": len(self.marks) + 1,
            "after_op": after_op,
            "files": model.durable_files(),
            "dirs": model.durable_dirs(),
            "absent": model.durable_absent(),
        }
        self._paths, self._inodes = set(), set()
        self._appended, self._other = set(), set()
        self._either = {}


# The promises a run is judged by: POSIX alone (fsync makes a file's data durable, a
# directory's fsync or sync its names), or the journaled filesystems' (ext3/ext4 with a
# journal, xfs, btrfs, jfs, f2fs, reiserfs): fsync also makes the name it was called
# through durable and commits the whole inode (rules 1, 8, 10, 14, 15).
PROFILES = ("posix", "fsync-names", "ordered-metadata")


def profile_of(fsync_names: bool, ordered: bool = False) -> str:
    return PROFILES[0] if not fsync_names else PROFILES[1 + ordered]


class Floor:
    """What a weaker profile requires at each mark, beside a stronger profile's model: a
    failed requirement the floor also makes broke the weaker promise too."""

    def __init__(self, profile: str) -> None:
        self.profile = profile
        self.model = Model(fsync_names=profile != "posix")
        self.rec = Recorder()

    def touch(self, op: Any) -> None:
        paths, inodes = self.model.touches(op)
        self.rec.touch(op, paths, inodes, self.model.appends(op))

    def label(self, marks: list[dict[str, Any]]) -> None:
        """Give each of the stronger profile's ``marks`` the names this profile requires
        there (``floors[profile]``: and ``exact``, when cut exactly at it)."""
        self.rec.settle()
        for entry, low in zip(marks, self.rec.marks, strict=True):
            names = {*low["files"], *low["prefixes"], *low["either"], *low["absent"]}
            names |= {d + "/" for d in low["dirs"]}
            exact = sorted({*low["exact"]["files"], *low["exact"]["absent"]})
            entry.setdefault("floors", {})[self.profile] = {"names": sorted(names), "exact": exact}


def floors(profile: str) -> list[Floor]:
    """The weaker profiles' floors of a run judged by ``profile``."""
    return [Floor(p) for p in PROFILES[: PROFILES.index(profile)]]


class Tracker:
    """A run's model and recorder, with the weaker profiles' floors beside them: what
    ``opgen.execute`` tells of every op, and the marks it returns."""

    def __init__(self, fsync_names: bool, ordered: bool = False) -> None:
        self.profile = profile_of(fsync_names, ordered)
        self.model = Model(fsync_names, ordered)
        self.rec = Recorder()
        self.lower = floors(self.profile)

    def before(self, op: Any) -> None:
        """``op`` is about to run: what it touches leaves the open interval's requirements."""
        paths, inodes = self.model.touches(op)
        self.rec.touch(op, paths, inodes, self.model.appends(op))
        for floor in self.lower:
            floor.touch(op)

    def after(self, op: Any) -> None:
        self.model.apply(op)
        for floor in self.lower:
            floor.model.apply(op)

    def next_mark(self) -> str:
        return f"{MARK_PREFIX}{len(self.rec.marks) + 1 + (self.rec.pending is not None)}"

    def mark(self, text: str, after_op: int) -> None:
        self.rec.mark(self.model, text, after_op)
        for floor in self.lower:
            floor.rec.mark(floor.model, text, after_op)

    def marks(self) -> list[dict[str, Any]]:
        """Every mark's requirements, settled, each labelled with its floors."""
        self.rec.settle()
        for floor in self.lower:
            floor.label(self.rec.marks)
        return self.rec.marks


def load_oracle(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise UsageError(f"--oracle {path}: {e.strerror}") from None
    except ValueError as e:
        raise UsageError(f"--oracle {path}: not JSON: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"--oracle {path}: not a {FORMAT} file")
    return data


def file_digest(path: str, limit: int | None = None) -> tuple[str, int]:
    """sha256 and length of the file (of its first ``limit`` bytes)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20 if limit is None else min(1 << 20, limit - size)):
            h.update(chunk)
            size += len(chunk)
            if limit is not None and size >= limit:
                break
    return h.hexdigest(), size


def user_xattrs(path: str) -> dict[str, str]:
    """A file's ``user.`` attributes, values in hex (what the oracle stores)."""
    names = sorted(n for n in os.listxattr(path) if n.startswith("user."))
    return {n: os.getxattr(path, n).hex() for n in names}


def _promise(
    oracle: dict[str, Any], req: dict[str, Any] | None, failed: set[str], exact: bool
) -> str | None:
    """Which promise a failed check broke: the weakest profile that required one of the
    failed names (``posix`` when POSIX alone did), else the run's own."""
    if not failed or req is None:
        return None
    profile = _profile(oracle)
    for weaker, floor in req.get("floors", {}).items():  # weakest first
        if failed & {*floor["names"], *(floor["exact"] if exact else [])}:
            return str(weaker)
    return profile


def _profile(oracle: dict[str, Any]) -> str:
    """The profile a run's oracle judges by (one written before profiles: its fsync_names)."""
    return str(oracle.get("profile", profile_of(bool(oracle.get("fsync_names", True)))))


def _meta_ok(st: os.stat_result, want: dict[str, Any]) -> bool:
    """Rule 13: the mode and owner a chmod / chown set, once durable."""
    if "mode" in want and stat.S_IMODE(st.st_mode) != want["mode"]:
        return False
    return "owner" not in want or [st.st_uid, st.st_gid] == want["owner"]


def requirements(oracle: dict[str, Any], mark: str | None, exact: bool) -> dict[str, Any] | None:
    """What a state whose last mark is ``mark`` must hold (None: nothing)."""
    if mark in AFTER_FINAL and oracle.get("final_mark"):
        mark, exact = oracle["final_mark"], True  # nothing happened after the final sync
    entry: dict[str, Any] | None = next((m for m in oracle["marks"] if m["mark"] == mark), None)
    if entry is None:
        return None
    if not exact:
        return entry
    more = entry["exact"]
    return {
        **entry,
        "files": {**entry["files"], **more["files"]},
        "absent": [*entry["absent"], *more["absent"]],
        "prefixes": {},
        "either": {},
    }


def verify(
    root: str, oracle: dict[str, Any], mark: str | None, exact: bool = False
) -> dict[str, Any]:
    """Check what ``mark`` requires of the tree at ``root`` (the rules of the module
    docstring). OSError reading a required file is reported per file (unreadable data is
    lost data); the caller treats any other exception as the lab's own failure."""
    req = requirements(oracle, mark, exact)
    seen = _Seen(root)
    if req is not None:
        for d in req["dirs"]:
            seen.checked += 1
            if not os.path.isdir(os.path.join(root, d)):
                seen.missing.append(d + "/")
        for path, want in req["files"].items():
            seen.checked += 1
            seen.content(path, want)
        for path, want in req.get("prefixes", {}).items():
            seen.checked += 1
            seen.content(path, want, limit=want["size"])
        for path, shas in req.get("either", {}).items():
            seen.checked += 1
            seen.either(path, shas)
        for name in req.get("absent", []):
            seen.checked += 1
            if os.path.lexists(os.path.join(root, name)):
                seen.present.append(name)
    missing, mismatched, present, nlink = seen.missing, seen.mismatched, seen.present, seen.nlink
    failed = {*missing, *present, *(m["path"] for m in [*mismatched, *nlink])}
    return {
        "mark": mark,
        "exact": exact,
        "known": req is not None,
        "profile": _profile(oracle),
        "promise": _promise(oracle, req, failed, exact or mark in AFTER_FINAL),
        "checked": seen.checked,
        "missing": missing,
        "mismatched": mismatched,
        "present": present,
        "nlink": nlink,
        "ok": not (missing or mismatched or present or nlink),
    }


class _Seen:
    """What ``verify`` found under ``root`` so far, requirement by requirement."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.missing: list[str] = []
        self.mismatched: list[dict[str, Any]] = []
        self.present: list[str] = []
        self.nlink: list[dict[str, Any]] = []
        self.checked = 0

    def content(self, path: str, want: dict[str, Any], limit: int | None = None) -> None:
        """The file's bytes (its first ``limit``), size, link count, xattrs, mode and
        owner; a symbolic link's target."""
        full = os.path.join(self.root, path)
        if "symlink" in want:  # rule 13: the link itself, never what it points at
            self.link(path, full, want["symlink"])
            return
        if not os.path.isfile(full) or os.path.islink(full):
            self.missing.append(path)
            return
        try:
            got, size = file_digest(full, limit)
            st = os.stat(full)
        except OSError as e:
            self.mismatched.append({"path": path, "error": e.strerror})
            return
        if limit is not None and size < limit:
            self.mismatched.append({"path": path, "prefix": limit, "size": size})
        elif got != want["sha256"] or (limit is None and st.st_size != want["size"]):
            self.mismatched.append(
                {
                    "path": path,
                    "expected": want["sha256"],
                    "got": got,
                    "size": st.st_size,
                    "expected_size": want["size"],
                }
            )
        elif limit is None:
            self.inode(path, full, st, want)

    def inode(self, path: str, full: str, st: os.stat_result, want: dict[str, Any]) -> None:
        """What the whole inode must hold beside the data: rules 7, 8 and 14."""
        if "nlink" in want and st.st_nlink != want["nlink"]:
            self.nlink.append({"path": path, "nlink": st.st_nlink, "expected": want["nlink"]})
        elif "xattrs" in want and (got_x := user_xattrs(full)) != want["xattrs"]:
            self.mismatched.append({"path": path, "xattrs": got_x, "expected": want["xattrs"]})
        elif not _meta_ok(st, want):
            got_m = {"mode": stat.S_IMODE(st.st_mode), "owner": [st.st_uid, st.st_gid]}
            expected = {"expected_mode": want.get("mode"), "expected_owner": want.get("owner")}
            self.mismatched.append({"path": path, "metadata": got_m, **expected})

    def link(self, path: str, full: str, target: str) -> None:
        if not os.path.islink(full):
            self.missing.append(path)
        elif (got := os.readlink(full)) != target:
            self.mismatched.append({"path": path, "symlink": got, "expected": target})

    def either(self, path: str, shas: list[str]) -> None:
        """The file holds one of ``shas``: any of them is what the mark allows."""
        full = os.path.join(self.root, path)
        if not os.path.isfile(full):
            self.missing.append(path)
            return
        try:
            got, _ = file_digest(full)
        except OSError as e:
            self.mismatched.append({"path": path, "error": e.strerror})
            return
        if got not in shas:
            self.mismatched.append({"path": path, "either": shas, "got": got})
