"""Workload experiments (kind ``workload``): one fio job on several filesystems, measured.

Per cell (a filesystem and its options) and repetition, in a fresh guest on a fresh
disk, ``harness/guest/ioprobe.py`` makes the filesystem (a single-disk pool for ZFS),
lays out fio's files, then runs the job with JSON output while blktrace traces the disk
under test and /proc/stat is read before and after; it syncs and reads the space the
filesystem reports. The host parses the trace (``harness/record/blktrace.py``), keeps the
raw per-CPU files under ``results/runs/<run>/<item>/`` beside the run log, and stores one
observation per item: fio per job and direction, CPU, the trace summary, space, and the
flat ``derived`` row that ``scenario results table io`` reads.

Nothing here is a verdict on the filesystem: every item is ``consistent`` (measured) or a
harness outcome (``timeout``, ``panic``, ``harness_error``), which exits 3.

Bad input is caught before a guest boots: the job is run through ``fio --parse-only`` on
the host (with ``${SIZE}``/``${RUNTIME}`` filled in), naming the scenario and where the job
came from; an unknown ZFS property is refused by the scenario's model.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import paths, proc
from harness.errors import GuestPanic, GuestTimeout, HarnessError, InputError
from harness.experiments import lifecycle
from harness.experiments.workload import iometrics
from harness.experiments.workload.settings import IoCell, WorkloadScenario
from harness.model import contract
from harness.outcome import Outcome
from harness.record import blktrace, guestmsg
from harness.record import recorder as record
from harness.vm.backend import Disk, Guest, GuestSpec, start_guest

GUEST_TRACE_DIR = f"{record.GUEST_DIR}/trace"


@dataclass(frozen=True)
class Item:
    cell: IoCell
    repetition: int

    @property
    def id(self) -> str:
        return f"{self.cell.name()} #{self.repetition}"


def check_job(sc: WorkloadScenario) -> None:
    """``fio --parse-only`` on the host: a job fio rejects is bad input, said before a
    guest boots.

    :raise InputError: fio's complaint, naming the scenario and the job's origin.
    :raise ToolMissing: no fio on the host (scripts/install-host-deps installs it).
    """
    job = _job_path(sc)
    r = proc.run(["fio", "--parse-only", str(job)], check=False, env=sc.fio.env())
    if r.returncode != 0:
        where = sc.fio.origin or f"{sc.path} [fio].job"
        text = (r.stderr + r.stdout).strip().splitlines()
        raise InputError(
            f"{where}: fio rejects the job: " + "; ".join(text[:3]),
            hint="check the option names against `man fio`",
        )


def _job_path(sc: WorkloadScenario) -> Path:
    p = paths.work_dir() / "jobs" / f"{sc.name}.fio"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(sc.fio.job)
    return p


def trace_dir(run_id: str, item_id: str) -> Path:
    """Where an item's raw outputs (blktrace files, fio.json, probe.json) are kept:
    beside the run log."""
    slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", item_id).strip("_")
    return paths.results_dir() / "runs" / run_id / slug


class Workload(lifecycle.Observed):
    """One fio job per cell and repetition; see the module docstring."""

    def prepare(self) -> None:
        assert isinstance(self.sc, WorkloadScenario)
        check_job(self.sc)
        self.all = [Item(c, r + 1) for c in self.sc.cells for r in range(self.sc.repetitions)]

    def items(self) -> Sequence[Item]:
        return self.all

    def check(self, todo: Sequence[lifecycle.Item]) -> Iterator[tuple[Item, dict[str, Any]]]:
        for n, item in enumerate(i for i in todo if isinstance(i, Item)):
            self.run.progress(f"workload: {item.id}", n, len(todo))
            yield item, self._measure(item)

    def _measure(self, item: Item) -> dict[str, Any]:
        """A fresh disk and guest for one item; a hang or panic is that item's outcome."""
        sc = self.sc
        disk = self.run.dir / "dut.raw"
        disk.parent.mkdir(parents=True, exist_ok=True)
        disk.unlink(missing_ok=True)
        with open(disk, "wb") as f:
            f.truncate(sc.disk_size)
        # ZFS partitions a whole disk and waits for udev to make the partition's node.
        spec = GuestSpec(
            disks=(Disk(disk, "dut"),),
            udev=item.cell.type == "zfs",
            memory_mb=sc.memory_mb,
            command_timeout=sc.timeout,
        )
        try:
            with start_guest(spec) as g:
                return self._in_guest(g, item)
        except (GuestTimeout, GuestPanic) as e:
            kind = Outcome.TIMEOUT if isinstance(e, GuestTimeout) else Outcome.PANIC
            return {"outcome": str(kind), "error": e.message, "console": e.console[-1500:]}
        finally:
            disk.unlink(missing_ok=True)

    def _in_guest(self, g: Guest, item: Item) -> dict[str, Any]:
        sc, cell = self.sc, item.cell
        kernel = g.run(["uname", "-r"], check=True).out.strip()
        if cell.type == "zfs":
            r = g.run(["modprobe", "zfs"], timeout=300)
            if not r.ok:
                raise HarnessError("modprobe zfs failed in the guest", detail=r.err)
        record.install_scripts(g)
        job = f"{record.GUEST_DIR}/job.fio"
        g.write_file(job, sc.fio.job.encode())
        dev = g.run(["readlink", "-f", g.disk("dut")], check=True).out.strip()
        fio_out = f"{record.GUEST_DIR}/fio.json"
        args = [
            "--fs",
            cell.type,
            "--dev",
            dev,
            "--mkfs",
            json.dumps(cell.mkfs_argv()),
            "--mount-opts",
            ",".join(cell.mount_opts()),
            "--zfs-props",
            json.dumps(cell.properties),
            "--job",
            job,
            "--size",
            str(sc.fio.size),
            "--runtime",
            str(sc.fio.runtime),
            "--seed",
            str(self.run.seed),
            "--fio-out",
            fio_out,
            *(["--trace-dir", GUEST_TRACE_DIR] if sc.blktrace else []),
            *(
                ["--snapshot-every", str(sc.snapshot_every)]
                if sc.snapshot_every and cell.type in ("zfs", "btrfs")
                else []
            ),
        ]
        r = g.run(["python3", f"{record.GUEST_DIR}/ioprobe.py", *args], timeout=sc.timeout)
        if not r.ok:
            raise HarnessError("ioprobe.py failed in the guest", detail=(r.err or r.out)[-2000:])
        facts = guestmsg.read(contract.IoFacts, "ioprobe.py", r.out)
        if facts.failed:
            return _setup_failed(facts, cell)
        raw = _json_part(g.read_file(fio_out).decode())
        # The raw outputs stay beside the run log: fio's JSON, the probe's facts, the trace.
        out = trace_dir(self.run.run_id, item.id)
        if out.exists():
            shutil.rmtree(out)  # an earlier attempt of this item (resume)
        out.mkdir(parents=True)
        (out / "fio.json").write_text(raw)
        (out / "probe.json").write_text(json.dumps(facts.to_dict(), indent=1))
        trace = self._fetch_trace(g, out) if sc.blktrace else None
        return measured(facts.to_dict(), json.loads(raw), trace, g.accelerator, kernel)

    def _fetch_trace(self, g: Guest, out: Path) -> dict[str, Any]:
        names = g.run(["ls", GUEST_TRACE_DIR], check=True).out.split()
        for n in names:
            if ".blktrace." in n:
                (out / n).write_bytes(g.read_file(f"{GUEST_TRACE_DIR}/{n}"))
        s = blktrace.summarize(blktrace.read_events(blktrace.trace_files(out, "trace")))
        return {**s.to_dict(), "files": str(out)}

    def commit(self, item: lifecycle.Item, result: Any) -> None:
        assert isinstance(item, Item)
        cell = {**item.cell.model_dump(mode="json"), "name": item.cell.name()}
        cell["repetition"] = item.repetition
        self.run.store.record_observation(
            self.run.run_id, item.id, cell, result, Outcome(result["outcome"])
        )

    def summary(self) -> dict[str, Any]:
        from harness.report.ioclaims import claims

        rows = [
            o for o in self.run.store.observations(self.run.run_id) if "derived" in o["metrics"]
        ]
        return {"cells": len(self.sc.cells), "claims": claims(rows)}


