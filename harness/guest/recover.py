"""Recovery modes in the guest (model/recovery.py): a mode before the read-write mount
runs on a copy-on-write overlay of the state, so the state stays as the crash left it;
``remount`` mounts again after the read-write recovery and compares the two trees."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
import traceback
from collections.abc import Callable, Iterator

from ..model import contract, recovery
from . import runner

Verify = Callable[[contract.CheckRequest], contract.Verdict | None]
OVERLAY = "crashlab-recover"


def run(argv: list[str], timeout: float) -> contract.Command:
    record: contract.Command = runner.run(argv, timeout).record()
    return record


def _must(argv: list[str], timeout: float) -> str:
    r = runner.run(argv, timeout)
    if r.rc != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.rc}): {r.output().strip()}")
    return r.output().strip()


@contextlib.contextmanager
def overlay(dev: str, timeout: float) -> Iterator[str]:
    """A device-mapper snapshot of ``dev`` whose writes go to a sparse file in memory:
    what a mode's mount writes (ext4 replays on a read-only mount) never reaches ``dev``."""
    for module in ("loop", "dm-snapshot"):  # no udev here to load them on first use
        runner.run(["modprobe", "-q", module], timeout)  # built in: nothing to load
    sectors = int(_must(["blockdev", "--getsz", dev], timeout))
    with tempfile.TemporaryDirectory(prefix="crashlab-cow-") as d:
        cow = os.path.join(d, "cow.img")
        with open(cow, "wb") as f:
            f.truncate(sectors * 512 + (1 << 20))
        loop = _must(["losetup", "--find", "--show", cow], timeout)
        try:
            table = f"0 {sectors} snapshot {dev} {loop} N 8"
            _must(["dmsetup", "create", OVERLAY, "--table", table], timeout)
            try:
                yield f"/dev/mapper/{OVERLAY}"
            finally:
                runner.run(["blockdev", "--setrw", f"/dev/mapper/{OVERLAY}"], timeout)
                _must(["dmsetup", "remove", OVERLAY], timeout)
        finally:
            runner.run(["losetup", "-d", loop], timeout)


def mount_argv(a: contract.CheckRequest, mode: str, dev: str) -> list[str]:
    opts = recovery.mount_options(mode, [o for o in a.mount_opts.split(",") if o])
    return ["mount", "-t", a.fs, *(["-o", ",".join(opts)] if opts else []), dev, a.mountpoint]


def before(a: contract.CheckRequest, mode: str, verify: Verify) -> contract.ModeFacts:
    """One mode that runs before the read-write mount, on its own overlay."""
    try:
        with overlay(os.path.realpath(a.dev), a.timeout) as dev:
            if mode == recovery.RO_DEVICE:
                _must(["blockdev", "--setro", dev], a.timeout)
            return _mounted(a, mode, dev, verify)
    except Exception:  # the overlay, or a bug of ours: the lab's, never a finding
        return contract.ModeFacts(mode=mode, error=contract.excerpt(traceback.format_exc()))


def again(a: contract.CheckRequest, first: dict[str, str], verify: Verify) -> contract.ModeFacts:
    """``remount``: the state's device, recovered and unmounted once, mounted again."""
    try:
        return _mounted(a, recovery.REMOUNT, os.path.realpath(a.dev), verify, first)
    except Exception:
        return contract.ModeFacts(
            mode=recovery.REMOUNT, error=contract.excerpt(traceback.format_exc())
        )


def _mounted(
    a: contract.CheckRequest,
    mode: str,
    dev: str,
    verify: Verify,
    first: dict[str, str] | None = None,
) -> contract.ModeFacts:
    m = run(mount_argv(a, mode, dev), a.timeout)
    if m.rc != 0:
        return contract.ModeFacts(mode=mode, mount=m)
    try:
        said = verify(a)
        changed = None if first is None else diff(first, tree(a.mountpoint))
    finally:
        u = run(["umount", a.mountpoint], a.timeout)
    return contract.ModeFacts(mode=mode, mount=m, verify=said, umount=u, changed=changed)


def tree(root: str) -> dict[str, str]:
    """Every name under ``root`` with what a second mount must leave as it was: type,
    mode, owner, links, size, mtime and ctime (never atime), and the bytes' sha256 or a
    link's target."""
    out: dict[str, str] = {}
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted([*dirs, *files]):
            p = os.path.join(d, name)
            st = os.lstat(p)
            what: list[object] = [stat.S_IFMT(st.st_mode), st.st_mode, st.st_uid, st.st_gid]
            what += [st.st_nlink]
            what += [st.st_size, st.st_mtime_ns, st.st_ctime_ns]
            if stat.S_ISLNK(st.st_mode):
                what.append(os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    what.append(hashlib.file_digest(f, "sha256").hexdigest())
            out[os.path.relpath(p, root)] = repr(what)
    return out


def diff(first: dict[str, str], second: dict[str, str]) -> list[str]:
    """The names the second mount shows differently (gone, new or changed)."""
    return sorted(p for p in first.keys() | second.keys() if first.get(p) != second.get(p))
