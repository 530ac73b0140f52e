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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import proc
from harness.config import fiojob as fiojobrules
from harness.config.crash import FsSpec
from harness.errors import HarnessError, InputError
from harness.model import contract, kernlog
from harness.record import blklogwrites, fiojob, fsstress, guestfiles, guestmsg, logwrites
from harness.vm.backend import Disk, Guest, GuestSpec, start_guest

DM_NAME = "crashlab-lw"
DM_SECOND_NAME = "crashlab-lw-log"  # fs.devices = 2: the journal's or log's own device
MOUNTPOINT = "/mnt/test"
GUEST_DIR = "/tmp/crashlab"
MKFS_MARK = "crashlab:mkfs"
FILL_MARK = "crashlab:fill"  # after fs.fill's files are synced: the workload's start
UMOUNT_MARK = "crashlab:umount"
FSTESTS_MKFS_MARK = "mkfs"


@dataclass(frozen=True)
class WorkloadSpec:
    type: str  # "ops" (harness/guest/opgen.py), "fio", "app" or "fsstress"
    ops: int = 200
    files: int = 16
    max_size: int = 256 * 1024
    fsync_names: bool = True
    fio_job: str = ""
    fio_sections: int = 0  # "fio": judged by data in this many sections (0: not judged)
    # A positive control: the workload "syncs" without calling fsync (the marks and the
    # oracle as if it had), so the oracle must find the data missing.
    noop_sync: bool = False
    flush_after_sync: bool = False  # fsync the device too after each sync call
    extended: bool = False  # opgen's extended op mix
    bug_ops: bool = False  # and the ops real bugs needed
    pattern: str = ""  # "app": harness/guest/apppat.py's pattern
    transactions: int = 4  # "app", sqlite-commit: transactions per database
    procs: int | None = None  # "fsstress": processes (None: the guest's CPUs, at most 8)
    binary: str = ""  # "fsstress": the host's binary, copied into the guest
    ops_json: str = ""  # "file": the parsed ops (harness/model/opfile.py), as JSON
    ordered_metadata: bool = False  # judged by oracle rule 18 too
    family: str = ""  # "ops": the first seed drawn whose workload is of this op family
    end: str = "sync"  # "ops", "file": the op that ends the workload (crash.method)
    full: bool = False  # "ops", "file": the disk was filled, so ENOSPC fails an op, not the run
    processes: int = 1  # "ops": drawn and called by this many processes at once


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
    workload_info: dict[str, Any] = field(default_factory=dict)  # e.g. which fsstress ran
    second_log: Path | None = None  # fs.devices = 2: the log device's own log


RECORDERS = ("dm-log-writes", "qemu-blklogwrites")