def _json_part(text: str) -> str:
    """fio may print notes ("fio: ...") before its JSON document."""
    i = text.find("{")
    return text[i:] if i >= 0 else text


def _setup_failed(facts: contract.IoFacts, cell: IoCell) -> dict[str, Any]:
    step: dict[str, Any] = next((s for s in facts.steps if s["step"] == facts.failed), {})
    err = (step.get("stderr") or step.get("output") or "").strip()
    where = f"cell {cell.name()!r}: step {facts.failed}"
    if facts.failed == "zpool-create" and "property" in err:
        where += f" (ZFS properties {cell.properties})"
    return {
        "outcome": str(Outcome.HARNESS_ERROR),
        "error": f"{where}: {err[-500:]}",
        "steps": facts.steps,
    }


def measured(
    facts: dict[str, Any],
    fio: dict[str, Any],
    trace: dict[str, Any] | None,
    accelerator: str,
    kernel: str,
) -> dict[str, Any]:
    """The stored metrics of one measured item, from ``facts`` as stored beside the run
    (probe.json: ``contract.IoFacts.to_dict()``, or an older probe's dict)."""
    jobs = iometrics.fio_jobs(fio)
    sp = iometrics.space(facts.get("space", {}))
    snaps = facts.get("snapshots", [])
    bad = [j["name"] for j in jobs if j["error"]]
    return {
        "outcome": str(Outcome.HARNESS_ERROR if bad else Outcome.CONSISTENT),
        **({"error": f"fio job(s) {bad} reported errors"} if bad else {}),
        "fio": {"version": fio.get("fio version"), "jobs": jobs},
        "cpu": facts.get("cpu", {}),
        "trace": trace,
        "space": sp,
        "snapshots": snaps,
        "seconds": facts.get("seconds"),
        "accelerator": accelerator,
        "kernel": kernel,
        "derived": iometrics.derive(jobs, facts.get("cpu", {}), trace, sp, snaps),
        "steps": [{k: s.get(k) for k in ("step", "rc", "seconds")} for s in facts["steps"]],
    }
