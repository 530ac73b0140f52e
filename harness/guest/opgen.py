#!/usr/bin/env python3
"""Seeded file-operation generator with a durability oracle (runs inside the guest).

Stdlib only and a single file: the host copies it into the guest and runs it there.

``run`` performs a random but seeded sequence of create / write / append / overwrite /
truncate / rename / link / unlink / mkdir and fsync / fdatasync / directory fsync / sync,
in the style of fsx, fsstress and ACE. After every sync-type call *returns*, it writes a
mark ``crashlab:sync:<n>`` (n = 1, 2, ...) into the dm-log-writes log with
``dmsetup message <dm-name> 0 mark crashlab:sync:<n>``. Because the mark is logged after
the call completed, every write and flush the call waited for precedes the mark in the
log. It finishes with ``sync`` and one last mark that requires everything.

The oracle (JSON) says, for each mark, what a crash state whose last mark it is must
hold; its rules, and the guarantee each rests on, are in ``oracle.py`` (beside this file
in the guest), which also checks a mounted state (``verify``).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import errno
import json
import mmap
import os
import random
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import runner  # type: ignore[import-not-found]  # beside us in the guest
from oracle import (  # type: ignore[import-not-found]
    FORMAT,
    MARK_PREFIX,
    PERSIST_OPS,
    SYNC_OPS,
    SYNCED_WRITES,
    WRITE_OPS,
    Model,
    Tracker,
    UsageError,
    load_oracle,
    verify,
)
from syscalls import MORE_OPS, perform_more  # type: ignore[import-not-found]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

MAX_DEPTH = 3
# Write lengths are drawn up to one of these caps: sub-block, block and multi-block I/O.
WRITE_CAPS = (100, 4096, 65536)
WEIGHTS: dict[str, int] = {
    "create": 8,
    "write": 12,
    "append": 10,
    "overwrite": 8,
    "truncate": 5,
    "rename": 7,
    "link": 4,
    "unlink": 5,
    "mkdir": 3,
    "fsync": 12,
    "fdatasync": 6,
    "fsync_dir": 6,
    "sync": 2,
}


# ``--extended``: ACE's other ops (harness/guest/ace.py) and the other ways to make data
# durable. Off by default: the classic mix keeps every seed's workload as it was.
EXTENDED: dict[str, int] = {
    "dwrite": 4,
    "mwrite": 3,
    "falloc": 4,
    "setxattr": 3,
    "removexattr": 2,
    "rmdir": 2,
    "osync_write": 3,
    "odsync_write": 3,
    "sync_file_range": 2,
    "syncfs": 2,
}
# ``--bug-ops``: the ops this year's real bugs needed (syscalls.py; oracle rules 13-16),
# drawn beside the extended mix. A switch of its own so that every extended seed keeps
# drawing the workload it always drew (triage draws a stored run's ops again).
BUG_OPS: dict[str, int] = {
    "truncate_zero": 3,
    "symlink": 2,
    "chmod": 2,
    "exchange": 2,
    "rename_noreplace": 2,
    "open": 3,
    "write_fd": 2,
    "fsync_fd": 3,
    "close": 2,
}
BLOCK = 4096  # O_DIRECT wants block-aligned offsets and lengths


class OpFailed(Exception):
    """A file-system call failed during ``run``."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


