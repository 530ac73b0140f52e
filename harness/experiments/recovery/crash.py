"""The crash states of one recovery item (cell x size x repetition), made in one guest.

Both methods run the same seeded population and churn (``harness/guest/recoveryload.py``)
for the same time, each on its own disk:

- ``dm-log-writes`` first: the disk is wrapped in dm-log-writes (the recorder's
  ``DmMarker``), and while the churn runs the host puts the mark ``crashlab:crash`` in
  the log; then the churn is stopped, the filesystem unmounted and the target removed.
  On the host the log is replayed up to that mark into a fresh image: every write that
  had completed when the mark was taken, nothing after it (fstests' replay-log recipe).
- ``sigkill`` last, because it ends the guest: QEMU is SIGKILLed while the churn runs;
  raw disks run with ``cache.direct=on``, so the image holds every write QEMU completed.

Sharing the guest saves a boot per item (10-20 s under TCG); the recovered images are
mounted in one fresh guest too (``recovery.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from harness.errors import HarnessError
from harness.experiments.recovery.settings import Cell, RecoveryScenario
from harness.model import contract
from harness.record import guestmsg, logwrites
from harness.record import recorder as record
from harness.replay.replayer import Replayer
from harness.vm.backend import Disk, Guest, GuestSpec, start_guest

M = TypeVar("M", bound=contract.Message)

PROGRAM = f"{record.GUEST_DIR}/recoveryload.py"
# Serials of the crash images in the guest that mounts them, per method.
SERIALS = {"sigkill": "recovery", "dm-log-writes": "recovery-lw"}
MOUNTS = {"sigkill": "/mnt/recovery", "dm-log-writes": "/mnt/recovery-lw"}
CRASH_MARK = "crashlab:crash"


@dataclass(frozen=True)
class Target:
    """What one item's crash states are made of."""

    cell: Cell
    size: int
    seed: int  # the population's seed (the run's seed + the repetition)
    churn_seed: int
    name: str  # for messages


def guest_spec(sc: RecoveryScenario, disks: Sequence[Disk]) -> GuestSpec:
    return GuestSpec(disks=tuple(disks), command_timeout=sc.timeout + 120)


