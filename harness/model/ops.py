"""The ops a workload is made of: one table, each op written once (stdlib only: the host
and the guest import it).

A row (``Spec``) says of one op: its name and arguments (a workload file's words, in
order), the call it makes (``syscall``; ``guest/syscalls.py`` makes it), whether it is a
persistence point and which sync it amounts to (``persists``), what it does to the
namespace and to the bytes (the flags the oracle, the workload-file checker, the
generator and the families read), which filesystems can do it, and its shell spelling
(``shell``: one template, rendered for an fstests test or a plain script by
``shell.spell``). The sets below (``PERSIST_OPS``, ``WRITE_OPS``, ...) are read off the
table, never listed by hand.

``Op`` is one operation of a workload; ``Op.describe`` is its entry in the oracle's op
list (the table's arguments, ``length`` for the bytes), ``Op.from_entry`` reads one back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Argument types, by name: what a workload file's word becomes (opfile.py checks them).
ARG_TYPES = {
    "path": "path", "dst": "path", "target": "text", "offset": "size", "length": "size",
    "size": "size", "mode": "falloc-mode", "name": "xattr", "fd": "descriptor",
    "perm": "octal", "uid": "int", "gid": "int",
}  # fmt: skip


@dataclass(frozen=True)
class Spec:
    """One op of the table (the module docstring says what each part is for)."""

    name: str
    args: tuple[str, ...]
    syscall: str
    shell: str = ""  # a template of shell.spell's fields; "" with ``no_shell`` saying why
    persists: str = ""  # a persistence point: the sync it amounts to (rule 1)
    writes: bool = False  # changes a file's bytes as a write(2) of ``data`` at ``offset``
    on_file: bool = False  # acts on an existing regular file, by name
    makes: str = ""  # the argument naming what it creates ("path" or "dst")
    frees: bool = False  # the name at ``path`` goes (rename's kind, unlink, rmdir)
    creates: bool = False  # a workload file's write to a new name creates the file first
    direct: bool = False  # O_DIRECT: block-aligned offset and length
    meta: bool = False  # changes an inode's metadata alone (rule 14)
    handle: bool = False  # acts through a descriptor the workload holds
    keeps_content: bool = False  # moves blocks, promises the bytes unchanged (rule 11)
    renames: bool = False  # moves what ``path`` names to ``dst`` (rename's kind)
    model_as: str = ""  # the oracle models it as this op (its flags changed only checks)
    fs: tuple[str, ...] = ()  # the only filesystems that can do it (() for all)
    in_files: bool = True  # a workload file may name it
    requires: tuple[str, ...] = ()  # the fstests _require lines its test needs
    no_shell: str = ""  # why no shell command can do it
    ends: bool = False  # the filesystem takes no op after it: the workload's last
    # errno names the call answers on any disk, recorded as the op failed (rule 22)
    answers: tuple[str, ...] = ()

    def usage(self) -> str:
        return " ".join([self.name, *(a.upper() for a in self.args)])


_IO_WRITE = '{io} -f {flags}-c "pwrite -q {off} {n}" {p}'
# FS_IOC_SHUTDOWN: ext4 (which serves ext3 here), xfs and f2fs; btrfs has none on the
# kernels the lab boots (6.1, 6.12).
SHUTDOWN_FS = ("ext3", "ext4", "xfs", "f2fs")
_S = Spec
TABLE: tuple[Spec, ...] = (
    # The namespace.
    _S("create", ("path",), "open(O_CREAT|O_EXCL)", "touch {p}", makes="path"),
    _S("mkdir", ("path",), "mkdir(2)", "mkdir {p}", makes="path"),
    _S("rmdir", ("path",), "rmdir(2)", "rmdir {p}", frees=True),
    _S("unlink", ("path",), "unlink(2)", "rm -f {p}", frees=True),
    _S("rename", ("path", "dst"), "rename(2)", "mv -T {p} {dst}", frees=True, renames=True),
    _S("rename_noreplace", ("path", "dst"), "renameat2(RENAME_NOREPLACE)",
       "{renameat2} -n {p} {dst}", frees=True, makes="dst", renames=True, model_as="rename",
       requires=("_require_renameat2 noreplace",)),
    _S("exchange", ("path", "dst"), "renameat2(RENAME_EXCHANGE)", "{renameat2} -x {p} {dst}",
       requires=("_require_renameat2 exchange",)),
    _S("link", ("path", "dst"), "link(2)", "ln {p} {dst}", makes="dst"),
    _S("symlink", ("target", "path"), "symlink(2)", "ln -s {target} {p}", makes="path"),
    _S("subvol_create", ("path",), "BTRFS_IOC_SUBVOL_CREATE", "{btrfs} create {p}{quiet}",
       makes="path", fs=("btrfs",)),
    _S("snapshot", ("path", "dst"), "BTRFS_IOC_SNAP_CREATE_V2",
       "{btrfs} snapshot {p} {dst}{quiet}", makes="dst", fs=("btrfs",)),
    # The bytes.
    _S("write", ("path", "offset", "length"), "pwrite(2)", _IO_WRITE, writes=True,
       on_file=True, creates=True),
    _S("overwrite", ("path", "offset", "length"), "pwrite(2) inside the file", _IO_WRITE,
       writes=True, on_file=True),
    _S("append", ("path", "length"), "pwrite(2) at the end", _IO_WRITE, writes=True,
       on_file=True, creates=True),
    _S("dwrite", ("path", "offset", "length"), "pwrite(2), O_DIRECT", _IO_WRITE, writes=True,
       on_file=True, creates=True, direct=True, requires=("_require_odirect",)),
    _S("mwrite", ("path", "offset", "length"), "mmap(2) store, msync(MS_SYNC)",
       '{io} -c "mmap -w {off} {n}" -c "mwrite -S {pattern} {off} {n}" -c "msync {off} {n}" {p}',
       writes=True, on_file=True, requires=('_require_xfs_io_command "mmap"',)),
    _S("rewrite", ("path", "length"), "open(O_TRUNC), pwrite(2) from 0",
       '{io} -t -c "pwrite -q 0 {n}" {p}', in_files=False),
    _S("truncate", ("path", "size"), "truncate(2)", '{io} -c "truncate {size}" {p}',
       on_file=True),
    _S("falloc", ("path", "mode", "offset", "size"), "fallocate(2)",
       '{io} -c "{falloc} {off} {size}" {p}', on_file=True),
    _S("clone", ("path", "dst"), "ioctl(FICLONE) into a new file",
       '{io} -f -c "reflink {p}" {dst}', makes="dst", fs=("btrfs", "xfs"),
       requires=("_require_scratch_reflink", '_require_xfs_io_command "reflink"')),
    _S("defrag", ("path",), "EXT4_IOC_MOVE_EXT (e4defrag)", "{e4defrag} {p}{quiet_all}",
       on_file=True, keeps_content=True, fs=("ext4",), requires=("_require_defrag",)),
    # f2fs's foreground garbage collection (`f2fs_io gc 1`): the section with the fewest
    # valid blocks moved, no content changed, no promise made.
    _S("f2fs_gc", (), "ioctl(F2FS_IOC_GARBAGE_COLLECT), sync", "{f2fs_io} gc 1 {p}",
       keeps_content=True, fs=("f2fs",), requires=("_require_f2fs_io_command gc",)),
    # Metadata alone.
    _S("chmod", ("path", "perm"), "chmod(2)", "chmod {perm} {p}", meta=True),
    _S("chown", ("path", "uid", "gid"), "chown(2)", "chown {uid}:{gid} {p}", meta=True),
    _S("utimes", ("path",), "utimensat(2)", "touch -m -a -d @{time} {p}", meta=True),
    _S("setxattr", ("path", "name", "length"), "setxattr(2)",
       "{setfattr} -n {name} -v 0x{value} {p}", on_file=True, requires=("_require_attrs",),
       answers=("ENOSPC", "E2BIG")),
    _S("removexattr", ("path", "name"), "removexattr(2)", "{setfattr} -x {name} {p}",
       on_file=True, requires=("_require_attrs",)),
    # Persistence points.
    _S("fsync", ("path",), "fsync(2)", '{io} -c "fsync" {p}', persists="fsync"),
    _S("fdatasync", ("path",), "fdatasync(2)", '{io} -c "fdatasync" {p}', persists="fdatasync",
       on_file=True),
    _S("fsync_dir", ("path",), "fsync(2) of a directory", '{io} -c "fsync" {p}',
       persists="fsync_dir"),
    _S("sync", (), "sync(2)", "sync", persists="sync"),
    _S("syncfs", (), "syncfs(2)", '{io} -c "syncfs" {p}', persists="sync"),
    _S("osync_write", ("path", "offset", "length"), "pwrite(2), O_SYNC", _IO_WRITE,
       persists="fsync", writes=True, on_file=True, creates=True),
    _S("odsync_write", ("path", "offset", "length"), "pwrite(2), O_DSYNC", _IO_WRITE,
       persists="fdatasync", writes=True, on_file=True, creates=True),
    _S("dwrite_dsync", ("path", "offset", "length"), "pwritev2(RWF_DSYNC), O_DIRECT",
       '{io} -d -c "pwrite -q -V 1 -D {off} {n}" {p}', persists="fdatasync", writes=True,
       on_file=True, creates=True, direct=True, requires=("_require_odirect",)),
    # Writes back a range, waits for nothing durable: no promise (sync_file_range(2)).
    _S("sync_file_range", ("path",), "sync_file_range(2)",
       '{io} -c "sync_range -w {off} {range}" {p}', on_file=True),
    # Held descriptors: a shell descriptor; xfs_io reaches its inode through
    # /proc/self/fd (the same inode, also once its last name is gone).
    _S("open", ("fd", "path"), "open(2), held", "exec {{{fd}}}<{p}", handle=True),
    _S("close", ("fd",), "close(2)", "exec {{{fd}}}<&-", handle=True),
    _S("tmpfile", ("fd", "path"), "open(O_TMPFILE), held", handle=True, makes="",
       no_shell="O_TMPFILE's descriptor cannot be held across shell commands (xfs_io -T "
       "holds it for one invocation only)"),
    _S("linkat", ("fd", "path"), "linkat(AT_EMPTY_PATH)", makes="path",
       no_shell="it names an O_TMPFILE descriptor, which no shell command holds"),
    _S("write_fd", ("fd", "offset", "length"), "pwrite(2) through a held descriptor",
       '{io} -c "pwrite -q {off} {n}" {held}', handle=True),
    _S("fsync_fd", ("fd",), "fsync(2) through a held descriptor", '{io} -r -c "fsync" {held}',
       persists="fsync", handle=True),
    _S("fdatasync_fd", ("fd",), "fdatasync(2) through a held descriptor",
       '{io} -r -c "fdatasync" {held}', persists="fdatasync", handle=True),
    # A crash by shutdown (FS_IOC_SHUTDOWN): the filesystem stops taking I/O, the disk keeps
    # what it was sent (no cache is lost), and the workload ends there. What it makes
    # durable first is its flag's: a freeze (default: as sync), a log force (logflush: the
    # names the log holds, not the data it does not), nothing (nologflush). fstests'
    # _scratch_shutdown is xfs_io's `shutdown` (nologflush) and `shutdown -f` (logflush).
    _S("shutdown", (), "ioctl(FS_IOC_SHUTDOWN, DEFAULT)", persists="sync", ends=True,
       fs=SHUTDOWN_FS, no_shell="xfs_io's shutdown sends only the log flags; the default "
       "flag's freeze first has no shell spelling"),
    _S("shutdown_logflush", (), "ioctl(FS_IOC_SHUTDOWN, LOGFLUSH)",
       '{io} -x -c "shutdown -f" {p}', persists="names", ends=True, fs=SHUTDOWN_FS,
       requires=("_require_scratch_shutdown",)),
    _S("shutdown_nologflush", (), "ioctl(FS_IOC_SHUTDOWN, NOLOGFLUSH)",
       '{io} -x -c "shutdown" {p}', persists="nothing", ends=True, fs=SHUTDOWN_FS,
       requires=("_require_scratch_shutdown",)),
)  # fmt: skip
SPECS: dict[str, Spec] = {s.name: s for s in TABLE}
# Persistence points (a mark follows each), and those that also write: the sync each is.
PERSIST_OPS = frozenset(s.name for s in TABLE if s.persists)
SYNC_OPS = frozenset(s.name for s in TABLE if s.persists and not s.writes)
SYNCED_WRITES = {s.name: s.persists for s in TABLE if s.persists and s.writes}
WRITE_OPS = frozenset(s.name for s in TABLE if s.writes)
CONTENT_KEEPING = frozenset(s.name for s in TABLE if s.keeps_content)
INODE_META_OPS = frozenset(s.name for s in TABLE if s.meta)
HANDLE_OPS = frozenset(s.name for s in TABLE if s.handle)
RENAMES = frozenset(s.name for s in TABLE if s.renames)
ENDS = frozenset(s.name for s in TABLE if s.ends)
# FS_IOC_SHUTDOWN's flags (linux/fs.h: FS_SHUTDOWN_FLAGS_*; f2fs's F2FS_GOING_DOWN_* agree).
SHUTDOWN_FLAGS = {"shutdown": 0, "shutdown_logflush": 1, "shutdown_nologflush": 2}
# fallocate(2) modes: (keeps the size, zeroes the range), their flags (linux/falloc.h)
# and xfs_io's command for each.
FALLOC_MODES: dict[str, tuple[bool, bool]] = {
    "default": (False, False),
    "keep_size": (True, False),
    "punch_hole": (True, True),
    "zero_range": (False, True),
    "zero_range_keep_size": (True, True),
}
FALLOC_FLAGS = {
    "default": 0,
    "keep_size": 0x01,
    "punch_hole": 0x01 | 0x02,
    "zero_range": 0x10,
    "zero_range_keep_size": 0x10 | 0x01,
}
FALLOC_XFS_IO = {
    "default": "falloc",
    "keep_size": "falloc -k",
    "punch_hole": "fpunch",
    "zero_range": "fzero",
    "zero_range_keep_size": "fzero -k",
}
# utimes sets this time (plus the op's offset in seconds): a value no write leaves.
UTIMES_BASE = 1_000_000_000


def parent(path: str) -> str:
    """The directory a relative path is in ('' for the root)."""
    return path.rpartition("/")[0]


@dataclass(frozen=True)
class Op:
    """One operation. ``path`` is relative to the root; ``data`` is never serialised."""

    kind: str
    path: str = ""
    dst: str = ""
    offset: int = 0
    size: int = 0  # truncate: the new size; falloc: the range's length
    data: bytes = b""  # setxattr: the value
    mode: str = ""  # falloc: a key of FALLOC_MODES
    name: str = ""  # setxattr / removexattr: the attribute
    fd: str = ""  # a held descriptor's name (open, tmpfile, *_fd, linkat, close)
    target: str = ""  # symlink: what the link points at
    perm: int = 0  # chmod
    uid: int = -1  # chown
    gid: int = -1

    def describe(self) -> dict[str, Any]:
        """The op's entry in the oracle's op list: its arguments, ``length`` for the bytes
        of a write (``perm`` in octal). The shape every store holds: a stored run's ops
        are compared with this when triage draws them again (opmin.plan)."""
        spec = SPECS[self.kind]
        placed = spec.writes or self.kind in ("rewrite", "falloc")  # where the bytes go
        d: dict[str, Any] = {"op": self.kind}
        for key in ("path", "dst", "offset", "length", "size", "mode", "name", "fd", "target"):
            if key in ("offset", "length"):
                if placed and not (key == "length" and self.kind == "falloc"):
                    d[key] = len(self.data) if key == "length" else self.offset
            elif key in ("dst", "size"):
                if key in spec.args:
                    d[key] = getattr(self, key)
            elif getattr(self, key):  # a name, a descriptor, a mode: said when set
                d[key] = getattr(self, key)
        if "perm" in spec.args:
            d["perm"] = oct(self.perm)
        if "uid" in spec.args:
            d["uid"], d["gid"] = self.uid, self.gid
        return d

    @classmethod
    def from_entry(cls, entry: dict[str, Any], fill: int = 0) -> Op:
        """An oracle op-list entry as an op; its bytes (never stored) are ``fill``."""
        perm = entry.get("perm", 0)
        return cls(
            str(entry["op"]),
            str(entry.get("path", "")),
            dst=str(entry.get("dst", "")),
            offset=int(entry.get("offset", 0)),
            size=int(entry.get("size", 0)),
            data=bytes([fill]) * int(entry.get("length", 0)),
            mode=str(entry.get("mode", "")),
            name=str(entry.get("name", "")),
            fd=str(entry.get("fd", "")),
            target=str(entry.get("target", "")),
            perm=int(perm, 8) if isinstance(perm, str) else int(perm),
            uid=int(entry.get("uid", -1)),
            gid=int(entry.get("gid", -1)),
        )