@dataclass(frozen=True)
class Op:
    """One operation. ``path`` is relative to the root; ``data`` is never serialised."""

    kind: str
    path: str = ""
    dst: str = ""
    offset: int = 0
    size: int = 0  # truncate: the new size; falloc: the range's length
    data: bytes = b""  # setxattr: the value
    mode: str = ""  # falloc: a key of oracle.FALLOC_MODES
    name: str = ""  # setxattr / removexattr: the attribute
    fd: str = ""  # a held descriptor's name (open, tmpfile, *_fd, linkat, close)
    target: str = ""  # symlink: what the link points at
    perm: int = 0  # chmod
    uid: int = -1  # chown
    gid: int = -1

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.kind}
        if self.path:
            d["path"] = self.path
        if self.kind in ("rename", "link", "rename_noreplace", "exchange", "snapshot"):
            d["dst"] = self.dst
        if self.kind in (*WRITE_OPS, "rewrite", "falloc"):
            d["offset"] = self.offset
        if self.kind in (*WRITE_OPS, "rewrite"):
            d["length"] = len(self.data)
        if self.kind in ("truncate", "falloc"):
            d["size"] = self.size
        if self.mode:
            d["mode"] = self.mode
        if self.name:
            d["name"] = self.name
        for key in ("fd", "target"):
            if getattr(self, key):
                d[key] = getattr(self, key)
        if self.kind == "chmod":
            d["perm"] = oct(self.perm)
        if self.kind == "chown":
            d["uid"], d["gid"] = self.uid, self.gid
        return d


def join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