def record(
    workdir: Path,
    fs: FsSpec,
    workload: WorkloadSpec,
    seed: int,
    *,
    timeout: float = 1800,
    recorder: str = "dm-log-writes",
) -> Recording:
    """Boot a guest, run mkfs + workload on a logged disk, return the log on the host.

    ``dm-log-writes`` (the default) logs in the guest kernel, below the filesystem: every
    write with its FLUSH/FUA flags, and a mark at every completed fsync.
    ``qemu-blklogwrites`` logs on the host, in QEMU's block layer, in the same format. It
    cannot show what the guest kernel does not pass down to QEMU: no FUA (virtio-blk
    turns it into write + flush) and no marks — the host places marks only between guest
    commands (after mkfs, and after the workload's final sync), so the oracle can require
    only what the final mark requires; entries are in completion order.
    """
    if recorder not in RECORDERS:
        raise HarnessError(f"unknown recorder {recorder!r}")
    workdir.mkdir(parents=True, exist_ok=True)
    dut = workdir / "dut.raw"
    logdev = workdir / "log.raw"
    files = [(dut, fs.disk_size), (logdev, max(4 * fs.disk_size, 1 << 30))]
    ld = fs.second_device
    if ld:
        second_log = max(4 * fs.second_size, 1 << 30)
        files += [(workdir / SECOND_DUT, fs.second_size), (workdir / SECOND_LOG, second_log)]
    for path, size in files:
        path.unlink(missing_ok=True)
        with open(path, "wb") as f:
            f.truncate(size)
    disks: tuple[Disk, ...]
    if recorder == "dm-log-writes":
        disks = (Disk(dut, "dut"), log_disk(logdev, "log"))
        if ld:
            disks += (
                Disk(workdir / SECOND_DUT, "dut2"),
                log_disk(workdir / SECOND_LOG, "log2"),
            )
    else:
        disks = (Disk(dut, "dut", blklogwrites=logdev),)
    spec = GuestSpec(disks=disks, command_timeout=timeout, workdir=None)
    host_marks: list[tuple[int, str]] = []
    with start_guest(spec) as guest:
        seconds: dict[str, float] = {"boot": guest.boot_seconds()}
        kernel = guest.run(["uname", "-r"], check=True).out.strip()
        if recorder == "dm-log-writes":
            marker: Marker = DmMarker(guest, two=ld is not None)
        else:
            marker = HostMarker(logdev, host_marks)
        info: dict[str, Any] = {}
        oracle, output = _record_in(guest, fs, workload, seed, seconds, marker, info)
        accelerator = guest.accelerator
    if host_marks:
        blklogwrites.insert_marks(logdev, host_marks)
    if oracle.get("fio"):
        with logwrites.open_log(logdev) as lg:
            fiojob.check_marks(list(lg.marks.values()), oracle)
    trim_log(logdev)
    if ld:
        trim_log(workdir / SECOND_LOG)
        (workdir / SECOND_DUT).unlink()
    return Recording(
        log_path=logdev,
        device_size=fs.disk_size,
        oracle=oracle,
        seconds=seconds,
        guest_kernel=kernel,
        accelerator=accelerator,
        workload_output=output,
        workload_info=info,
        second_log=workdir / SECOND_LOG if ld else None,
    )


SECOND_DUT = "dut2.raw"
SECOND_LOG = "log2.raw"  # beside log.raw in a run's directory


class Marker:
    """How a mark gets into the log, and which device the filesystem is made on."""

    per_sync = False  # can the workload mark every fsync itself?
    names: tuple[str, ...] = ()  # its dm-log-writes devices, the workload's --dm-name
    dev2: str = ""  # set up with fs.devices = 2: the log device's path

    def setup(self, step: Step, guest: Guest) -> str:
        raise NotImplementedError

    def mark(self, step: Step, text: str) -> None:
        raise NotImplementedError

    def teardown(self, step: Step, guest: Guest) -> None:
        pass


Step = Callable[[str, list[str]], str]


def log_disk(path: Path, serial: str) -> Disk:
    """The disk a dm-log-writes log goes to, through the host's page cache: with O_DIRECT,
    the guest's first 512-byte writes into a fresh slice of the sparse file failed now and
    then (1 of 80 ACE workloads, "I/O error, dev vdc" at the slice's sector 3; 5 of 80 with
    the file preallocated; dm-log-writes then says error=10); buffered, 0 of 160. A log is
    never a crash image: the host reads it once the guest has quit."""
    return Disk(path, serial, host_cache=True)


def create_log_writes(step: Step, name: str, dev: str, logdev: str) -> str:
    """A dm-log-writes device ``name`` logging ``dev``'s writes to ``logdev``; its path."""
    sectors = step("dm-create", ["blockdev", "--getsz", dev]).strip()
    table = f"0 {sectors} log-writes {dev} {logdev}"
    step("dm-create", ["dmsetup", "create", name, "--table", table])
    return f"/dev/mapper/{name}"


def mark_logs(step: Step, names: Sequence[str], text: str) -> None:
    """The mark ``text`` in the log of every dm-log-writes device in ``names``.

    With several devices (a pool's vdevs) each is suspended while the marks go in, one
    after the other: no write can reach one device between its mark and another's, so
    the marks are one moment of all of them by construction. --nolockfs: no filesystem
    of the kernel's sits directly on these devices to freeze.
    """
    if len(names) == 1:
        step("mark", ["dmsetup", "message", names[0], "0", "mark", text])
        return
    for name in names:
        step("mark", ["dmsetup", "suspend", "--nolockfs", name])
    for name in names:
        step("mark", ["dmsetup", "message", name, "0", "mark", text])
    for name in names:
        step("mark", ["dmsetup", "resume", name])


