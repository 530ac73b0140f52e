"""Each op of the table (``model/ops.py``) as the call it makes (runs inside the guest,
stdlib only): ``perform`` does one op under the filesystem's root.

The os module's calls where it has them; ctypes for the rest (renameat2's
RENAME_NOREPLACE and RENAME_EXCHANGE, linkat(AT_EMPTY_PATH), syncfs,
sync_file_range, fallocate's modes), ioctl(FICLONE) for a reflink copy, and the btrfs
and e4defrag tools for subvolumes and EXT4_IOC_MOVE_EXT.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import mmap
import os
import struct

from ..model.ops import FALLOC_FLAGS, SHUTDOWN_FLAGS, SYNC_OPS, SYNCED_WRITES, UTIMES_BASE, Op
from . import runner

MORE_OPS = frozenset(
    {
        "open", "close", "tmpfile", "linkat", "write_fd", "fsync_fd", "fdatasync_fd",
        "symlink", "chmod", "chown", "utimes", "rename_noreplace", "exchange",
        "dwrite_dsync", "subvol_create", "snapshot", "clone", *SHUTDOWN_FLAGS,
    }
)  # fmt: skip
FS_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2  # linux/fs.h
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def renameat2(src: str, dst: str, flags: int) -> None:
    libc = _libc()
    libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    libc.renameat2.argtypes.append(ctypes.c_uint)
    if libc.renameat2(AT_FDCWD, src.encode(), AT_FDCWD, dst.encode(), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), src)


def linkat_fd(fd: int, path: str) -> None:
    """Name the file open at ``fd`` (an O_TMPFILE one): linkat(AT_EMPTY_PATH), as root."""
    libc = _libc()
    libc.linkat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    libc.linkat.argtypes.append(ctypes.c_int)
    if libc.linkat(fd, b"", AT_FDCWD, path.encode(), AT_EMPTY_PATH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)


def dsync_direct_write(path: str, offset: int, data: bytes, dsync: bool) -> None:
    """An O_DIRECT write of block-aligned ``data`` at ``offset`` with RWF_DSYNC (pwritev2):
    it returns once the data and what reading it needs are durable."""
    flags = os.RWF_DSYNC if dsync else 0
    buf = mmap.mmap(-1, max(len(data), 1))  # anonymous maps are page-aligned
    buf[: len(data)] = data
    fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    try:
        with memoryview(buf) as view:
            done = 0
            while done < len(data):
                done += os.pwritev(fd, [view[done : len(data)]], offset + done, flags)
    finally:
        os.close(fd)
        buf.close()


FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)


def clone(src: str, dst: str) -> None:
    """A new file ``dst`` sharing ``src``'s extents: ioctl(FICLONE), a reflink copy."""
    s = os.open(src, os.O_RDONLY)
    try:
        d = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fcntl.ioctl(d, FICLONE, s)
        finally:
            os.close(d)
    finally:
        os.close(s)


def _btrfs(argv: list[str]) -> None:
    r = runner.run(["btrfs", "subvolume", *argv], 300, merge=True)
    if r.rc != 0:
        said = r.stdout.strip()[-300:]
        code = errno.EOPNOTSUPP if "not a btrfs" in said.lower() else errno.EIO
        raise OSError(code, f"btrfs subvolume {argv[0]}: {said}")


def perform_more(root: str, op: Op, noop_sync: bool, fds: dict[str, int]) -> None:
    """Do one of ``MORE_OPS`` under ``root``; descriptors are kept in ``fds`` by name."""
    p = os.path.join(root, op.path)
    k = op.kind
    if k == "open":
        directory = os.path.isdir(p)
        fds[op.fd] = os.open(p, os.O_RDONLY | os.O_DIRECTORY if directory else os.O_RDWR)
    elif k == "tmpfile":
        fds[op.fd] = os.open(p, os.O_TMPFILE | os.O_RDWR, 0o644)
    elif k == "close":
        os.close(fds.pop(op.fd))
    elif k == "linkat":
        linkat_fd(fds[op.fd], p)
    elif k == "write_fd":
        view = memoryview(op.data)
        done = 0
        while done < len(view):
            done += os.pwrite(fds[op.fd], view[done:], op.offset + done)
    elif k in ("fsync_fd", "fdatasync_fd"):  # perform skips them under noop_sync
        (os.fsync if k == "fsync_fd" else os.fdatasync)(fds[op.fd])
    elif k in SHUTDOWN_FLAGS:
        _in_a_lab_guest(k)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.ioctl(fd, FS_IOC_SHUTDOWN, SHUTDOWN_FLAGS[k].to_bytes(4, "little"))
        finally:
            os.close(fd)
    elif k == "symlink":
        os.symlink(op.target, p)
    elif k == "chmod":
        os.chmod(p, op.perm)
    elif k == "chown":
        os.chown(p, op.uid, op.gid)
    elif k == "utimes":
        t = UTIMES_BASE + op.offset
        os.utime(p, (t, t))
    elif k in ("rename_noreplace", "exchange"):
        flags = RENAME_EXCHANGE if k == "exchange" else RENAME_NOREPLACE
        renameat2(p, os.path.join(root, op.dst), flags)
    elif k == "dwrite_dsync":
        dsync_direct_write(p, op.offset, op.data, dsync=not noop_sync)
    elif k == "clone":
        clone(p, os.path.join(root, op.dst))
    elif k == "subvol_create":
        _btrfs(["create", p])
    elif k == "snapshot":
        _btrfs(["snapshot", p, os.path.join(root, op.dst)])
    else:
        raise ValueError(f"unknown op {k!r}")


def _in_a_lab_guest(k: str) -> None:
    """Refuse a shutdown outside the lab's guests: on a host (a test on a tmp directory)
    it would stop the host's own filesystem."""
    try:
        with open("/proc/cmdline") as f:
            ours = "init=/sbin/crashlab-init" in f.read().split()
    except OSError:
        ours = False
    if not ours:
        raise OSError(errno.EPERM, f"{k} runs only in a crashlab guest (init=/sbin/crashlab-init)")


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
        dsync_direct_write(p, op.offset, op.data, dsync=False)
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
    elif k == "f2fs_gc":
        f2fs_gc(root)
    elif k in ("syncfs", "sync_file_range"):
        fd = os.open(p if op.path else root, os.O_RDONLY)
        try:
            _fd_call(k, fd, op)
        finally:
            os.close(fd)
    else:
        raise ValueError(f"unknown op {k!r}")


F2FS_IOC_GARBAGE_COLLECT = 0x4004F506  # _IOW(0xf5, 6, __u32)


def f2fs_gc(root: str) -> None:
    """One foreground GC round (sync = 1), as ``f2fs_io gc 1``. No victim to collect
    (ENODATA) or none freed (EAGAIN) is GC's answer, not a failed call: the op promises
    nothing and changes no content either way."""
    fd = os.open(root, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, F2FS_IOC_GARBAGE_COLLECT, struct.pack("=I", 1))
    except OSError as e:
        if e.errno not in (errno.ENODATA, errno.EAGAIN):
            raise
    finally:
        os.close(fd)


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
