"""Record a workload's block writes with dm-log-writes in a fresh guest.

In the guest the disk under test is wrapped as ``log-writes <dut> <logdev>``: every write,
flush, FUA and discard that reaches the device is appended to the log disk, in completion
order, with its data. The workload adds marks: ``crashlab:mkfs`` right after mkfs, then
``crashlab:sync:<n>`` after every completed fsync/fdatasync/sync (written by
``harness/guest/opgen.py``), so the host knows at each log position what must be durable.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import logwrites
from harness.backend import Disk, Guest, GuestSpec, start_guest
from harness.errors import HarnessError

DM_NAME = "crashlab-lw"
MOUNTPOINT = "/mnt/test"
GUEST_DIR = "/tmp/crashlab"
MKFS_MARK = "crashlab:mkfs"
UMOUNT_MARK = "crashlab:umount"
GUEST_SCRIPTS = Path(__file__).parent / "guest"


@dataclass(frozen=True)
class FsSpec:
    type: str
    disk_size: int
    data_mode: str | None = None
    mkfs_options: Sequence[str] = ()
    mount_options: Sequence[str] = ()

    def mkfs_argv(self, dev: str) -> list[str]:
        if self.type in ("ext2", "ext3", "ext4"):
            return [f"mkfs.{self.type}", "-F", "-q", *self.mkfs_options, dev]
        if self.type == "xfs":
            return ["mkfs.xfs", "-f", "-q", *self.mkfs_options, dev]
        if self.type == "btrfs":
            return ["mkfs.btrfs", "-f", "-q", *self.mkfs_options, dev]
        raise HarnessError(f"no mkfs known for filesystem type {self.type!r}")

    def mount_opts(self) -> list[str]:
        opts = list(self.mount_options)
        if self.data_mode:
            opts.append(f"data={self.data_mode}")
        return opts

    def mount_argv(self, dev: str, target: str, extra: Sequence[str] = ()) -> list[str]:
        opts = [*self.mount_opts(), *extra]
        return ["mount", "-t", self.type, *(["-o", ",".join(opts)] if opts else []), dev, target]


@dataclass(frozen=True)
class WorkloadSpec:
    type: str  # "ops" (harness/guest/opgen.py) or "fio"
    ops: int = 200
    files: int = 16
    max_size: int = 256 * 1024
    fsync_names: bool = True
    fio_job: str = ""


@dataclass(frozen=True)
class Recording:
    log_path: Path
    device_size: int
    oracle: dict[str, Any]
    seconds: dict[str, float]
    guest_kernel: str
    accelerator: str
    workload_output: str = ""
    notes: list[str] = field(default_factory=list)


def record(
    workdir: Path, fs: FsSpec, workload: WorkloadSpec, seed: int, *, timeout: float = 1800
) -> Recording:
    """Boot a guest, run mkfs + workload on dm-log-writes, return the log on the host."""
    workdir.mkdir(parents=True, exist_ok=True)
    dut = workdir / "dut.raw"
    logdev = workdir / "log.raw"
    for path, size in ((dut, fs.disk_size), (logdev, max(4 * fs.disk_size, 1 << 30))):
        path.unlink(missing_ok=True)
        with open(path, "wb") as f:
            f.truncate(size)
    spec = GuestSpec(
        disks=(Disk(dut, "dut"), Disk(logdev, "log")), command_timeout=timeout, workdir=None
    )
    with start_guest(spec) as guest:
        seconds: dict[str, float] = {"boot": guest.boot_seconds()}
        kernel = guest.run(["uname", "-r"], check=True).out.strip()
        oracle, output = _record_in(guest, fs, workload, seed, seconds)
        accelerator = guest.accelerator
    # The log device is sparse and larger than the log: keep only the log.
    with logwrites.open_log(logdev) as lg:
        used = lg.used
    os.truncate(logdev, used)
    return Recording(
        log_path=logdev,
        device_size=fs.disk_size,
        oracle=oracle,
        seconds=seconds,
        guest_kernel=kernel,
        accelerator=accelerator,
        workload_output=output,
    )


def install_scripts(guest: Guest) -> None:
    guest.run(["mkdir", "-p", GUEST_DIR, MOUNTPOINT], check=True)
    for script in sorted(GUEST_SCRIPTS.glob("*.py")):
        if script.name != "__init__.py":
            guest.write_file(f"{GUEST_DIR}/{script.name}", script.read_bytes())


def _record_in(
    guest: Guest, fs: FsSpec, workload: WorkloadSpec, seed: int, seconds: dict[str, float]
) -> tuple[dict[str, Any], str]:
    def step(name: str, argv: list[str], timeout: float | None = None) -> str:
        start = time.monotonic()
        r = guest.run(argv, timeout=timeout)
        seconds[name] = seconds.get(name, 0.0) + time.monotonic() - start
        if not r.ok:
            raise HarnessError(
                f"recording failed at step '{name}' (exit status {r.exitcode})",
                detail="$ " + shlex.join(argv) + "\n" + (r.err or r.out).strip()[-3000:],
            )
        return r.out

    install_scripts(guest)
    dut = step("resolve", ["readlink", "-f", guest.disk("dut")]).strip()
    log = step("resolve", ["readlink", "-f", guest.disk("log")]).strip()
    sectors = step("resolve", ["blockdev", "--getsz", dut]).strip()
    step(
        "dm-create",
        ["dmsetup", "create", DM_NAME, "--table", f"0 {sectors} log-writes {dut} {log}"],
    )
    dev = f"/dev/mapper/{DM_NAME}"
    step("mkfs", fs.mkfs_argv(dev))
    step("mark", ["dmsetup", "message", DM_NAME, "0", "mark", MKFS_MARK])
    step("mount", fs.mount_argv(dev, MOUNTPOINT))
    oracle_path = f"{GUEST_DIR}/oracle.json"
    if workload.type == "ops":
        output = step(
            "workload",
            [
                "python3",
                f"{GUEST_DIR}/opgen.py",
                "run",
                "--root",
                MOUNTPOINT,
                "--seed",
                str(seed),
                "--ops",
                str(workload.ops),
                "--files",
                str(workload.files),
                "--max-size",
                str(workload.max_size),
                "--fsync-names",
                "yes" if workload.fsync_names else "no",
                "--mark-cmd",
                "dmsetup",
                "--dm-name",
                DM_NAME,
                "--oracle",
                oracle_path,
            ],
        )
        oracle = json.loads(guest.read_file(oracle_path))
    elif workload.type == "fio":
        guest.write_file(f"{GUEST_DIR}/job.fio", workload.fio_job.encode())
        output = step(
            "workload",
            [
                "fio",
                f"--directory={MOUNTPOINT}",
                "--output-format=terse",
                f"--randseed={seed}",
                f"{GUEST_DIR}/job.fio",
            ],
        )
        step("sync", ["sync"])
        step("mark", ["dmsetup", "message", DM_NAME, "0", "mark", "crashlab:sync:1"])
        oracle = {}
    else:
        raise HarnessError(f"unknown workload type {workload.type!r}")
    step("umount", ["umount", MOUNTPOINT])
    step("mark", ["dmsetup", "message", DM_NAME, "0", "mark", UMOUNT_MARK])
    step("dm-remove", ["dmsetup", "remove", DM_NAME])
    # dm-log-writes reports a full log device only in the kernel log.
    dmesg = guest.run(["dmesg"]).out
    if "log-writes" in dmesg and ("error" in dmesg.lower() and "log device" in dmesg.lower()):
        raise HarnessError(
            "dm-log-writes reported an error while logging",
            detail="\n".join(line for line in dmesg.splitlines() if "log" in line)[-2000:],
        )
    return oracle, output
