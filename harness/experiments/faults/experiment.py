"""fsync-eio (kind ``faults``): what fsync reports when the disk fails writes, and what
is on disk afterwards, per filesystem -- the "fsyncgate" question, measured.

Per filesystem (a cell of the scenario), in a fresh guest: the disk sits on dm-flakey,
loaded healthy; ``harness/guest/eioprobe.py`` makes the filesystem, writes a file and
fsyncs it, overwrites it without fsync, switches the device to the fault by a table reload
(``faults/dm.py``), then fsyncs twice, reopens and fsyncs, tries a new file, restores the
device, fsyncs again, remounts and reads the file back; blocking calls are bounded. Every
step's errno (or ``blocked``) and the filesystem's kernel messages are stored as one
observation per filesystem.

Verdict: the documented contract (Linux >= 4.13, errseq) is that a write error is
reported to fsync once per open file and the page may then be dropped, so "EIO, then 0,
then old data" is a fact of the table, not a finding. A finding is ``data_loss`` only when
*no* fsync reported anything and the data is not there -- the error was lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from faults.dm import healthy_table_args
from harness.check.zpool import parse_status
from harness.errors import GuestPanic, GuestTimeout, HarnessError
from harness.experiments import lifecycle
from harness.experiments.faults.settings import FaultsScenario, FsCell
from harness.model import contract
from harness.outcome import Outcome
from harness.record import guestmsg
from harness.record import recorder as record
from harness.vm.backend import Disk, Guest, GuestSpec, start_guest

FSYNC_STEPS = ("fsync-1", "fsync-2", "reopen-fsync")
MKFS_FORCE = {"xfs": "-f", "btrfs": "-f"}


class Cell:
    def __init__(self, fs: FsCell) -> None:
        self.fs = fs

    @property
    def id(self) -> str:
        return self.fs.name()


class FsyncEio(lifecycle.Observed):
    """One filesystem per item; see the module docstring."""

    def prepare(self) -> None:
        assert isinstance(self.sc, FaultsScenario)
        self.cells = [Cell(fs) for fs in self.sc.filesystems]
        self.rows: dict[str, dict[str, Any]] = {}

    def items(self) -> Sequence[Cell]:
        return self.cells

    def check(self, todo: Sequence[lifecycle.Item]) -> Iterator[tuple[Cell, dict[str, Any]]]:
        for n, cell in enumerate(c for c in todo if isinstance(c, Cell)):
            self.run.progress(f"fsync-eio: {cell.id}", n, len(todo))
            yield cell, self._probe(cell)

    module: ClassVar[str] = "dm-flakey"

    def disk_serials(self) -> tuple[str, ...]:
        """Serials of the fresh disks each cell gets."""
        return ("dut",)

    def _probe(self, cell: Cell) -> dict[str, Any]:
        """Fresh disks and a fresh guest for one cell; a hang or a panic is that cell's
        ``timeout``/``panic``, the disks are deleted however it ends."""
        disks = []
        for serial in self.disk_serials():
            path = self.run.dir / f"{len(self.rows)}-{serial}.raw"
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as f:
                f.truncate(self.sc.disk_size)
            disks.append(Disk(path, serial))
        spec = GuestSpec(disks=tuple(disks), command_timeout=self.guest_timeout())
        try:
            with start_guest(spec) as g:
                for m in (self.module, *(["zfs"] if cell.fs.type == "zfs" else [])):
                    r = g.run(["modprobe", m], timeout=120)
                    if not r.ok:
                        raise HarnessError(f"modprobe {m} failed in the guest", detail=r.err)
                record.install_scripts(g)
                devs = [
                    g.run(["readlink", "-f", g.disk(d.serial)], check=True).out.strip()
                    for d in disks
                ]
                return self.probe(g, cell.fs, devs)
        except (GuestTimeout, GuestPanic) as e:
            kind = Outcome.TIMEOUT if isinstance(e, GuestTimeout) else Outcome.PANIC
            return {"outcome": str(kind), "error": e.message, "console": e.console[-1500:]}
        finally:
            for d in disks:
                d.path.unlink(missing_ok=True)

    def guest_timeout(self) -> float:
        return float(self.sc.timeout * 12 + 300)

    def probe(self, g: Guest, fs: FsCell, devs: list[str]) -> dict[str, Any]:
        """Run the guest program on the cell's devices: its facts and the verdict."""
        args = eio_args(fs, self.sc, devs[0])
        out = _guest_program(g, "eioprobe.py", args, self.sc.timeout * 12 + 120)
        facts = guestmsg.read(contract.EioFacts, "eioprobe.py", out)
        return {**facts.to_dict(), **judge(facts)}

    def commit(self, item: lifecycle.Item, result: Any) -> None:
        assert isinstance(item, Cell)
        outcome = Outcome(result["outcome"])
        self.rows[item.id] = result
        cell = {**item.fs.model_dump(mode="json"), "name": item.fs.name()}
        self.run.store.record_observation(self.run.run_id, item.id, cell, result, outcome)

    def summary(self) -> dict[str, Any]:
        return {"filesystems": len(self.cells), "fault": str(self.sc.fault.mode)}


def eio_args(fs: FsCell, sc: FaultsScenario, dev: str) -> list[str]:
    sectors = sc.disk_size // 512
    healthy = " ".join(["0", str(sectors), "flakey", *healthy_table_args(dev)])
    faulty = " ".join(["0", str(sectors), "flakey", *sc.fault.fault().table_args(dev)])
    mkfs = [f"mkfs.{fs.type}", MKFS_FORCE.get(fs.type, "-F"), "-q", *fs.mkfs_options]
    failmode = next(
        (o.split("=", 1)[1] for o in fs.mount_options if o.startswith("failmode=")), "continue"
    )
    return [
        "--fs", fs.type, "--mkfs", json.dumps(mkfs), "--mount-opts", ",".join(fs.mount_options),
        "--healthy", healthy, "--faulty", faulty, "--failmode", failmode,
        "--timeout", str(sc.timeout),
        *(["--flap", f"{sc.fault.up},{sc.fault.down}"] if sc.fault.up else []),
    ]  # fmt: skip


