"""A pool in a guest: its disks, ``zpool create``, the fill, and reading its state back.

Everything here is argv lists run through ``Guest.run``; parsing lives in ``parse``.
"""

from __future__ import annotations

import contextlib
import os
import random
import shlex
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from faults.disk import DiskFault
from harness.check import zpool as parse
from harness.errors import HarnessError
from harness.experiments.zfs.cells import Cell, Layout, PoolSpec
from harness.experiments.zfs.settings import ZfsScenario
from harness.vm.backend import Disk, Guest, GuestSpec, start_guest

POOL = "tank"
MOUNT = "/tank"
# One fill file per GiB: a single huge file would be one object with one dnode; several
# files look more like a real pool, and a failure says how far the fill got.
MiB = 1 << 20
FILL_CHUNK = 1024 * MiB
# The disk the fill copies from: FILL_CHUNK bytes of seeded random data made on the host.
SOURCE_SERIAL = "zsrc"
# The event queue defaults to 512 entries; a damaged disk yields thousands of checksum
# ereports, and a full queue would drop the scan_start we time from.
ZEVENT_LEN_MAX = 1 << 20


@dataclass(frozen=True)
class DiskSet:
    data: tuple[Disk, ...]
    spares: tuple[Disk, ...]  # fresh disks a lost disk is replaced with
    cache: Disk | None
    log: Disk | None
    source: Disk | None = None  # what a fill copies from (``fill_source``), read-only

    def pool(self) -> tuple[Disk, ...]:
        """The disks a made pool lives on: what a kept fill keeps."""
        return self.data + tuple(d for d in (self.cache, self.log) if d is not None)

    def all(self) -> tuple[Disk, ...]:
        return self.pool() + self.spares + ((self.source,) if self.source else ())


def make_disks(
    directory: Path,
    cell: Cell,
    fault: DiskFault,
    *,
    spares: bool = True,
    host_cache: bool = False,
) -> DiskSet:
    """Sparse raw files for the data disks, one spare per lost disk (unless not
    ``spares``, or the pool's spares are distributed), cache and log; ``host_cache``:
    see ``Disk.host_cache``."""
    directory.mkdir(parents=True, exist_ok=True)

    p = cell.pool

    def disk(serial: str, media: str = p.media) -> Disk:
        path = directory / f"{serial}.raw"
        with open(path, "wb") as f:
            f.truncate(p.disk_size)
        return Disk(path, serial, host_cache=host_cache, media=media)

    return DiskSet(
        tuple(disk(f"zd{i}") for i in range(p.disks)),
        tuple(disk(f"zs{i}") for i in range(_spares(cell, fault) if spares else 0)),
        disk("zc0", p.cache_media) if p.cache else None,
        disk("zl0", p.cache_media) if p.log else None,
    )


def _spares(cell: Cell, fault: DiskFault) -> int:
    """One new disk per lost one. A distributed spare is space on the pool's own disks:
    no new disk to rebuild onto."""
    lost = fault.loses_disks and not cell.pool.distributed_spare
    return len(fault.disks) if lost else 0


def disk_count(cell: Cell, fault: DiskFault) -> int:
    """The most disks a guest holds at once for ``cell``: ``make_disks``'s and a fill
    source."""
    p = cell.pool
    return p.disks + _spares(cell, fault) + int(p.cache) + int(p.log) + 1


def fill_source(directory: Path, seed: int) -> Disk:
    """A read-only disk of ``FILL_CHUNK`` seeded random bytes, made once per directory
    and seed, that ``fill`` copies into the pool.

    Filling is what a sweep's cells cost most under TCG, and making incompressible data
    in the guest was most of it: openssl's AES-CTR ran at ~20 MB/s there, whatever the
    layout, against ~300 MB/s for Python's generator on the host. Every fill file is a
    copy of the same bytes; with compression and dedup off ZFS stores each in full.
    """
    path = directory / f"fill-source-{seed}.raw"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        rng = random.Random(seed)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            for _ in range(FILL_CHUNK >> 24):
                f.write(rng.randbytes(1 << 24))
        os.replace(tmp, path)  # a half-written source is never taken for a whole one
    return Disk(path, SOURCE_SERIAL, readonly=True)


