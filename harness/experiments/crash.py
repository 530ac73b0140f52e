"""``scenario run``: record -> crash states -> host and guest checks -> the store.

Each state's verdict is committed the moment it is known; a run killed half-way is found
again by ``find_resumable_run`` (same scenario, parameters and seed) and goes on from
where it stopped, reusing the recorded log kept in its run directory.
"""

from __future__ import annotations

import json
import logging
import platform
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import paths, proc
from harness.check import guest as guestcheck
from harness.check import host as check
from harness.check import parallel
from harness.config.scenario import FioWorkload, Scenario
from harness.errors import HarnessError
from harness.image import build as image
from harness.outcome import Outcome, reduce
from harness.record import logwrites
from harness.record import recorder as record
from harness.replay import crashstates
from harness.replay import replayer as replay
from harness.store import db as store
from harness.store import logevents

log = logging.getLogger("crashlab.run")

Progress = Callable[[str, int, int], None]  # (what, done, total)


@dataclass
class RunReport:
    run_id: str
    db: Path
    resumed: bool
    states_total: int
    states_skipped: int
    verdicts: dict[str, str] = field(default_factory=dict)
    recording: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        c: dict[str, int] = {}
        for v in self.verdicts.values():
            c[v] = c.get(v, 0) + 1
        return c


def fs_spec(sc: Scenario) -> record.FsSpec:
    return record.FsSpec(
        type=str(sc.fs.type),
        disk_size=sc.fs.disk_size,
        data_mode=str(sc.fs.data_mode) if sc.fs.data_mode else None,
        mkfs_options=tuple(sc.fs.mkfs_options),
        mount_options=tuple(sc.fs.mount_options),
    )


def workload_spec(sc: Scenario) -> record.WorkloadSpec:
    w = sc.workload
    if isinstance(w, FioWorkload):
        return record.WorkloadSpec(type="fio", fio_job=w.job)
    return record.WorkloadSpec(
        type="ops", ops=w.ops, files=w.files, max_size=w.max_size, fsync_names=w.fsync_names
    )


def run_dir(run_id: str) -> Path:
    return paths.work_dir() / "runs" / run_id


def execute(
    sc: Scenario,
    *,
    db: Path,
    seed: int | None = None,
    progress: Progress = lambda what, done, total: None,
) -> RunReport:
    started = time.monotonic()
    seed = sc.seed if seed is None else seed
    params = sc.resolved()
    img = image.require_image()
    st = store.Store.open(db)
    try:
        run_id = st.find_resumable_run(sc.name, params, seed)
        resumed = run_id is not None
        if run_id is not None:
            st.resume_run(run_id)
        else:
            run_id = st.begin_run(sc.name, store.RunKind.CRASH, params, seed, fs=str(sc.fs.type))
        try:
            report = _execute(sc, st, run_id, seed, img, resumed, progress)
        except BaseException as e:
            status = (
                store.RunStatus.INTERRUPTED
                if isinstance(e, KeyboardInterrupt)
                else store.RunStatus.FAILED
            )
            st.finish_run(run_id, status, {"error": str(e)[:500]})
            raise
        report.db = db
        report.seconds = time.monotonic() - started
        st.finish_run(
            run_id,
            store.RunStatus.DONE,
            {
                "outcome_counts": report.counts(),
                "states": report.states_total,
                "recording": report.recording,
                "seconds": round(report.seconds, 2),
            },
        )
        return report
    finally:
        st.close()