class DmMarker(Marker):
    """dm-log-writes in the guest: ``dmsetup message ... mark TEXT``; with a log device
    (``two``), one dm-log-writes device each, every mark in both logs at one moment."""

    per_sync = True

    def __init__(self, guest: Guest, two: bool = False) -> None:
        self.guest = guest
        self.names = (DM_NAME, DM_SECOND_NAME) if two else (DM_NAME,)

    def setup(self, step: Step, guest: Guest) -> str:
        made = []
        for name, dut, log in zip(self.names, ("dut", "dut2"), ("log", "log2"), strict=False):
            dev = step("resolve", ["readlink", "-f", guest.disk(dut)]).strip()
            logdev = step("resolve", ["readlink", "-f", guest.disk(log)]).strip()
            made.append(create_log_writes(step, name, dev, logdev))
        self.dev2 = made[1] if len(made) > 1 else ""
        return made[0]

    def mark(self, step: Step, text: str) -> None:
        mark_logs(step, self.names, text)

    def teardown(self, step: Step, guest: Guest) -> None:
        for name in self.names:
            step("dm-remove", ["dmsetup", "remove", name])
        check_log_errors(guest)


def trim_log(path: Path) -> None:
    """Keep only the log of a log device the guest has quit: the device is larger than
    its log (sparse), and the blocks of zeros the guest wrote into it go back to holes --
    mkfs.xfs zeroes its journal through dm-log-writes, 67 of the 70 MB of a small xfs
    workload's log. The log reads back byte for byte."""
    with logwrites.open_log(path) as lg:
        used = lg.used
    os.truncate(path, used)
    dig_holes(path)


def dig_holes(path: Path) -> None:
    """Blocks of zeros in ``path`` become holes; its bytes read back the same."""
    proc.run(["fallocate", "--dig-holes", str(path)])


def check_log_errors(guest: Guest) -> None:
    """dm-log-writes reports a full log device or a failed log write only in the kernel
    log, and a disk the host failed shows only there too: say it here.

    :raise HarnessError: the log lost entries, or the recording's disks failed, so no
        crash state of it can be trusted.
    """
    kmsg = guest.run(["dmesg"]).out.splitlines()
    said = kernlog.log_writes_errors(kmsg)
    disks = kernlog.disk_errors(kmsg)
    if said or disks:
        what = "dm-log-writes reported an error while logging" if said else "a disk failed"
        raise HarnessError(
            f"{what} (the host's disk file, not the filesystem)",
            detail="\n".join([*disks, *said])[-2000:],
        )


class HostMarker(Marker):
    """QEMU's blklogwrites: the host notes how many entries the log has after a guest
    command finished; the marks are inserted into the log afterwards."""

    def __init__(self, logfile: Path, marks: list[tuple[int, str]]) -> None:
        self.logfile = logfile
        self.marks = marks

    def setup(self, step: Step, guest: Guest) -> str:
        return step("resolve", ["readlink", "-f", guest.disk("dut")]).strip()

    def mark(self, step: Step, text: str) -> None:
        self.marks.append((blklogwrites.count_entries(self.logfile), text))


def install_scripts(guest: Guest) -> None:
    """The model package, the guest programs and their launchers (``guestfiles``)."""
    guest.run(["mkdir", "-p", GUEST_DIR, MOUNTPOINT], check=True)
    guest.write_file(f"{GUEST_DIR}/programs.tar", guestfiles.archive())
    guest.run(["tar", "-xf", f"{GUEST_DIR}/programs.tar", "-C", GUEST_DIR], check=True)


