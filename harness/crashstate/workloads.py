"""Recording many workloads in one guest: each on its own slice of one data disk and one
log disk (dm-linear), so each starts on zeros and leaves its own dm-log-writes log.

A boot under TCG costs about as much as recording ten small workloads, so a guest takes
``workloads_per_boot`` of them, all recorded by one ``harness/guest/ace.py serve`` (a
request each: starting Python for each cost 0.9 s of a btrfs seq-2 workload's 2.2). The
logs are cut out of the log disk after the guest is gone, into ``<run>/workloads/<id>/``,
with the workload's oracle and facts beside them; a workload with those files is
recorded, which is what a resumed run skips.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.config.crash import FsSpec
from harness.errors import HarnessError, InputError
from harness.model import contract
from harness.record import guestmsg, guestserve, logwrites
from harness.record import recorder as record
from harness.replay.replayer import data_extents
from harness.vm.backend import Disk, GuestSpec, start_guest

MiB = 1 << 20
# Each workload's log slice: mkfs and ACE's few ops log far less than the device's size
# (a full slice shows as a dm-log-writes error, which fails the batch, never silently).
LOG_SLACK = 16 * MiB
SERVER = f"{record.GUEST_DIR}/recorder"


@dataclass(frozen=True)
class Recorded:
    """One workload's recording, as kept in its folder."""

    folder: Path
    status: str  # recorded | unsupported | failed
    facts: dict[str, Any]

    @property
    def log(self) -> Path:
        return self.folder / "log.raw"

    @property
    def dropped(self) -> list[str]:
        """The ids of the states of a workload whose log its finished run let go
        (``keep_logs = "findings"``), every one judged; empty while the log is kept."""
        return list(self.facts.get("log_dropped", {}).get("states", []))

    def oracle(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.folder / "oracle.json").read_text())
        return data


def folder(rdir: Path, wid: str) -> Path:
    return rdir / "workloads" / wid


def load(rdir: Path, wid: str) -> Recorded | None:
    """A workload's recording kept by an earlier batch, or None."""
    d = folder(rdir, wid)
    facts_path = d / "recording.json"
    if not facts_path.exists():
        return None
    facts = json.loads(facts_path.read_text())
    return Recorded(d, facts["status"], facts)


def record_batch(
    rdir: Path,
    fs: FsSpec,
    workloads: Sequence[dict[str, Any]],
    *,
    timeout: float,
    noop_sync: bool,
    progress: Callable[[int], None],
    flush_after_sync: bool = False,
    ordered_metadata: bool = False,
    tag: str = "",
    cpus: int = GuestSpec.cpus,
    end: str = "sync",
) -> dict[str, float]:
    """Record ``workloads`` in one guest; keep each one's folder. A workload is an
    ``ace.describe`` dict (its ``seq`` and ``index``) or, for triage's candidates, one
    with a ``source`` (``ace.source_ops``) and the ops it ``keep``s, its ``index`` unique
    in the batch. Returns the batch's phase seconds (boot, record). ``tag`` names its
    disks' files, so batches recorded at once (``guestpool.parallel``) have their own;
    ``cpus``: the guest's vCPUs; ``end``: the op that ends each workload (crash.method)."""
    size = fs.disk_size
    log_size = size + LOG_SLACK
    rdir.mkdir(parents=True, exist_ok=True)
    dut, logdisk = rdir / f"batch{tag}-dut.raw", rdir / f"batch{tag}-log.raw"
    for path, length in ((dut, size), (logdisk, log_size)):
        path.unlink(missing_ok=True)
        with open(path, "wb") as f:
            f.truncate(length * len(workloads))
    spec = GuestSpec(
        disks=(Disk(dut, "dut"), record.log_disk(logdisk, "log")),
        command_timeout=timeout,
        cpus=cpus,
    )
    results: list[contract.AceRecord] = []
    seconds: dict[str, float] = {}
    with start_guest(spec) as guest:
        seconds["boot"] = guest.boot_seconds()
        record.install_scripts(guest)
        devs = [
            guest.run(["readlink", "-f", guest.disk(s)], check=True).out.strip()
            for s in ("dut", "log")
        ]
        guestserve.start(guest, SERVER, "ace.py", ["serve"])
        common = [
            "--name", "crashlab-ace", "--dut", devs[0], "--size", str(size),
            "--log", devs[1], "--log-size", str(log_size),
            "--mkfs", json.dumps(fs.mkfs_argv("")[:-1]),
            "--mount", json.dumps(fs.mount_argv("", "")[:-2]),
            "--root", record.MOUNTPOINT, "--timeout", str(timeout),
            "--fsync-names", "yes" if fs.journaled else "no",
            *(["--noop-sync"] if noop_sync else []),
            *(["--flush-after-sync"] if flush_after_sync else []),
            *(["--ordered-metadata"] if ordered_metadata else []),
            *(["--end", end] if end != "sync" else []),
            *(["--fill", str(fs.fill)] if fs.fill else []),
        ]  # fmt: skip
        for i, w in enumerate(workloads):
            argv = [*common, *_which(w), "--dut-offset", str(i * size)]
            argv += ["--log-offset", str(i * log_size)]
            r = guestserve.ask(guest, SERVER, json.dumps(argv), timeout * 2)
            if not r.ok:
                raise HarnessError(
                    f"recording workload {w['id']} failed in the guest ({r.exitcode})",
                    detail=(r.err or r.out)[-3000:],
                )
            results.append(guestmsg.read(contract.AceRecord, "ace.py serve", r.out))
            progress(i + 1)
        record.check_log_errors(guest)
    seconds["record"] = sum(r.seconds for r in results)
    for i, (w, res) in enumerate(zip(workloads, results, strict=True)):
        _keep(rdir, w, res, logdisk, i * log_size, log_size, size)
    dut.unlink()
    logdisk.unlink()
    return seconds