class Generator:
    """Draws the next op from the seed and the model, so the sequence is deterministic."""

    def __init__(
        self,
        seed: int,
        max_files: int,
        max_size: int,
        extended: bool = False,
        bug_ops: bool = False,
    ) -> None:
        self.rng = random.Random(seed)
        self.max_files = max_files
        self.max_size = max_size
        self.max_dirs = max(2, max_files // 4)
        self.counter = 0
        weights = {**WEIGHTS, **(EXTENDED if extended else {}), **(BUG_OPS if bug_ops else {})}
        self.kinds = list(weights)
        self.weights = list(weights.values())

    def _name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def _length(self, room: int) -> int:
        return self.rng.randint(1, min(self.rng.choice(WRITE_CAPS), room))

    def next(self, m: Model) -> Op:
        while True:
            kind = self.rng.choices(self.kinds, self.weights)[0]
            op = self._build(kind, m)
            if op is not None:
                return op

    def _build(self, kind: str, m: Model) -> Op | None:
        rng = self.rng
        files = sorted(m.files)
        dirs = sorted(m.dirs)
        if kind == "sync":
            return Op("sync")
        if kind == "fsync_dir":
            return Op("fsync_dir", rng.choice(dirs))
        if kind == "mkdir":
            roots = [d for d in dirs if d.count("/") + 1 < MAX_DEPTH or not d]
            if len(dirs) > self.max_dirs:
                return None
            return Op("mkdir", join(rng.choice(roots), self._name("d")))
        if kind == "create":
            if len(files) >= self.max_files:
                return None
            return Op("create", join(rng.choice(dirs), self._name("f")))
        if kind in ("write_fd", "fsync_fd", "close"):
            return self._held(kind, m)
        if not files:
            return None
        path = rng.choice(files)
        if m.files[path].symlink is not None and kind not in ("rename", "unlink", "link"):
            return None  # any other op would follow the link (fsync included)
        size = len(m.files[path].data)
        if kind == "write":
            offset = rng.randrange(self.max_size)
            return Op(
                "write",
                path,
                offset=offset,
                data=rng.randbytes(self._length(self.max_size - offset)),
            )
        if kind == "append":
            if size >= self.max_size:
                return None
            return Op(
                "append", path, offset=size, data=rng.randbytes(self._length(self.max_size - size))
            )
        if kind == "overwrite":
            if size == 0:
                return None
            offset = rng.randrange(size)
            return Op(
                "overwrite", path, offset=offset, data=rng.randbytes(self._length(size - offset))
            )
        if kind == "truncate":
            return Op("truncate", path, size=rng.randint(0, self.max_size))
        if kind == "rename":
            others = [f for f in files if m.files[f].ino != m.files[path].ino]
            if others and rng.random() < 0.5:
                # Replace an existing file: the rename-over pattern of atomic updates.
                return Op("rename", path, dst=rng.choice(others))
            return Op("rename", path, dst=join(rng.choice(dirs), self._name("f")))
        if kind == "link":
            if len(files) >= self.max_files:
                return None
            return Op("link", path, dst=join(rng.choice(dirs), self._name("f")))
        if kind == "unlink":
            return Op("unlink", path)
        if kind in ("fsync", "fdatasync"):
            return Op(kind, path)
        if kind in BUG_OPS:
            return self._bug_op(kind, m, path)
        return self._extended(kind, m, path, size)

    def _bug_op(self, kind: str, m: Model, path: str) -> Op | None:
        """One of ``BUG_OPS`` on ``path`` (a symbolic link is left to the ops that take
        one: anything else would follow it)."""
        rng, dirs = self.rng, sorted(m.dirs)
        if m.files[path].symlink is not None:
            return None
        if kind == "truncate_zero":
            return Op("truncate", path, size=0)
        if kind == "symlink":
            return Op("symlink", join(rng.choice(dirs), self._name("l")), target=path)
        if kind == "chmod":
            return Op("chmod", path, perm=rng.choice((0o600, 0o640, 0o755)))
        if kind == "exchange":
            others = [f for f in sorted(m.files) if f != path and m.files[f].symlink is None]
            return Op("exchange", path, dst=rng.choice(others)) if others else None
        if kind == "rename_noreplace":
            return Op("rename_noreplace", path, dst=join(rng.choice(dirs), self._name("f")))
        fd = self._name("h")  # open: a descriptor held until close (or the end)
        return Op("open", path, fd=fd)

    def _held(self, kind: str, m: Model) -> Op | None:
        """An op through a descriptor ``open`` holds, whether its file still has a name."""
        fds = sorted(fd for fd in m.handles if m.handle_inode(fd) is not None)
        if not fds:
            return None
        fd = self.rng.choice(fds)
        if kind == "write_fd":
            return Op("write_fd", fd=fd, offset=self.rng.randrange(self.max_size),
                      data=self.rng.randbytes(self._length(self.max_size)))  # fmt: skip
        return Op(kind, fd=fd)

    def _extended(self, kind: str, m: Model, path: str, size: int) -> Op | None:
        rng = self.rng
        blocks = max(1, self.max_size // BLOCK)
        if kind == "dwrite":
            first = rng.randrange(blocks)
            n = rng.randint(1, min(4, blocks - first))
            return Op("dwrite", path, offset=first * BLOCK, data=rng.randbytes(n * BLOCK))
        if kind == "mwrite":
            if size == 0:
                return None
            offset = rng.randrange(size)
            return Op(
                "mwrite", path, offset=offset, data=rng.randbytes(self._length(size - offset))
            )
        if kind == "falloc":
            mode = rng.choice(sorted(FALLOC_FLAGS))
            offset = rng.randrange(self.max_size)
            return Op(
                "falloc",
                path,
                offset=offset,
                size=rng.randint(1, self.max_size - offset),
                mode=mode,
            )
        if kind == "setxattr":
            return Op(
                "setxattr",
                path,
                name=f"user.x{rng.randrange(3)}",
                data=rng.randbytes(rng.randint(1, 64)),
            )
        if kind == "removexattr":
            names = sorted(m.files[path].xattrs)
            return Op("removexattr", path, name=rng.choice(names)) if names else None
        if kind == "rmdir":
            empty = [d for d in m.dirs if d and not any(m.under(d)[1]) and len(m.under(d)[0]) == 1]
            return Op("rmdir", rng.choice(sorted(empty))) if empty else None
        if kind in SYNCED_WRITES:
            offset = rng.randrange(self.max_size)
            return Op(
                kind, path, offset=offset, data=rng.randbytes(self._length(self.max_size - offset))
            )
        if kind == "sync_file_range":
            return Op(kind, path, offset=0, size=0)  # 0: to the end of the file
        if kind == "syncfs":
            return Op("syncfs")
        raise ValueError(f"unknown op kind {kind!r}")


def perform(root: str, op: Op, noop_sync: bool = False, fds: dict[str, int] | None = None) -> None:
    """Do ``op`` on the real file system under ``root`` (``noop_sync``: skip the sync
    calls -- a broken fsync, the oracle's positive control). ``fds`` holds the
    descriptors a workload file's ``open`` and ``tmpfile`` keep, by name."""
    if noop_sync and op.kind in SYNC_OPS:
        return
    p = os.path.join(root, op.path)
    k = op.kind
    if k in MORE_OPS:
        perform_more(root, op, noop_sync, {} if fds is None else fds)
    elif k == "create":
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    elif k in ("write", "append", "overwrite", "rewrite", *SYNCED_WRITES):
        # rewrite: open with O_TRUNC and write from 0 -- the truncate-and-rewrite update
        # of applications (its close is what ext4's auto_da_alloc acts on).
        flags = os.O_TRUNC if k == "rewrite" else 0
        if not noop_sync:
            flags |= {"osync_write": os.O_SYNC, "odsync_write": os.O_DSYNC}.get(k, 0)
        fd = os.open(p, os.O_WRONLY | flags)
        try:
            view = memoryview(op.data)
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], op.offset + done)
        finally:
            os.close(fd)
    elif k == "dwrite":
        direct_write(p, op.offset, op.data)
    elif k == "mwrite":
        mmap_write(p, op.offset, op.data)
    elif k == "falloc":
        fallocate(p, op.mode, op.offset, op.size)
    elif k == "setxattr":
        os.setxattr(p, op.name, op.data)
    elif k == "removexattr":
        os.removexattr(p, op.name)
    elif k == "rmdir":
        os.rmdir(p)
    elif k == "truncate":
        os.truncate(p, op.size)
    elif k == "rename":
        os.rename(p, os.path.join(root, op.dst))
    elif k == "link":
        os.link(p, os.path.join(root, op.dst), follow_symlinks=False)  # link(2): the link itself
    elif k == "unlink":
        os.unlink(p)
    elif k == "mkdir":
        os.mkdir(p, 0o755)
    elif k in ("fsync", "fdatasync", "fsync_dir"):
        flags = os.O_RDONLY | (os.O_DIRECTORY if k == "fsync_dir" else 0)
        fd = os.open(p if op.path else root, flags)
        try:
            (os.fdatasync if k == "fdatasync" else os.fsync)(fd)
        finally:
            os.close(fd)
    elif k == "sync":
        os.sync()
    elif k == "defrag":
        defrag(p)
    elif k in ("syncfs", "sync_file_range"):
        fd = os.open(p if op.path else root, os.O_RDONLY)
        try:
            _fd_call(k, fd, op)
        finally:
            os.close(fd)
    else:
        raise ValueError(f"unknown op {k!r}")


