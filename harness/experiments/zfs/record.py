"""Recording a whole pool for ZFS crash states: one dm-log-writes log per vdev.

In one guest, every data disk ``zdK`` sits under its own ``log-writes`` target ``lwK``
logging to its own disk ``zlK`` (2N virtual disks); the pool is created on
``/dev/mapper/lw*``. ZFS takes a dm device as a plain block device (no partition table,
so no wait for udev partition nodes): the guest runs without udev, which boots in a
third of the time. After ``zpool create`` every log gets ``crashlab:mkfs``; the workload
(``harness/guest/zfsload.py``) runs in rounds, each ended by ``zpool sync`` and then the
mark ``crashlab:zsync:<n>`` in every log. ``zpool sync`` returns after the txg is on
every vdev, and the marks go in while every log-writes device is suspended, so the marks
of one round are one moment of the whole pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.experiments.zfs import pool
from harness.experiments.zfs.settings import ZfsScenario
from harness.model import contract
from harness.record import guestmsg
from harness.record import recorder as record
from harness.replay.crashstates import MKFS_MARK
from harness.vm.backend import Disk, Guest, GuestSpec, start_guest

ZSYNC_PREFIX = "crashlab:zsync:"


@dataclass(frozen=True)
class Recording:
    logs: tuple[Path, ...]
    disk_size: int
    required: dict[str, dict[str, str]]  # mark -> {file name: sha256} that must survive
    seconds: dict[str, float]
    zfs_version: str
    guest_kernel: str
    accelerator: str

    def to_json(self) -> dict[str, Any]:
        return {
            "logs": [str(p) for p in self.logs],
            "disk_size": self.disk_size,
            "required": self.required,
            "seconds": self.seconds,
            "zfs_version": self.zfs_version,
            "guest_kernel": self.guest_kernel,
            "accelerator": self.accelerator,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Recording:
        return cls(
            tuple(Path(p) for p in d["logs"]),
            int(d["disk_size"]),
            d["required"],
            d["seconds"],
            d["zfs_version"],
            d["guest_kernel"],
            d["accelerator"],
        )


def required_at_marks(rounds: Sequence[contract.ZfsRound]) -> dict[str, dict[str, str]]:
    """The oracle: at ``crashlab:zsync:n``, every file after round n that round n+1 does
    not touch (the crash may fall anywhere in round n+1); nothing at mkfs."""
    out: dict[str, dict[str, str]] = {MKFS_MARK: {}}
    for i, r in enumerate(rounds):
        nxt = set(rounds[i + 1].touched) if i + 1 < len(rounds) else set()
        out[f"{ZSYNC_PREFIX}{r.round}"] = {
            name: sha for name, sha in r.files.items() if name not in nxt
        }
    return out


def record_pool(rdir: Path, sc: ZfsScenario, seed: int) -> Recording:
    """Boot a guest, build the pool on N logged disks, run the rounds, return the logs."""
    assert sc.crash is not None
    p = sc.pool
    rdir.mkdir(parents=True, exist_ok=True)
    disks = _disks(rdir, p.disks, p.disk_size)
    seconds: dict[str, float] = {}
    spec = GuestSpec(disks=tuple(disks), memory_mb=sc.memory_mb, command_timeout=sc.timeout)
    t = time.monotonic()
    with start_guest(spec) as g:
        seconds["boot"] = time.monotonic() - t

        def step(name: str, argv: list[str], timeout: float = 300) -> str:
            t0 = time.monotonic()
            out = pool.run(g, argv, timeout=timeout)
            seconds[name] = seconds.get(name, 0.0) + time.monotonic() - t0
            return out

        names = [f"lw{k}" for k in range(p.disks)]
        step("modprobe", ["modprobe", "zfs"], timeout=120)
        zfs_version, kernel = pool.versions(g)
        record.install_scripts(g)
        _create_pool(g, step, sc, names)
        rounds = _rounds(step, sc, seed, names)
        step("export", ["zpool", "export", pool.POOL])
        for k in range(p.disks):
            step("dm-remove", ["dmsetup", "remove", f"lw{k}"])
        record.check_log_errors(g)
        accelerator = g.accelerator
    logs = tuple(rdir / f"zl{k}.raw" for k in range(p.disks))
    for path in logs:
        record.trim_log(path)
    for k in range(p.disks):
        (rdir / f"zd{k}.raw").unlink(missing_ok=True)
    return Recording(
        logs, p.disk_size, required_at_marks(rounds), seconds, zfs_version, kernel, accelerator
    )


Step = Callable[..., str]  # step(name, argv, timeout=300): run in the guest, timed as `name`


def _disks(rdir: Path, n: int, disk_size: int) -> list[Disk]:
    """Each pool disk (sparse, ``zdK``) and the disk its writes are logged to (``zlK``)."""
    disks: list[Disk] = []
    for k in range(n):
        for name, size in ((f"zd{k}", disk_size), (f"zl{k}", max(4 * disk_size, 1 << 30))):
            path = rdir / f"{name}.raw"
            path.unlink(missing_ok=True)
            with open(path, "wb") as f:
                f.truncate(size)
            disks.append(record.log_disk(path, name) if name.startswith("zl") else Disk(path, name))
    return disks


def _mark(step: Step, names: list[str], text: str) -> None:
    # One moment of the whole pool by construction (record.mark_logs), not only
    # because ZFS happens to be idle after `zpool sync`.
    record.mark_logs(step, names, text)


def _create_pool(g: Guest, step: Step, sc: ZfsScenario, names: list[str]) -> None:
    """dm-log-writes under every disk, the pool on them, and the mkfs mark."""
    for k, name in enumerate(names):
        dev = step("dm-create", ["readlink", "-f", g.disk(f"zd{k}")]).strip()
        logdev = step("dm-create", ["readlink", "-f", g.disk(f"zl{k}")]).strip()
        record.create_log_writes(step, name, dev, logdev)
    devices = [f"/dev/mapper/{n}" for n in names]
    step("create", pool.create_argv(sc.pool, devices, options=("cachefile=none",)))
    # zpool create can return with a txg still syncing: once, vdev 0 logged one label
    # run more than the others before its mkfs mark (the marks go in one disk after
    # the other) and the mkfs cut scrubbed with checksum errors. Like the round marks,
    # this one must be a quiescent moment.
    step("sync", ["zpool", "sync", pool.POOL])
    _mark(step, names, MKFS_MARK)


def _rounds(step: Step, sc: ZfsScenario, seed: int, names: list[str]) -> list[contract.ZfsRound]:
    """The workload's rounds, each synced and marked on every log."""
    c = sc.crash
    assert c is not None
    rounds: list[contract.ZfsRound] = []
    for n in range(1, c.rounds + 1):
        argv = [
            "python3",
            f"{record.GUEST_DIR}/zfsload.py",
            "round",
            "--root",
            pool.MOUNT,
            "--seed",
            str(seed),
            "--round",
            str(n),
            "--files",
            str(c.files),
            "--max-size",
            str(c.max_size),
            "--ops",
            str(c.ops),
        ]
        out = step("workload", argv, timeout=sc.timeout)
        rounds.append(guestmsg.read(contract.ZfsRound, "zfsload.py round", out))
        step("sync", ["zpool", "sync", pool.POOL])
        _mark(step, names, f"{ZSYNC_PREFIX}{n}")
    return rounds