def _which(w: dict[str, Any]) -> list[str]:
    """The record command's arguments that say which workload ``w`` is."""
    argv = ["--index", str(w["index"])]
    if "source" in w:
        # One token each: an empty --keep (the oracle point alone) stays an argument.
        keep = ",".join(map(str, w["keep"]))
        return [*argv, f"--source={json.dumps(w['source'])}", f"--keep={keep}"]
    return [*argv, "--seq", str(w["seq"]), "--grammar", w.get("grammar", "ace")]


def _keep(
    rdir: Path,
    w: dict[str, Any],
    res: contract.AceRecord,
    logdisk: Path,
    offset: int,
    length: int,
    size: int,
) -> None:
    """One workload's folder: its log cut out of the batch's log disk, its oracle, and
    its facts written last (they say the folder is complete)."""
    d = folder(rdir, w["id"])
    d.mkdir(parents=True, exist_ok=True)
    if res.status == "recorded":
        cut_region(logdisk, offset, length, d / "log.raw")
        try:
            with logwrites.open_log(d / "log.raw") as lg:
                used = lg.used
        except InputError as e:
            # The guest said it recorded, the log says otherwise: the lab's failure,
            # kept as this workload's (a harness error), never the run's bad input.
            res = replace(res, status="failed", error=f"its log: {e.message}")
        else:
            os.truncate(d / "log.raw", used)
            (d / "oracle.json").write_text(json.dumps(res.oracle))
    facts = {
        **w,
        "status": res.status,
        "error": res.error or (res.oracle or {}).get("error"),
        "seconds": res.seconds,
        "device_size": size,
        **({"kernel": res.kernel} if res.kernel else {}),
    }
    _write_facts(d, facts)


def drop_log(rec: Recorded, states: Sequence[str]) -> None:
    """Let go of a workload's log once every one of ``states`` is judged (their verdicts
    are in the store; only reproducing one needs the log); its facts say so and name the
    states and the bytes freed on disk."""
    freed = os.stat(rec.log).st_blocks * 512
    facts = {**rec.facts, "log_dropped": {"states": list(states), "bytes": freed}}
    _write_facts(rec.folder, facts)
    rec.log.unlink()


def _write_facts(d: Path, facts: dict[str, Any]) -> None:
    tmp = d / "recording.json.tmp"
    tmp.write_text(json.dumps(facts))
    tmp.replace(d / "recording.json")


def cut_region(src: Path, offset: int, length: int, dst: Path) -> None:
    """Bytes ``[offset, offset + length)`` of ``src`` as the sparse file ``dst``.

    Blocks of zeros stay holes, though the guest wrote them: mkfs.xfs zeroes its journal
    through dm-log-writes, 67 of the 70 MB of an xfs workload's log, so a whole seq-1 run
    kept 14.9 GB of logs; sparse, 2.7 MB a workload. The log reads back byte for byte."""
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        fo.truncate(length)
        for start, n, is_data in data_extents(fi.fileno(), offset, length):
            if not is_data:
                continue
            fi.seek(start)
            fo.seek(start - offset)
            while n:
                chunk = fi.read(min(n, 4 * MiB))
                fo.write(chunk)
                n -= len(chunk)
    record.dig_holes(dst)
