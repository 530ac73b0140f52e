"""Record a filesystem's own recovery of crash images under dm-log-writes, in one guest.

Each crash image is attached read-only; in the guest it is copied onto a fresh disk
*through* dm-log-writes, then flushed and marked ``crashlab:recovery:base``, and only then
does the recovery run (:func:`recovery_argv`): a mount where the filesystem replays a
journal or log (jbd2 for ext3/ext4, xfs's log recovery, btrfs's log tree), then an
unmount; ``e2fsck -fy`` where there is no journal (ext2, ext3/ext4 ``^has_journal``).
It is marked ``crashlab:recovery:done``. So each log stands alone: replayed from zeros to
the base mark it is the crash image, byte for byte, and every state after the mark is a
crash during its recovery. The replayer, the state generators, identity and ``scenario
reproduce`` need nothing new.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.config.crash import FsSpec
from harness.errors import HarnessError
from harness.record import recorder as record
from harness.vm.backend import Disk, GuestSpec, start_guest

BASE_MARK = "crashlab:recovery:base"
DONE_MARK = "crashlab:recovery:done"
# e2fsck -fy's exit status after it repaired what it found: 1 corrected, 2 corrected and
# a reboot wanted (for a mounted root). Anything more is a failure of the recovery.
E2FSCK_RECOVERED = (0, 1, 2)
# A q35 guest's root bus takes a few dozen disks; three per image.
MAX_PER_GUEST = 8
MiB = 1 << 20


@dataclass(frozen=True)
class Recovery:
    """One crash image's recovery, recorded: its log and how long the recovery took."""

    key: str
    log: Path
    seconds: float


def recovery_argv(fs: FsSpec, dev: str) -> list[str]:
    """The filesystem's own recovery of ``dev``: the mount that replays its journal or
    log, or, without a journal, the full fsck that is its recovery."""
    if fs.journaled:
        return fs.mount_argv(dev, record.MOUNTPOINT)
    return ["e2fsck", "-f", "-y", dev]


def record_recoveries(
    fs: FsSpec, images: Sequence[tuple[str, Path]], out: Path, *, timeout: float
) -> list[Recovery]:
    """Record the recovery of each ``(key, image)`` into ``out/<key>/log.raw``, at most
    ``MAX_PER_GUEST`` per guest boot.

    :raise HarnessError: a guest step failed, or dm-log-writes lost entries.
    """
    done: list[Recovery] = []
    for first in range(0, len(images), MAX_PER_GUEST):
        done += _record_batch(fs, images[first : first + MAX_PER_GUEST], out, timeout)
    return done


def _record_batch(
    fs: FsSpec, images: Sequence[tuple[str, Path]], out: Path, timeout: float
) -> list[Recovery]:
    size = fs.disk_size
    disks: list[Disk] = []
    logs: list[Path] = []
    for i, (key, image) in enumerate(images):
        d = out / key
        d.mkdir(parents=True, exist_ok=True)
        dut, log = d / "dut.raw", d / "log.raw"
        # The log holds the image's data (the base copy) and the recovery's writes.
        for path, length in ((dut, size), (log, 2 * size + 64 * MiB)):
            path.unlink(missing_ok=True)
            with open(path, "wb") as f:
                f.truncate(length)
        disks += [Disk(image, f"rbase{i}", readonly=True), Disk(dut, f"rdut{i}")]
        disks.append(record.log_disk(log, f"rlog{i}"))
        logs.append(log)
    spec = GuestSpec(disks=tuple(disks), command_timeout=timeout, workdir=None)
    done: list[Recovery] = []
    with start_guest(spec) as guest:
        guest.run(["mkdir", "-p", record.MOUNTPOINT], check=True)

        def step(name: str, argv: list[str]) -> str:
            r = guest.run(argv, timeout=timeout)
            if not r.ok:
                raise HarnessError(
                    f"recording a recovery failed at step '{name}' (exit status {r.exitcode})",
                    detail="$ " + shlex.join(argv) + "\n" + (r.err or r.out).strip()[-3000:],
                )
            return r.out

        for i, (key, _) in enumerate(images):
            base_dev, dut_dev, log_dev = (
                step("resolve", ["readlink", "-f", guest.disk(f"{kind}{i}")]).strip()
                for kind in ("rbase", "rdut", "rlog")
            )
            name = f"crashlab-rc{i}"
            dev = record.create_log_writes(step, name, dut_dev, log_dev)
            # Sparse: the disk under it is zeros already, and the log stays small.
            step("copy", ["dd", f"if={base_dev}", f"of={dev}", "bs=1M", "conv=sparse,fsync"])
            record.mark_logs(step, [name], BASE_MARK)
            argv = recovery_argv(fs, dev)
            r = guest.run(argv, timeout=timeout)
            ok = r.exitcode in E2FSCK_RECOVERED if argv[0] == "e2fsck" else r.ok
            if not ok or r.signal is not None:
                raise HarnessError(
                    f"the recovery of {key} failed (exit status {r.exitcode}), though its"
                    " check recovered it",
                    detail="$ " + shlex.join(argv) + "\n" + (r.err or r.out).strip()[-3000:],
                )
            record.mark_logs(step, [name], DONE_MARK)
            if fs.journaled:
                step("umount", ["umount", record.MOUNTPOINT])
                record.mark_logs(step, [name], record.UMOUNT_MARK)
            step("dm-remove", ["dmsetup", "remove", name])
            done.append(Recovery(key, logs[i], r.seconds))
        record.check_log_errors(guest)
    for rec in done:
        record.trim_log(rec.log)
        (rec.log.parent / "dut.raw").unlink(missing_ok=True)
    return done
