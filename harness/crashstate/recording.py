"""One workload recorded in a guest on dm-log-writes, as a run keeps it: ``log.raw`` with
the recording's facts (``recording.json``) and the oracle the workload left
(``oracle.json``) in the run's directory, where a resumed run finds them again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from harness import paths
from harness.config.crash import Scenario
from harness.config.workloads import AppWorkload, FileWorkload, FioWorkload, FsstressWorkload
from harness.crashstate.run import Progress
from harness.errors import InputError
from harness.model import opfile
from harness.record import recorder as record


def workload_spec(sc: Scenario) -> record.WorkloadSpec:
    w = sc.workload
    if isinstance(w, FioWorkload):
        return record.WorkloadSpec(
            type="fio", fio_job=w.job, fio_sections=w.sections, fsync_names=sc.fs.journaled
        )
    if isinstance(w, FsstressWorkload):
        return record.WorkloadSpec(type="fsstress", ops=w.ops, procs=w.procs, binary=w.binary)
    if isinstance(w, FileWorkload):
        return record.WorkloadSpec(
            type="file",
            ops=0,
            ops_json=json.dumps(file_ops(w, str(sc.fs.type))),
            fsync_names=bool(w.fsync_names),
            noop_sync=w.noop_sync,
            ordered_metadata=w.ordered_metadata,
            end=sc.crash.end_op(),
            full=sc.fs.fill > 0,
        )
    if isinstance(w, AppWorkload):
        return record.WorkloadSpec(
            type="app",
            pattern=str(w.pattern),
            files=w.files,
            max_size=w.size,
            transactions=w.transactions,
            fsync_names=sc.fs.journaled,
        )
    return record.WorkloadSpec(
        type="ops",
        ops=w.ops,
        files=w.files,
        max_size=w.max_size,
        fsync_names=bool(w.fsync_names),
        noop_sync=w.noop_sync,
        flush_after_sync=w.flush_after_sync,
        extended=w.extended,
        bug_ops=w.bug_ops,
        family=w.family,
        end=sc.crash.end_op(),
        full=sc.fs.fill > 0,
        processes=w.processes,
    )


def file_ops(w: FileWorkload, fs: str) -> list[dict[str, Any]]:
    """A workload file's ops, checked against the namespace they build on ``fs``.

    :raise InputError: the line, the op and what is wrong with it, with a hint.
    """
    try:
        return opfile.parse(w.text, fs)
    except opfile.OpFileError as e:
        where = w.path or "workload.text"
        raise InputError(f"{where}: {e}", hint=e.hint or None) from None


def recorded(
    sc: Scenario, rdir: Path, seed: int, progress: Progress
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recorded log's metadata and oracle: kept from an earlier attempt of this run
    (resume), else recorded now in a guest."""
    meta_path = rdir / "recording.json"
    logs = [rdir / "log.raw", *([rdir / record.SECOND_LOG] if sc.fs.second_device else [])]
    if meta_path.exists() and all(p.exists() for p in logs):
        oracle_path = rdir / "oracle.json"
        oracle = json.loads(oracle_path.read_text()) if oracle_path.exists() else {}
        return json.loads(meta_path.read_text()), oracle
    progress("recording the workload in a guest", 0, 0)
    rec = record.record(
        rdir,
        sc.fs,
        workload_spec(sc),
        seed,
        timeout=sc.check.timeout,
        recorder=str(sc.recorder.type),
    )
    (rdir / "oracle.json").write_text(json.dumps(rec.oracle))
    meta = {
        "device_size": rec.device_size,
        "seconds": rec.seconds,
        "guest_kernel": rec.guest_kernel,
        "accelerator": rec.accelerator,
        **({"workload": rec.workload_info} if rec.workload_info else {}),
        **({"second_device_size": sc.fs.second_size} if sc.fs.second_device else {}),
    }
    meta_path.write_text(json.dumps(meta))
    (rdir / "dut.raw").unlink(missing_ok=True)
    if keep := getattr(sc.workload, "keep_log", ""):
        keep_log(rec.log_path, paths.results_dir() / keep)
    return meta, rec.oracle


def keep_log(log: Path, dest: Path) -> None:
    """A copy of the recorded log where another scenario reads it (fsstress-482 leaves
    generic/482's log for check-log-generic-482). A copy, not a link: a later recording
    replaces it without touching this run's own log."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    shutil.copyfile(log, tmp)
    tmp.replace(dest)