def vdev_args(layout: Layout, devices: list[str], draid_spares: int = 0) -> list[str]:
    if layout is Layout.MIRROR:
        return ["mirror", *devices]
    # raidzN and draidN (dRAID's data/children counts default from the device list).
    spec = f"{layout}:{draid_spares}s" if draid_spares else str(layout)
    return [spec, *devices]


def create_argv(
    p: PoolSpec,
    devices: Sequence[str],
    *,
    cache: str | None = None,
    log: str | None = None,
    options: Sequence[str] = (),
) -> list[str]:
    """``zpool create`` for ``p`` on ``devices`` (paths in the guest); ``options`` are
    extra pool properties (``cachefile=none``)."""
    argv = ["zpool", "create", "-f", "-o", f"ashift={p.ashift}"]
    for opt in options:
        argv += ["-o", opt]
    for prop in (
        "compression=off",
        "atime=off",
        f"recordsize={p.recordsize}",
        f"mountpoint={MOUNT}",
    ):
        argv += ["-O", prop]
    argv += [POOL, *vdev_args(p.layout, list(devices), p.draid_spares)]
    if cache is not None:
        argv += ["cache", cache]
    if log is not None:
        argv += ["log", log]
    return argv


def create_argv_for(g: Guest, cell: Cell, disks: DiskSet) -> list[str]:
    """``zpool create`` of a scan experiment's cell on its attached disks."""
    return create_argv(
        cell.pool,
        [g.disk(d.serial) for d in disks.data],
        cache=g.disk(disks.cache.serial) if disks.cache is not None else None,
        log=g.disk(disks.log.serial) if disks.log is not None else None,
    )


def import_argv() -> list[str]:
    """``zpool import`` of the scan pool. A directory, not the disks' own nodes: ZFS
    labels a whole disk with a partition table and the vdev is its first partition."""
    return ["zpool", "import", "-d", "/dev/disk/by-id", POOL]


@contextlib.contextmanager
def guest(
    sc: ZfsScenario, disks: Sequence[Disk], phases: dict[str, float], *, hotplug_ports: int = 0
) -> Iterator[Guest]:
    """A guest with ZFS loaded; boot, module load and teardown go into ``phases``."""
    t = time.monotonic()
    spec = GuestSpec(
        disks=disks,
        udev=True,
        memory_mb=sc.memory_mb,
        command_timeout=sc.timeout,
        hotplug_ports=hotplug_ports,
    )
    with start_guest(spec) as g:
        phases["boot"] = phases.get("boot", 0.0) + time.monotonic() - t
        t = time.monotonic()
        load_module(g)
        phases["modprobe"] = phases.get("modprobe", 0.0) + time.monotonic() - t
        try:
            yield g
        finally:
            t_down = time.monotonic()
    phases["teardown"] = phases.get("teardown", 0.0) + time.monotonic() - t_down


def run(g: Guest, argv: list[str], *, timeout: float = 300) -> str:
    """Run a ZFS command that must succeed; its failure is a harness error naming it."""
    r = g.run(argv, timeout=timeout)
    if r.exitcode != 0:
        raise HarnessError(
            f"guest command failed with exit status {r.exitcode}: {shlex.join(argv[:3])}",
            detail="$ " + shlex.join(argv) + "\n" + (r.err or r.out).strip()[-2000:],
        )
    return r.out