def _record_in(
    guest: Guest,
    fs: FsSpec,
    workload: WorkloadSpec,
    seed: int,
    seconds: dict[str, float],
    marker: Marker,
    info: dict[str, Any],
) -> tuple[dict[str, Any], str]:
    def step(name: str, argv: list[str]) -> str:
        start = time.monotonic()
        r = guest.run(argv)
        seconds[name] = seconds.get(name, 0.0) + time.monotonic() - start
        if not r.ok:
            raise HarnessError(
                f"recording failed at step '{name}' (exit status {r.exitcode})",
                detail="$ " + shlex.join(argv) + "\n" + (r.err or r.out).strip()[-3000:],
            )
        return r.out

    install_scripts(guest)
    dev = marker.setup(step, guest)
    ld, dev2 = fs.second_device, marker.dev2
    if ld and ld.mkfs:
        step("mkfs", [*ld.mkfs, dev2])
    step("mkfs", fs.mkfs_argv(dev, dev2))
    marker.mark(step, MKFS_MARK)
    if workload.type == "fsstress":
        # fstests' own mark too: its replay-log (--end-mark mkfs) and `scenario check-log
        # --after-mark mkfs` find generic/482's start point in the lab's log.
        marker.mark(step, FSTESTS_MKFS_MARK)
    try:
        step("mount", fs.mount_argv(dev, MOUNTPOINT, dev2=dev2))
    except HarnessError as e:
        raise _refused_options(guest, fs, e) from None
    if fs.fill:
        argv = ["python3", f"{GUEST_DIR}/fill.py", "--root", MOUNTPOINT, "--fraction", str(fs.fill)]
        info["fill"] = json.loads(step("fill", argv))
        marker.mark(step, FILL_MARK)
    oracle_path = f"{GUEST_DIR}/oracle.json"
    oracle: dict[str, Any] = {}
    marks = (
        ["--mark-cmd", "dmsetup", "--dm-name", ",".join(marker.names)]
        if marker.per_sync
        else ["--mark-cmd", "none"]
    )
    if workload.type in ("ops", "app", "file"):
        if workload.type == "file":
            guest.write_file(OPS_FILE, workload.ops_json.encode())
        output = step("workload", _generator_argv(workload, seed, oracle_path, marks))
        oracle = json.loads(guest.read_file(oracle_path))
        if not marker.per_sync and oracle.get("final_mark"):
            # opgen ended with sync: the final mark's requirements hold from here on.
            marker.mark(step, str(oracle["final_mark"]))
    elif workload.type == "fio":
        output, oracle = _run_fio(guest, step, workload, seed, marker)
    elif workload.type == "fsstress":
        output = _run_fsstress(guest, step, workload, seed, info)
    else:
        raise HarnessError(f"unknown workload type {workload.type!r}")
    step("umount", ["umount", MOUNTPOINT])
    marker.mark(step, UMOUNT_MARK)
    marker.teardown(step, guest)
    return oracle, output


def _run_fio(
    guest: Guest, step: Step, w: WorkloadSpec, seed: int, marker: Marker
) -> tuple[str, dict[str, Any]]:
    """The fio job; with ``fio_sections`` split into marked sections (``fiojob``), its
    oracle, whose premise -- every block of every section is fio's own -- is checked on
    the live filesystem after the final sync, so a job that breaks it fails the
    recording instead of making false findings."""
    job, oracle = w.fio_job, {}
    if w.fio_sections:
        parsed = fiojobrules.parse(w.fio_job, w.fio_sections)
        mark_argv = ["dmsetup", "message", DM_NAME, "0", "mark"] if marker.per_sync else None
        job = fiojob.render(parsed, mark_argv)
        oracle = fiojob.oracle(parsed, marked=marker.per_sync, fsync_names=w.fsync_names)
    guest.write_file(f"{GUEST_DIR}/job.fio", job.encode())
    # Run from GUEST_DIR: fio leaves its verify state and post-run output in its working
    # directory, which must not be the filesystem under test.
    fio = ["env", "-C", GUEST_DIR, "fio", f"--directory={MOUNTPOINT}", "--output-format=terse"]
    output = step("workload", [*fio, f"--randseed={seed}", f"{GUEST_DIR}/job.fio"])
    step("sync", ["sync"])
    final = oracle.get("final_mark", "crashlab:sync:1")
    marker.mark(step, final)
    if oracle:
        path = f"{GUEST_DIR}/oracle.json"
        guest.write_file(path, json.dumps(oracle).encode())
        out = step("fio-premise", [*FIOVERIFY, MOUNTPOINT, path, final])
        said = guestmsg.read(contract.FioPremise, "fioverify.py", out).verdict
        if not said.ok:
            raise HarnessError(
                "the fio job did not write every block of its sections once with a verify"
                " header: its states cannot be judged by data",
                detail=said.to_json()[:2000],
            )
    return output, oracle


