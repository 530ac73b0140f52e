"""The model: the namespace and contents the real filesystem should hold after each op,
and which of it is durable (the rules of ``oracle/__init__.py``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ..ops import (
    CONTENT_KEEPING,
    FALLOC_MODES,
    HANDLE_OPS,
    INODE_META_OPS,
    RENAMES,
    SHUTDOWN_FLAGS,
    SPECS,
    SYNC_OPS,
    SYNCED_WRITES,
    WRITE_OPS,
    parent,
)
from .ordering import Ordering


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
        # A log flush (shutdown_logflush) made every name durable with its inode, not its
        # data: such files must exist, any content (``durable_named``). Not yet said of a
        # directory's fsync, whose new files the stock kernels are still to be measured on.
        self.names_hold_inodes = False

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
        elif k in ("fsync", "fdatasync", "fsync_dir", "sync", "syncfs", *SHUTDOWN_FLAGS):
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
        """fsync, fdatasync, a directory's fsync, sync and syncfs (rules 1, 8, 9, 14), and
        the shutdowns: the default one freezes (a sync) first, logflush forces the log
        (``_log_flushed``), nologflush makes nothing durable."""
        k = SPECS[op.kind].persists if op.kind in SHUTDOWN_FLAGS else op.kind
        if op.kind in SHUTDOWN_FLAGS and not self.fsync_names:
            return  # POSIX has no shutdown: what one makes durable is the filesystem's word
        if k == "names":
            self._log_flushed()
            return
        if k == "fsync":
            self._fsynced(self.files[op.path], op.path)
        elif k == "fdatasync":
            self.files[op.path].data_durable = True
        elif k == "fsync_dir":
            self._dir_synced(op.path)
            if self.ordering is not None:
                self.ordering.persist(self, self.ordering.dir_at.get(op.path, -1))
        elif k in ("sync", "syncfs"):  # syncfs: sync of this filesystem alone
            self._metadata_durable()
            for inode in self.files.values():
                inode.data_durable = True
            self.last_sync = self.ops

    def _log_flushed(self) -> None:
        """A log force: every namespace op and inode update is in the log, so every name,
        directory and removal is durable, and each inode's attributes; not the data a
        delayed allocation or a writeback has not reached (ext4's ordered commit writes
        only allocated blocks; xfs's log holds no file data)."""
        self._metadata_durable()
        self.names_hold_inodes = True

    def _metadata_durable(self) -> None:
        """What sync and a log force share: every name, directory and removal, and each
        inode's attributes, durable."""
        for name in self.file_name_durable:
            self.file_name_durable[name] = True
        for d in self.dirs:
            self.dirs[d] = True
        self.gone |= self.removed
        self.removed.clear()
        for inode in self.files.values():
            inode.xattrs_durable = inode.meta_durable = True
        if self.ordering is not None:
            self.ordering.pending.clear()

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
        elif SPECS[k].model_as:  # renameat2(RENAME_NOREPLACE): a rename, to a free name
            self.apply(type(op)(SPECS[k].model_as, op.path, dst=op.dst))
            self.ops -= 1
        elif k == "exchange":
            self._exchange(op)
        elif k == "linkat" and (tmp := self.handle_inode(op.fd)) is not None:
            self.files[op.path] = tmp
            self._name_appears(op.path, tmp)
        elif k in ("subvol_create", "snapshot"):
            self._subvolume(op)
        elif k == "clone":
            self._clone(op)
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

    def _clone(self, op: Any) -> None:
        """Rule 19: FICLONE into a new file -- a new inode holding the source's bytes as
        they are now, its data durable like written data (fsync of the new file), its
        name like a new file's; the source unchanged."""
        copy = self._new_inode()
        copy.data = bytearray(self.files[op.path].data)
        copy.data_durable = copy.data_durable and not copy.data
        self.files[op.dst] = copy
        self._name_appears(op.dst, copy)

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
        if k in ("snapshot", "clone"):  # a new name; the source's bytes unchanged
            return {op.dst}, set()
        if k == "exchange" and (op.path in self.dirs or op.dst in self.dirs):
            paths: set[str] = set()
            inodes: set[int] = set()
            for a, b in ((op.path, op.dst), (op.dst, op.path)):
                p, i = self.touches(type(op)("rename", a, dst=b))
                paths |= p
                inodes |= i
            return paths, inodes
        if k in RENAMES and op.path in self.dirs:
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

    def durable_named(self) -> list[str]:
        """Files whose name and inode a log flush made durable but not their data: they
        must exist, whatever they hold (rule 1's name)."""
        if not self.names_hold_inodes:
            return []
        return sorted(
            p for p, inode in self.files.items()
            if not inode.data_durable and self.file_name_durable[p]
            and self.dir_durable(parent(p))
        )  # fmt: skip

    def durable_dirs(self) -> list[str]:
        return sorted(d for d in self.dirs if d and self.dir_durable(d))

    def durable_absent(self) -> list[str]:
        """Names whose removal is durable (rule 6), under durable directories."""
        return sorted(n for n in self.gone if self.dir_durable(parent(n)))