def load_module(g: Guest) -> None:
    run(g, ["modprobe", "zfs", f"zfs_zevent_len_max={ZEVENT_LEN_MAX}"], timeout=120)
    # udev may have loaded the module already, without the option, when it saw disks
    # with ZFS labels at boot (a filled pool's copies do): then modprobe changes nothing
    # and a 512-entry queue drops the resilver events the scan is timed from. The
    # parameter is writable at run time, so set it there too.
    param = "/sys/module/zfs/parameters/zfs_zevent_len_max"
    run(g, ["sh", "-c", f"echo {ZEVENT_LEN_MAX} > {param}"])


def versions(g: Guest) -> tuple[str, str]:
    """(ZFS kernel module version, guest kernel release)."""
    out = run(g, ["zfs", "version"]).splitlines()
    kmod = next((line for line in out if line.startswith("zfs-kmod-")), out[-1] if out else "")
    return kmod.removeprefix("zfs-kmod-"), run(g, ["uname", "-r"]).strip()


def used_available(g: Guest) -> tuple[int, int]:
    out = run(g, ["zfs", "get", "-Hp", "-o", "property,value", "used,available", POOL])
    return parse.parse_used_available(out)


def fill(g: Guest, nbytes: int, *, timeout: float, name: str = "fill") -> int:
    """Write ``nbytes`` of incompressible data into the pool from the attached fill
    source (``fill_source``); returns the bytes written. The files are ``name-0000``,
    ``name-0001``, ... (a fill continued under another name adds to the pool)."""
    source = g.disk(SOURCE_SERIAL)
    # Whole MiB: O_DIRECT reads (the source must not crowd the ARC out of the guest's
    # memory) are of whole blocks.
    nbytes -= nbytes % MiB
    written = 0
    i = 0
    while written < nbytes:
        n = min(FILL_CHUNK, nbytes - written)
        argv = ["dd", f"if={source}", f"of={MOUNT}/{name}-{i:04d}", "bs=1M", f"count={n // MiB}"]
        run(g, [*argv, "iflag=direct", "status=none"], timeout=timeout)
        written += n
        i += 1
    run(g, ["zpool", "sync", POOL])
    return written


LOAD_JOB = "/tmp/crashlab-load.fio"


def start_load(g: Guest, job: str) -> None:
    """Start the background fio job on the pool (it outlives this command)."""
    g.write_file(LOAD_JOB, job.encode())
    run(g, ["sh", "-c", f"nohup fio {LOAD_JOB} >/tmp/crashlab-load.out 2>&1 &"])


def stop_load(g: Guest) -> None:
    run(g, ["sh", "-c", "pkill -INT -x fio; while pgrep -x fio >/dev/null; do sleep 0.2; done"])


def status(g: Guest) -> parse.PoolStatus:
    return parse.parse_status(run(g, ["zpool", "status", "-j", "--json-int", "-p", POOL]), POOL)


def pool_list(g: Guest) -> parse.PoolList:
    return parse.parse_list(run(g, ["zpool", "list", "-Hp", POOL]))


def events(g: Guest) -> tuple[str, parse.Events]:
    text = run(g, ["zpool", "events", "-v"], timeout=120)
    return text, parse.parse_events(text)


def timed(g: Guest, commands: list[list[str]], *, timeout: float) -> float:
    """Run ``commands`` in one guest shell; seconds between first start and last end by
    the guest's fine-grained clock (``date +%s.%N``), so host-agent round trips are not
    counted but process start-up in the guest is."""
    body = " && ".join(shlex.join(c) for c in commands)
    script = f"a=$(date +%s.%N); {body}; rc=$?; b=$(date +%s.%N); echo $a $b; exit $rc"
    r = g.run(["sh", "-c", script], timeout=timeout)
    if r.exitcode != 0:
        raise HarnessError(
            f"guest command failed with exit status {r.exitcode}: {commands[-1][0]}",
            detail="$ " + body + "\n" + (r.err or r.out).strip()[-2000:],
        )
    words = r.out.split()
    return float(words[-1]) - float(words[-2]) if len(words) >= 2 else float("nan")
