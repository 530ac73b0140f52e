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
def overlay(dev: str, timeout: float, name: str = OVERLAY) -> Iterator[str]:
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
            _must(["dmsetup", "create", name, "--table", table], timeout)
            try:
                yield f"/dev/mapper/{name}"
            finally:
                runner.run(["blockdev", "--setrw", f"/dev/mapper/{name}"], timeout)
                _must(["dmsetup", "remove", name], timeout)
        finally:
            runner.run(["losetup", "-d", loop], timeout)


def mount_argv(a: contract.CheckRequest, mode: str, dev: str, dev2: str = "") -> list[str]:
    """The mode's mount of ``dev``; with a second device (``a.dev2``, named in the mount
    options), that device as ``dev2`` (its overlay)."""
    given = [o for o in a.mount_opts.split(",") if o]
    if a.dev2 and dev2:
        given = [o.replace(a.dev2, dev2) for o in given]
    opts = recovery.mount_options(mode, given)
    return ["mount", "-t", a.fs, *(["-o", ",".join(opts)] if opts else []), dev, a.mountpoint]


def before(a: contract.CheckRequest, mode: str, verify: Verify) -> contract.ModeFacts:
    """One mode that runs before the read-write mount, on its own overlay; a second
    device (a journal, a log, a mirror) gets one too, and is read-only with the state's
    in ``ro-device`` (fstests' generic/766: a read-only external log)."""
    try:
        with contextlib.ExitStack() as stack:
            dev = stack.enter_context(overlay(os.path.realpath(a.dev), a.timeout))
            dev2 = ""
            if a.dev2:
                real2 = os.path.realpath(a.dev2)
                dev2 = stack.enter_context(overlay(real2, a.timeout, OVERLAY + "-2"))
            if mode == recovery.RO_DEVICE:
                for d in filter(None, (dev, dev2)):
                    _must(["blockdev", "--setro", d], a.timeout)
            return _mounted(a, mode, dev, verify, dev2=dev2)
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
    dev2: str = "",
) -> contract.ModeFacts:
    m = run(mount_argv(a, mode, dev, dev2), a.timeout)
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