def _guest_program(g: Guest, name: str, args: list[str], timeout: float) -> str:
    """Run one of harness/guest/'s probes; what it printed.

    :raise HarnessError: the probe itself failed (never a finding).
    """
    r = g.run(["python3", f"{record.GUEST_DIR}/{name}", *args], timeout=timeout)
    if not r.ok:
        raise HarnessError(f"{name} failed in the guest", detail=(r.err or r.out)[-2000:])
    return r.out


def judge(facts: contract.EioFacts) -> dict[str, Any]:
    """The row a person reads, and the verdict (module docstring)."""
    steps = {s.step: s for s in facts.steps}
    for name in ("dm-create", "mkfs", "mount"):
        if name in steps and steps[name].rc != 0:  # None: skipped after one stuck
            return {"outcome": str(Outcome.HARNESS_ERROR), "row": {"setup": name}}
    none = contract.ProbeStep(step="")

    def errno(name: str) -> str:
        s = steps.get(name, none)
        return str(s.error or ("0" if s.errno is not None else "-"))

    def value(name: str) -> str:
        s = steps.get(name, none)
        return str(s.value if s.errno == 0 else s.error or "-")

    row = {
        **{n: errno(n) for n in (*FSYNC_STEPS, "new-file-fsync", "fsync-after-restore")},
        "while faulty": value("mount-state-faulty"),
        "after remount": value("read-after-remount"),
        "kernel": _kernel_events(facts.kernel_log),
    }
    reported = any(row[n] not in ("0", "-", "blocked", "skipped") for n in FSYNC_STEPS)
    blocked = any(s.error == "blocked" or s.rc == -1 for s in steps.values())
    lost = row["after remount"] != "new"
    if blocked:
        # An fsync (or the remount) that never returns is the answer for this filesystem
        # (it waits for the device), but it leaves nothing to judge the data by.
        outcome = Outcome.SKIPPED
    elif lost and not reported:
        outcome = Outcome.DATA_LOSS
    else:
        outcome = Outcome.CONSISTENT
    return {"outcome": str(outcome), "row": row}


def _kernel_events(lines: Sequence[str]) -> str:
    text = "\n".join(lines).lower()
    events = [
        word
        for word, needle in (
            ("remount-ro", "read-only"),
            ("shutdown", "shut down"),
            ("journal-abort", "aborted journal"),
            ("io-error", "i/o error"),
        )
        if needle in text
    ]
    return ",".join(events) or "-"


class DustScrub(FsyncEio):
    """dm-dust bad blocks: a ZFS mirror or raidz scrubs them away; ext4 reports EIO."""

    module = "dm-dust"

    def disk_serials(self) -> tuple[str, ...]:
        return tuple(f"d{i}" for i in range(self.sc.pool_disks))

    def guest_timeout(self) -> float:
        return 1800.0

    def probe(self, g: Guest, fs: FsCell, devs: list[str]) -> dict[str, Any]:
        sc = self.sc
        args = ["--fs", fs.type, "--devs", ",".join(devs), "--layout", sc.layout]
        args += ["--bad-disk", str(sc.bad_disk)]
        args += ["--data-mb", str(sc.data_mb), "--bad-blocks", str(sc.bad_blocks)]
        out = _guest_program(g, "dustprobe.py", [*args, "--timeout", str(sc.timeout)], 1800)
        facts = guestmsg.read(contract.DustFacts, "dustprobe.py", out)
        return {**facts.to_dict(), **judge_dust(facts)}

    def summary(self) -> dict[str, Any]:
        sc = self.sc
        return {"filesystems": len(self.cells), "bad_blocks": sc.bad_blocks, "layout": sc.layout}


def judge_dust(facts: contract.DustFacts) -> dict[str, Any]:
    """ZFS: the mirror or raidz must repair every bad block it read and lose nothing. ext4: the
    read of the bad block must fail with EIO (an error reaching the application)."""
    if facts.fs == "ext4":
        error = facts.read.error if facts.read else None
        row: dict[str, Any] = {"read": error or "ok", "file block": facts.file_block}
        ok = error == "EIO"
        return {"outcome": str(Outcome.CONSISTENT if ok else Outcome.DATA_LOSS), "row": row}
    for step in ("create", "write", "export", "import", "scrub"):
        if facts.commands[step].rc != 0:
            return {"outcome": str(Outcome.HARNESS_ERROR), "row": {"failed": step}}
    status = parse_status(facts.status, "dustpool")
    dusty = next((v for v in status.leaves() if v.path and "dust" in v.path), None)
    same = facts.sha_before == facts.sha_after
    row = {
        "scrub s": facts.scrub_seconds,
        "read errors": dusty.read if dusty else None,
        "cksum errors": dusty.checksum if dusty else None,
        "repaired bytes": status.scan.processed if status.scan else None,
        "data errors": status.error_count,
        "bad blocks left": facts.commands["badblocks_after"].output.split(":")[-1].strip(),
        "data intact": same,
    }
    lost = status.error_count > 0 or not same
    verdict = Outcome.DATA_LOSS if lost else Outcome.CONSISTENT
    return {"outcome": str(verdict), "row": row, "seconds": facts.scrub_seconds}