def defrag(path: str) -> None:
    """e4defrag one file (EXT4_IOC_MOVE_EXT). It exits 0 even when it moved nothing, so
    its report is read: a file it failed on is an OSError like a failed syscall's."""
    if not os.path.lexists("/etc/mtab"):  # e4defrag finds the mount there; the guest has none
        os.symlink("/proc/self/mounts", "/etc/mtab")
    r = runner.run(["e4defrag", path], 600, merge=True)
    if r.rc != 0 or "[ OK ]" not in r.stdout:
        raise OSError(errno.EOPNOTSUPP, f"e4defrag: {r.stdout.strip()[-300:]}")


SYNC_FILE_RANGE_WAIT_BEFORE, SYNC_FILE_RANGE_WRITE, SYNC_FILE_RANGE_WAIT_AFTER = 1, 2, 4


def _fd_call(kind: str, fd: int, op: Op) -> None:
    """syncfs(2) and sync_file_range(2), which the os module does not have."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if kind == "syncfs":
        rc = libc.syncfs(fd)
    else:
        libc.sync_file_range.argtypes = [
            ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint
        ]  # fmt: skip
        every = SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER
        rc = libc.sync_file_range(fd, op.offset, op.size, every)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


FALLOC_FLAGS = {  # linux/falloc.h
    "default": 0,
    "keep_size": 0x01,
    "punch_hole": 0x01 | 0x02,
    "zero_range": 0x10,
    "zero_range_keep_size": 0x10 | 0x01,
}


def fallocate(path: str, mode: str, offset: int, length: int) -> None:
    """fallocate(2) with a mode os.posix_fallocate cannot ask for."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    fd = os.open(path, os.O_WRONLY)
    try:
        if libc.fallocate(fd, FALLOC_FLAGS[mode], offset, length) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
    finally:
        os.close(fd)