def _execute(
    sc: Scenario,
    st: store.Store,
    run_id: str,
    seed: int,
    img: image.Image,
    resumed: bool,
    progress: Progress,
) -> RunReport:
    rdir = run_dir(run_id)
    rdir.mkdir(parents=True, exist_ok=True)
    fs = fs_spec(sc)
    meta_path = rdir / "recording.json"
    if meta_path.exists() and (rdir / "log.raw").exists():
        meta = json.loads(meta_path.read_text())
        oracle = (
            json.loads((rdir / "oracle.json").read_text())
            if (rdir / "oracle.json").exists()
            else {}
        )
    else:
        progress("recording the workload in a guest", 0, 0)
        rec = record.record(
            rdir,
            fs,
            workload_spec(sc),
            seed,
            timeout=sc.check.timeout,
            recorder=str(sc.recorder.type),
        )
        oracle = rec.oracle
        (rdir / "oracle.json").write_text(json.dumps(oracle))
        meta = {
            "device_size": rec.device_size,
            "seconds": rec.seconds,
            "guest_kernel": rec.guest_kernel,
            "accelerator": rec.accelerator,
        }
        meta_path.write_text(json.dumps(meta))
        (rdir / "dut.raw").unlink(missing_ok=True)
    st.set_run_env(
        run_id,
        store.RunEnv(
            accelerator=store.Accelerator(meta["accelerator"]),
            guest_kernel=meta["guest_kernel"],
            qemu_version=_qemu_version(),
            image_hash=img.hash,
            tool_versions={
                "host": platform.release(),
                **_guest_packages(img),
            },
        ),
    )

    with logwrites.open_log(rdir / "log.raw") as lg:
        stats = lg.stats()
        st.add_log(
            store.LogInfo(
                hash=lg.hash,
                path=str(rdir / "log.raw"),
                entries=stats.entries,
                flushes=stats.flushes,
                fuas=stats.fuas,
                marks=stats.marks,
                discards=stats.discards,
                bytes=stats.bytes_written,
            ),
            run_id=run_id,
        )
        logevents.record_events(st, lg)
        specs = [{"kind": str(s.kind), **s.params()} for s in sc.crash.states]
        states = _cap(crashstates.generate(lg, specs, seed), sc.crash.max_states)
        done = st.done_state_ids(run_id)
        report = RunReport(
            run_id,
            Path(),
            resumed,
            len(states),
            len(done & {s.id for s in states}),
            recording={
                "log_entries": stats.entries,
                "fuas": stats.fuas,
                "flushes": stats.flushes,
                "marks": stats.marks,
                "log_bytes": lg.used,
                **{f"{k}_seconds": round(v, 3) for k, v in meta["seconds"].items()},
            },
        )
        for s in states:
            if s.id in done:
                report.verdicts[s.id] = "done earlier"
        todo = [s for s in states if s.id not in done]
        _check_states(
            sc, st, run_id, lg, fs, oracle, todo, int(meta["device_size"]), rdir, report, progress
        )
    return report


def _check_states(
    sc: Scenario,
    st: store.Store,
    run_id: str,
    lg: logwrites.Log,
    fs: record.FsSpec,
    oracle: dict[str, Any],
    todo: list[crashstates.CrashState],
    size: int,
    rdir: Path,
    report: RunReport,
    progress: Progress,
) -> None:
    # Images are sparse but up to `size` each: two workers plus a repair copy at most.
    with paths.fast_scratch(rdir, 3 * size) as fast:
        total = len(todo)
        finished = 0
        scratch = fast / "scratch"
        batch_dir = rdir / "batch"
        ordered = replay.replay_order(todo)
        if not sc.check.guest:
            # Host checks only: spread them over every core.
            progress(f"replay + host check ({fs.type})", finished, total)
            for state, result in parallel.host_checks(
                lg.path, ordered, fs.type, size, fast / "host"
            ):
                _commit(st, run_id, state, [result], report)
                finished += 1
                progress(f"replay + host check ({fs.type})", finished, total)
            return
        # Guest checks: replay (and host-check) a batch, copy each state's image, then
        # mount the whole batch in one guest.
        batch_size = max(1, sc.check.guest_batch)
        work_img = fast / "work.img"
        work_img.unlink(missing_ok=True)
        with replay.Replayer(lg, work_img, size) as rp:
            for b in range(0, len(ordered), batch_size):
                batch = ordered[b : b + batch_size]
                host_results: dict[str, check.CheckResult] = {}
                items: list[guestcheck.Item] = []
                shutil.rmtree(batch_dir, ignore_errors=True)
                batch_dir.mkdir(parents=True)
                for state in rp.walk(batch):
                    progress(f"replay + host check ({fs.type})", finished, total)
                    if sc.check.host:
                        host_results[state.id] = check.host_check(fs.type, rp.image, scratch)
                    copy = batch_dir / f"{state.id}.img"
                    check.copy_image(rp.image, copy)
                    items.append(guestcheck.Item(state.id, copy, state.mark))
                by_id = {s.id: s for s in batch}
                progress(f"mounting {len(items)} crash images in a guest", finished, total)
                for sid, guest_result in guestcheck.check_batch(
                    items, fs, oracle or None, timeout=min(sc.check.timeout, 300)
                ):
                    results = [r for r in (host_results.get(sid), guest_result) if r is not None]
                    _commit(st, run_id, by_id[sid], results, report)
                    finished += 1
                    progress(f"mounting {len(items)} crash images in a guest", finished, total)
                shutil.rmtree(batch_dir, ignore_errors=True)
        work_img.unlink(missing_ok=True)


