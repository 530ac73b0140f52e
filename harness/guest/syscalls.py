"""The ops real bugs' steps need beyond opgen's mix (runs inside the guest, stdlib only).

Held descriptors (``open``, ``tmpfile``, ``write_fd``, ``fsync_fd``, ``fdatasync_fd``,
``close``, ``linkat``), symbolic links, metadata-only changes (``chmod``, ``chown``,
``utimes``), renameat2's RENAME_NOREPLACE and RENAME_EXCHANGE, an O_DIRECT write with
RWF_DSYNC, and btrfs subvolumes. The oracle's rules for each are rules 13-17 of
``oracle.py``; the file format that names them is ``opfile.py``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import runner  # type: ignore[import-not-found]  # beside us in the guest

MORE_OPS = frozenset(
    {
        "open", "close", "tmpfile", "linkat", "write_fd", "fsync_fd", "fdatasync_fd",
        "symlink", "chmod", "chown", "utimes", "rename_noreplace", "exchange",
        "dwrite_dsync", "subvol_create", "snapshot",
    }
)  # fmt: skip
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2  # linux/fs.h
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
# utimes sets this time (plus the op's offset in seconds): a value no write leaves.
UTIMES_BASE = 1_000_000_000


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


def _btrfs(argv: list[str]) -> None:
    r = runner.run(["btrfs", "subvolume", *argv], 300, merge=True)
    if r.rc != 0:
        said = r.stdout.strip()[-300:]
        code = errno.EOPNOTSUPP if "not a btrfs" in said.lower() else errno.EIO
        raise OSError(code, f"btrfs subvolume {argv[0]}: {said}")


def perform_more(root: str, op: Any, noop_sync: bool, fds: dict[str, int]) -> None:
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
    elif k == "subvol_create":
        _btrfs(["create", p])
    elif k == "snapshot":
        _btrfs(["snapshot", p, os.path.join(root, op.dst)])
    else:
        raise ValueError(f"unknown op {k!r}")