def direct_write(path: str, offset: int, data: bytes) -> None:
    """An O_DIRECT write: block-aligned offset and length, from a page-aligned buffer."""
    buf = mmap.mmap(-1, max(len(data), 1))  # anonymous maps are page-aligned
    buf[: len(data)] = data
    fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    try:
        done = 0
        while done < len(data):
            done += os.pwrite(fd, memoryview(buf)[done : len(data)], offset + done)
    finally:
        os.close(fd)
        buf.close()


def mmap_write(path: str, offset: int, data: bytes) -> None:
    """Bytes stored through a shared mapping, then msync(MS_SYNC) (mmap's flush). The
    range must lie inside the file: a mapping cannot extend it."""
    fd = os.open(path, os.O_RDWR)
    try:
        with mmap.mmap(fd, offset + len(data)) as m:
            m[offset : offset + len(data)] = data
            m.flush()
    finally:
        os.close(fd)


def flush_device(dm_name: str) -> None:
    """fsync the device-mapper device ``dm_name``: its dirty page cache, then a FLUSH."""
    try:
        fd = os.open(f"/dev/mapper/{dm_name}", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise OpFailed(f"fsync of /dev/mapper/{dm_name}: {e.strerror}") from None


def emit_mark(mark_cmd: str, dm_name: str, text: str) -> None:
    if mark_cmd == "none":
        return
    argv = ["dmsetup", "message", dm_name, "0", "mark", text]
    try:
        r = runner.run(argv)  # its environment keeps udev from stalling every message
    except OSError as e:
        raise OpFailed(f"cannot run {argv[0]}: {e.strerror}") from None
    if r.rc != 0:
        raise OpFailed(f"{' '.join(argv)} failed ({r.rc}): {r.stderr.strip()}")


def execute(
    root: str,
    ops: Iterable[Op] | None = None,
    *,
    generator: Generator | None = None,
    count: int = 0,
    mark_cmd: str = "none",
    dm_name: str = "",
    fsync_names: bool = True,
    noop_sync: bool = False,
    flush_after_sync: bool = False,
    on_mark: Callable[[str], None] | None = None,
    ordered: bool = False,
) -> dict[str, Any]:
    """Run ops (given, or ``count`` drawn from ``generator``) and return the oracle body.

    ``on_mark(text)`` runs after each mark, before the next op: where a runtime fault is
    switched on at a sync point (``dropremount.py``). ``flush_after_sync`` fsyncs the
    device ``dm_name`` after each sync call, before its mark: the device's dirty buffer
    cache is written and a cache FLUSH sent (blkdev_fsync) -- an experiment that tells a
    filesystem's missing flush from a rule of ours (the model does not change). The
    returned dict has ``marks``, ``final_mark``, ``ops``, ``complete`` and ``error``.
    """
    track = Tracker(fsync_names, ordered)
    log: list[dict[str, Any]] = []
    error: str | None = None
    fds: dict[str, int] = {}  # a workload file's held descriptors

    def step(op: Op) -> None:
        track.before(op)
        entry = {"i": len(log), **op.describe()}
        log.append(entry)
        try:
            perform(root, op, noop_sync, fds)
        except OSError as e:
            raise OpFailed(
                f"op {entry['i']} {op.kind} {op.path!r}: {e.strerror}", e.errno
            ) from None
        track.after(op)
        if op.kind in PERSIST_OPS:
            if flush_after_sync and not noop_sync:
                flush_device(dm_name)
            text = track.next_mark()
            emit_mark(mark_cmd, dm_name, text)
            track.mark(text, entry["i"])
            entry["mark"] = text
            if on_mark is not None:
                on_mark(text)

    def source() -> Iterable[Op]:
        if ops is not None:
            yield from ops
        elif generator is not None:
            for _ in range(count):
                yield generator.next(track.model)

    final_mark: str | None = None
    failed_errno: int | None = None
    try:
        for op in source():
            step(op)
        step(Op("sync"))
        log[-1]["final"] = True
        final_mark = log[-1]["mark"]
    except OpFailed as e:
        error, failed_errno = str(e), e.errno
    finally:
        for fd in fds.values():
            os.close(fd)
    return {
        "profile": track.profile,
        "marks": track.marks(),
        "final_mark": final_mark,
        "ops": log,
        "complete": error is None,
        "error": error,
        "errno": failed_errno,
    }


def write_json(path: str, data: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def draw(
    seed: int,
    count: int,
    files: int,
    max_size: int,
    extended: bool,
    fsync_names: bool,
    bug_ops: bool = False,
) -> list[Op]:
    """The generator's workload (``run``'s ops, final sync excepted), drawn as ``execute``
    draws them, each op applied to the model before the next -- without running it."""
    gen = Generator(seed, files, max_size, extended, bug_ops)
    model = Model(fsync_names)
    ops = []
    for _ in range(count):
        op = gen.next(model)
        model.apply(op)
        ops.append(op)
    return ops


FAMILY_DRAWS = 1000  # held-fd, the rarest: 2% of 20-op seeds (--bug-ops), 56% of 200-op ones


def family_seed(args: argparse.Namespace) -> int:
    """The first seed, in an order fixed by ``--seed`` and the family, whose workload is
    of ``--family`` (families.py); ``--seed`` itself when its own workload is. The
    oracle keeps the seed drawn, so triage draws the same ops again."""
    import families  # type: ignore[import-not-found]

    rng = random.Random(f"{args.seed}:{args.family}")
    seed: int = args.seed
    for _ in range(FAMILY_DRAWS):
        ops = draw(seed, args.ops, args.files, args.max_size, args.extended,
                   args.fsync_names == "yes", args.bug_ops)  # fmt: skip
        if families.matches_ops(args.family, ops):
            return seed
        seed = rng.randrange(2**31)
    raise UsageError(f"no workload of {args.family} in {FAMILY_DRAWS} seeds from {args.seed}")


def oracle_doc(args: argparse.Namespace, body: dict[str, Any]) -> dict[str, Any]:
    """The oracle file of a run with ``run``'s arguments and ``execute``'s body."""
    return {
        "format": FORMAT,
        "mark_prefix": MARK_PREFIX,
        "seed": args.seed,
        "ops_requested": args.ops,
        "files": args.files,
        "max_size": args.max_size,
        "fsync_names": args.fsync_names == "yes",
        **({"bug_ops": True} if getattr(args, "bug_ops", False) else {}),  # dropremount: none
        **({"family": args.family} if getattr(args, "family", "") else {}),
        **body,
    }


def cmd_run(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root}: not a directory")
    if args.ops < 0 or args.files < 1 or args.max_size < 1:
        raise UsageError("--ops must be >= 0, --files and --max-size >= 1")
    if (args.mark_cmd == "dmsetup" or args.flush_after_sync) and not args.dm_name:
        raise UsageError("--mark-cmd dmsetup needs --dm-name (the dm-log-writes device)")
    if args.family and not args.ops_file:
        args.seed = family_seed(args)
    gen = Generator(args.seed, args.files, args.max_size, args.extended, args.bug_ops)
    ops = None
    if args.ops_file:  # a workload file's ops (opfile.py), parsed and checked on the host
        import opfile  # type: ignore[import-not-found]

        with open(args.ops_file) as f:
            ops = opfile.to_ops(json.load(f))
    body = execute(
        args.root,
        ops,
        generator=gen,
        count=args.ops,
        mark_cmd=args.mark_cmd,
        dm_name=args.dm_name or "",
        fsync_names=args.fsync_names == "yes",
        noop_sync=args.noop_sync,
        flush_after_sync=args.flush_after_sync,
        ordered=args.ordered_metadata,
    )
    oracle = oracle_doc(args, body)
    write_json(args.oracle, oracle)
    summary = {k: oracle[k] for k in ("complete", "error", "final_mark")}
    print(json.dumps({**summary, "marks": len(oracle["marks"]), "ops": len(oracle["ops"])}))
    return EXIT_OK if body["complete"] else EXIT_FAILED


def cmd_verify(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root}: not a directory")
    oracle = load_oracle(args.oracle)
    print(json.dumps(verify(args.root, oracle, args.mark or None, args.exact), sort_keys=True))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="opgen", description=__doc__.splitlines()[0] if __doc__ else ""
    )
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the seeded workload and write the oracle")
    r.add_argument("--root", required=True, help="directory on the file system under test")
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--ops", type=int, required=True, help="number of generated operations")
    r.add_argument("--family", default="", help="draw seeds from --seed until one's ops are of it")
    r.add_argument("--files", type=int, default=16, help="most file names alive at once")
    r.add_argument("--max-size", type=int, default=256 * 1024, help="largest file size, bytes")
    r.add_argument("--mark-cmd", choices=("dmsetup", "none"), default="dmsetup")
    r.add_argument(
        "--fsync-names",
        choices=("yes", "no"),
        default="yes",
        help="does fsync(file) make its name durable? (no: POSIX, e.g. ext2)",
    )
    r.add_argument("--dm-name", help="the dm-log-writes device that receives the marks")
    r.add_argument(
        "--noop-sync",
        action="store_true",
        help="never really fsync/sync (a positive control: the oracle must catch it)",
    )
    r.add_argument(
        "--flush-after-sync",
        action="store_true",
        help="fsync the --dm-name device after every sync call (an experiment)",
    )
    r.add_argument(
        "--extended",
        action="store_true",
        help="also O_DIRECT/mmap writes, fallocate, xattrs, rmdir, O_SYNC/O_DSYNC writes,"
        " sync_file_range, syncfs",
    )
    r.add_argument("--oracle", required=True, help="where to write the oracle JSON")
    r.add_argument("--ops-file", help="run these ops (JSON from opfile.py) instead of drawing")
    r.add_argument(
        "--bug-ops",
        action="store_true",
        help="also truncate to 0, symlink, chmod, RENAME_EXCHANGE/NOREPLACE and ops through"
        " a descriptor held across unlink (write_fd, fsync_fd)",
    )
    r.add_argument(
        "--ordered-metadata",
        action="store_true",
        help="judge by the ordered-metadata profile (oracle.py rule 18)",
    )
    r.set_defaults(func=cmd_run)
    v = sub.add_parser("verify", help="check a mounted crash state against the oracle")
    v.add_argument("--root", required=True)
    v.add_argument("--oracle", required=True)
    v.add_argument("--mark", default="", help="last mark in the crash state; empty for none")
    v.add_argument("--exact", action="store_true", help="the state is cut exactly at --mark")
    v.set_defaults(func=cmd_verify)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status: int = args.func(args)
    except UsageError as e:
        print(f"opgen: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return status


if __name__ == "__main__":
    sys.exit(main())