def _commit(
    st: store.Store,
    run_id: str,
    state: crashstates.CrashState,
    results: list[check.CheckResult],
    report: RunReport,
) -> None:
    recovery: dict[str, float] = {}
    for r in results:
        for phase, secs in r.phases.items():
            name = "guest_repair" if (r.stage == "guest" and phase == "repair") else phase
            recovery[name] = secs
    verdict = reduce(r.outcome for r in results)
    st.record_state_result(
        run_id,
        store.CrashState(
            id=state.id,
            log_hash=state.log_hash,
            generator=state.generator,
            prefix=state.prefix,
            params=state.to_dict(),
            last_mark=state.mark,
            description=state.describe(),
        ),
        [
            store.CheckResult(
                stage=store.Stage(r.stage),
                checker=r.checker,
                outcome=r.outcome,
                seconds=r.seconds,
                exit_status=r.exit_status,
                output=(r.note + "\n" + r.output).strip(),
            )
            for r in results
        ],
        recovery,
        verdict,
    )
    report.verdicts[state.id] = str(verdict)


def _cap(states: list[crashstates.CrashState], most: int) -> list[crashstates.CrashState]:
    """At most ``most`` states, spread evenly along the log (deterministic)."""
    if len(states) <= most:
        return states
    if most == 1:
        return [states[-1]]
    step = (len(states) - 1) / (most - 1)
    return [states[round(i * step)] for i in range(most)]


def _guest_packages(img: image.Image) -> dict[str, str]:
    packages = img.manifest.get("packages")
    return {str(k): str(v) for k, v in packages.items()} if isinstance(packages, dict) else {}


def _qemu_version() -> str:
    try:
        return proc.run(["qemu-system-x86_64", "--version"]).stdout.splitlines()[0]
    except (HarnessError, IndexError):
        return "unknown"


def reproduce(state_id: str, *, db: Path, out: Path) -> tuple[Path, dict[str, Any]]:
    """Rebuild one stored crash state's image from its run's log."""
    st = store.Store.open(db, create=False)
    try:
        rows = st.execute(
            "SELECT run_id, params FROM crash_states WHERE id LIKE ? ORDER BY rowid DESC",
            (state_id + "%",),
        )
    finally:
        st.close()
    if not rows:
        from harness.errors import InputError

        raise InputError(
            f"no crash state with id {state_id!r} in {db}",
            hint="ids are listed by: scenario results show RUN",
        )
    run_id, params = rows[0]
    state = crashstates.CrashState.from_dict(json.loads(params))
    rdir = run_dir(run_id)
    meta = json.loads((rdir / "recording.json").read_text())
    with logwrites.open_log(rdir / "log.raw") as lg:
        replay.materialize(lg, state, out, int(meta["device_size"]))
    return out, {"run_id": run_id, "state": state.to_dict(), "description": state.describe()}


__all__ = ["Outcome", "RunReport", "execute", "reproduce"]