FIOVERIFY = ["python3", f"{GUEST_DIR}/fioverify.py"]
OPS_FILE = f"{GUEST_DIR}/ops.json"  # a workload file's ops, for opgen.py run --ops-file


def _run_fsstress(
    guest: Guest, step: Step, w: WorkloadSpec, seed: int, info: dict[str, Any]
) -> str:
    """generic/482's workload: fsstress in the mount point, then (as generic/482 does)
    straight to umount, no sync of its own."""
    host_binary = fsstress.require(w.binary)
    program = f"{GUEST_DIR}/fsstress"
    guest.write_file(program, host_binary.read_bytes())
    step("fsstress-install", ["chmod", "755", program])
    procs = fsstress.procs_for(int(step("nproc", ["nproc"]).strip()), w.procs)
    argv = fsstress.argv(program, MOUNTPOINT, ops=w.ops, procs=procs, seed=seed)
    info.update(fsstress=fsstress.digest(host_binary), argv=argv)
    return step("workload", argv)


def _generator_argv(w: WorkloadSpec, seed: int, oracle_path: str, marks: list[str]) -> list[str]:
    """The guest command of a workload that writes its own oracle: the op generator, or
    an application pattern (harness/guest/apppat.py)."""
    if w.type in ("ops", "file"):
        program = ["opgen.py", "run", "--ops", str(w.ops), "--max-size", str(w.max_size)]
        program += ["--ops-file", OPS_FILE] if w.type == "file" else []
        program += ["--ordered-metadata"] if w.ordered_metadata else []
        program += ["--noop-sync"] if w.noop_sync else []
        program += ["--flush-after-sync"] if w.flush_after_sync else []
        program += ["--extended"] if w.extended else []
        program += ["--bug-ops"] if w.bug_ops else []
        program += ["--family", w.family] if w.family else []
        program += ["--end", w.end] if w.end != "sync" else []
        program += ["--tolerate-enospc"] if w.full else []
        program += ["--processes", str(w.processes)] if w.processes > 1 else []
    else:
        program = ["apppat.py", "--pattern", w.pattern, "--size", str(w.max_size)]
        program += ["--transactions", str(w.transactions)]
    return [
        "python3", f"{GUEST_DIR}/{program[0]}", *program[1:],
        "--root", MOUNTPOINT, "--seed", str(seed), "--files", str(w.files),
        "--fsync-names", "yes" if w.fsync_names else "no",
        *marks, "--oracle", oracle_path,
    ]  # fmt: skip


# What the kernels say about a mount option they do not know (ext4, xfs, btrfs).
OPTION_REFUSED = ("unrecognized mount option", "unknown parameter", "bad value for")


def _refused_options(guest: Guest, fs: FsSpec, e: HarnessError) -> Exception:
    """A mount of a freshly made filesystem that failed: bad input when the guest kernel
    says an option is unknown (before any crash state is made), else the lab's failure."""
    said = [
        line.split("]", 1)[-1].strip()
        for line in guest.run(["dmesg"]).out.splitlines()
        if any(w in line.lower() for w in OPTION_REFUSED)
    ]
    if not said:
        return e
    opts = ",".join(fs.all_mount_options())
    return InputError(
        f"key 'fs.mount_options': the guest's mount -t {fs.type} -o {opts} failed: {said[-1]}",
        hint="fix or remove it in fs.mount_options (or --set fs.mount_options=...)",
        detail=e.detail,
    )