def make_states(
    sc: RecoveryScenario,
    t: Target,
    images: Mapping[str, Path],
    work: Path,
    ms: Mapping[str, dict[str, Any]],
) -> None:
    """Make the crash state of every method in ``images`` (method -> image file of
    ``t.size`` bytes), their facts into ``ms`` (method -> the item's metrics).

    :raise HarnessError: a guest step failed, the churn had stopped, the log has no mark
        (GuestTimeout / GuestPanic for a hang or a panic).
    """
    disks = [Disk(images["sigkill"], SERIALS["sigkill"])] if "sigkill" in images else []
    lw = "dm-log-writes" in images
    dut, log = work / "lw-dut.raw", work / "lw-log.raw"
    if lw:
        # The log holds the written data: mkfs.ext2/3 zeroes its inode tables through
        # dm-log-writes (no write-zeroes there), about 1/64 of the size. Sparse: only
        # what is logged takes room.
        for path, size in ((dut, t.size), (log, t.size // 4 + (1 << 30))):
            with open(path, "wb") as f:
                f.truncate(size)
        disks += [Disk(dut, "dut"), record.log_disk(log, "log")]
    try:
        with start_guest(guest_spec(sc, disks)) as g:
            boot = round(g.boot_seconds(), 2)
            record.install_scripts(g)
            for m in ms.values():
                m["boot_seconds"] = boot
            if lw:
                _logged(sc, t, g, ms["dm-log-writes"])
            if "sigkill" in images:
                _killed(sc, t, g, ms["sigkill"])
        dut.unlink(missing_ok=True)
        if lw:
            ms["dm-log-writes"]["crash"] |= replay_to_mark(log, images["dm-log-writes"], t.size)
    finally:
        dut.unlink(missing_ok=True)
        log.unlink(missing_ok=True)


def _killed(sc: RecoveryScenario, t: Target, g: Guest, m: dict[str, Any]) -> None:
    """Populate, churn, SIGKILL QEMU: the image is left as the guest's crash."""
    mnt = MOUNTS["sigkill"]
    _populate(sc, t, g, g.disk(SERIALS["sigkill"]), mnt, m)
    pid = _churn(sc, t, g, mnt)
    time.sleep(sc.crash.after)
    # The churn must still be running when the plug is pulled: a crash of an idle
    # filesystem would leave nothing to recover.
    running = g.run(["kill", "-0", str(pid)], timeout=60).ok
    g.kill()
    if not running:
        raise HarnessError(f"the churn of {t.name} had stopped before the kill")
    m["crash"] = {"after_seconds": sc.crash.after, "killed": "SIGKILL", "churn_running": True}


def _logged(sc: RecoveryScenario, t: Target, g: Guest, m: dict[str, Any]) -> None:
    """Populate and churn on dm-log-writes; mark the log while the churn runs."""
    marker = record.DmMarker(g)

    def step(name: str, argv: list[str]) -> str:
        return _run(g, argv, sc.timeout, f"{name} (dm-log-writes recording of {t.name})")

    mnt = MOUNTS["dm-log-writes"]
    dev = marker.setup(step, g)
    _populate(sc, t, g, dev, mnt, m)
    pid = _churn(sc, t, g, mnt)
    time.sleep(sc.crash.after)
    marker.mark(step, CRASH_MARK)
    # Still running after the mark, so running when it was taken.
    running = g.run(["kill", "-0", str(pid)], timeout=60).ok
    stopped = program(g, contract.Stopped, "stop", ["--pid", str(pid), "--timeout", "120"], 180)
    if not running:
        raise HarnessError(f"the churn of {t.name} had stopped before the mark")
    m["crash"] = {"after_seconds": sc.crash.after, "mark": CRASH_MARK, "churn_running": True}
    if not stopped.stopped:
        # Blocked in the kernel after the mark (seen with JFS in long test runs): the
        # state is the log cut at the mark, so what the churn does after it is no part of
        # it. Where it waits is kept as a fact, and the filesystem stays mounted until the
        # guest goes. The mark rewrote the log's superblock when it was logged, two
        # minutes ago, so the log up to it is in the disk file (cache.direct=on);
        # replay_to_mark says so if it is not.
        record.check_log_errors(g)
        m["crash"]["churn_stuck"] = stopped.stuck or "SIGKILL did not end it in 120 s"
        return
    step("umount", ["umount", mnt])
    marker.teardown(step, g)  # waits for the log to be written; checks its errors


def _populate(
    sc: RecoveryScenario, t: Target, g: Guest, dev: str, mnt: str, m: dict[str, Any]
) -> None:
    pop = sc.population
    facts = program(g, contract.Populated, "populate", [
        "--dev", dev, "--mnt", mnt, "--fs", t.cell.fs, "--mkfs", json.dumps(t.cell.mkfs_argv()),
        "--mount-opts", ",".join(t.cell.mount_options), "--seed", str(t.seed),
        "--files", str(pop.files), "--dirs", str(pop.dirs), "--file-size", str(pop.file_size),
        "--fill", str(pop.fill), "--size", str(t.size), "--timeout", str(sc.timeout),
    ], sc.timeout + 60)  # fmt: skip
    for name, ran in (("mkfs", facts.mkfs), ("mount", facts.mount), ("fallocate", facts.fallocate)):
        if ran is not None and ran.rc != 0:
            raise HarnessError(f"{name} failed in the guest for {t.name}", detail=ran.output)
    m["mkfs_seconds"] = round(facts.mkfs.seconds, 3)
    m["populate_seconds"] = round(facts.populate_seconds, 3)
    m["population"] = facts.usage.to_dict() if facts.usage else None


def _churn(sc: RecoveryScenario, t: Target, g: Guest, mnt: str) -> int:
    args = ["--mnt", mnt, "--fsync-every", str(sc.crash.fsync_every)]
    return program(g, contract.Churning, "churn", [*args, "--seed", str(t.churn_seed)], 60).pid


def replay_to_mark(
    log_path: Path, image: Path, size: int, text: str = CRASH_MARK
) -> dict[str, Any]:
    """Build ``image`` from the log's entries up to the mark ``text``; what was replayed.

    :raise HarnessError: the log has no such mark (the recording is the lab's to fix).
    """
    start = time.monotonic()
    with logwrites.open_log(log_path) as lg:
        mark = lg.find_mark(text)
        if mark is None:
            raise HarnessError(
                f"the dm-log-writes log {log_path} has no {text!r} mark",
                detail=f"marks: {list(lg.marks.values())[:10]}",
            )
        with Replayer(lg, image, size) as rp:
            rp.advance(mark + 1)
        return {"method": "dm-log-writes", **prefix_stats(lg, mark)} | {
            "log_bytes": lg.used,
            "replay_seconds": round(time.monotonic() - start, 3),
        }


def prefix_stats(lg: logwrites.Log, end: int) -> dict[str, int]:
    """Entries, writes, flushes, FUAs and bytes written before entry ``end``."""
    writes = flushes = fuas = written = 0
    for e in lg.entries[:end]:
        flushes += e.is_flush
        fuas += e.is_fua
        if e.is_write:
            writes += 1
            written += e.data_len
    return {"log_entries": end, "writes": writes, "flushes": flushes, "fuas": fuas,
            "bytes_written": written}  # fmt: skip


def program(g: Guest, kind: type[M], action: str, args: list[str], timeout: float) -> M:
    """One action of the guest program; its facts, a ``kind``.

    :raise HarnessError: the program itself failed, or answered what the contract
        cannot read (never a finding).
    """
    what = f"recoveryload.py {action}"
    return guestmsg.read(kind, what, _run(g, ["python3", PROGRAM, action, *args], timeout, what))


def _run(g: Guest, argv: list[str], timeout: float, what: str) -> str:
    r = g.run(argv, timeout=timeout)
    if not r.ok:
        raise HarnessError(f"{what} failed in the guest", detail=(r.err or r.out)[-2000:])
    return r.out
