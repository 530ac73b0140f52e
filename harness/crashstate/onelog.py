"""The steps of a run whose items are the crash states of one log: record -> crash
states -> host and guest checks -> one verdict each.

The workload runs in a guest on dm-log-writes; the log is cut into crash states
(``harness/replay``), each state's image is checked on the host and mounted in a guest
(``harness/check``). The lifecycle commits each state's verdict the moment it is known; a
resumed run reuses the recorded log kept in its run directory.

Crash replay (``harness/experiments/crash``) and check-log (a log recorded elsewhere,
``harness/experiments/checklog``) are these steps: each kind's experiment is
``class X(OneLog[lifecycle.Run], lifecycle.Experiment)``, and says only where its log comes from
(``obtain``) and what its verdicts do not cover (``caveat``). Search and the faults'
cross-check record and check through the same functions (``recorded``, ``add_log``,
``commit_state``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from harness.check import host as check
from harness.check import promises
from harness.config.crash import FsSpec, RecoveryCrashSpec, Scenario
from harness.config.workloads import AppWorkload, FileWorkload, FsstressWorkload
from harness.crashstate import checking as states
from harness.crashstate import recording, recoverycrash, reuse
from harness.crashstate.run import Progress, Run
from harness.outcome import Outcome, expected_without_journal, is_finding, reduce
from harness.record import fsstress, logwrites
from harness.record import recorder as record
from harness.replay import crashstates
from harness.store import db as store
from harness.store import logevents
from harness.store.model import ItemOutcome, Promise

log = logging.getLogger("crashlab.run")


R = TypeVar("R", bound=Run)


class OneLog(Generic[R]):
    """Record a workload on dm-log-writes (or take a log, ``obtain``), cut the log into
    crash states, check each: the steps of a ``lifecycle.Experiment``, which comes after
    this class among a kind's bases (its ``__init__`` sets ``run`` and ``sc``): ``R`` is
    the lifecycle's run, which the steps read as a ``crashstate.run.Run``."""

    run: R
    sc: Any
    start_after: int | None = None  # the entry states begin after; set by obtain()
    spread_from: int | None = None  # the states cut, when more than max_states; prepare()
    recovery_states = 0  # recovery crash states of the run (resumed: those judged before too)

    @classmethod
    def preflight(cls, sc: Any) -> None:
        w = getattr(sc, "workload", None)
        if isinstance(w, FsstressWorkload):
            fsstress.require(w.binary)  # before a guest boots for nothing
        if isinstance(w, FileWorkload):
            recording.file_ops(w, str(sc.fs.type))  # a bad line: exit 2, nothing recorded
        if sc.check.host:
            check.require_checker(sc.fs.type)

    def prepare(self) -> None:
        run, sc = self.run, self.sc
        rdir = run.dir
        rdir.mkdir(parents=True, exist_ok=True)
        self.fsspec = sc.fs
        self.meta, self.oracle = self.obtain(rdir)
        self.log = self._stack.enter_context(logwrites.open_log(rdir / "log.raw"))
        lg = self.log
        stats = add_log(run.store, run.run_id, lg)
        self.second_device: states.SecondLog | None = None
        if sc.fs.second_device:
            log2 = self._stack.enter_context(logwrites.open_log(rdir / record.SECOND_LOG))
            add_log(run.store, run.run_id, log2, role="second-device")
            self.second_device = states.SecondLog(log2, int(self.meta["second_device_size"]))
        if self.start_after is None:  # a check-log run chose its own start
            targets = self.oracle.get("targets") or ()
            after = sc.crash.after_mark
            if getattr(sc.fs, "fill", 0) and after == record.MKFS_MARK:
                after = record.FILL_MARK  # the fill's own writes are no workload's states
            self.start_after = crashstates.start_after(lg, after, targets)
        every = self.generate(lg)
        self.states = crashstates.spread(every, sc.crash.max_states)
        # A run that checks 40 of a log's 66 FUA states says so: fstests' generic/482
        # checks every one, and "40 crash states" beside "66 FUA" read as all of them.
        if len(every) > len(self.states):
            self.spread_from = len(every)
        self.recording = {
            "log_entries": stats.entries,
            "fuas": stats.fuas,
            "flushes": stats.flushes,
            "marks": stats.marks,
            "log_bytes": lg.used,
            **{f"{k}_seconds": round(v, 3) for k, v in self.meta["seconds"].items()},
        }

    def obtain(self, rdir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        """The log (``rdir/log.raw``): its metadata (``device_size``, ``seconds``) and
        oracle. Recorded in a guest here; a log recorded elsewhere is given (check-log)."""
        return recording.recorded(self.sc, rdir, self.run.seed, self.run.progress)

    def generate(self, lg: logwrites.Log) -> list[crashstates.CrashState]:
        """Every crash state of the log the scenario's generators yield, from
        ``start_after`` (None: the lab's ``crashlab:mkfs`` mark)."""
        specs = [{"kind": str(s.kind), **s.params()} for s in self.sc.crash.states]
        return crashstates.generate(lg, specs, self.run.seed, start=self.start_after)

    # Made on first use: the lifecycle's Experiment.__init__ is the one the kind runs.
    @functools.cached_property
    def _stack(self) -> contextlib.ExitStack:
        return contextlib.ExitStack()

    @functools.cached_property
    def parents(self) -> dict[str, str]:
        """A recovery crash state -> the state it recovers."""
        return {}

    def items(self) -> Sequence[crashstates.CrashState]:
        return self.states

    def check(self, todo: Sequence[Any]) -> Iterator[tuple[crashstates.CrashState, states.Checked]]:
        todo_states = [s for s in todo if isinstance(s, crashstates.CrashState)]
        size = int(self.meta["device_size"])
        for c in check_states(
            self.sc,
            self.log,
            self.fsspec,
            self.oracle,
            todo_states,
            size,
            self.run.dir,
            self.run.progress,
            self.reuse(),
            self.second_device,
        ):
            yield c.state, c
        if self.recovery_crash():
            yield from self._recovery_crashes(size)

    def recovery_crash(self) -> RecoveryCrashSpec | None:
        """The scenario's recovery crash sample, if it asks for one (a check-log
        scenario has no such key)."""
        rc = getattr(self.sc, "recovery_crash", None)
        return rc if isinstance(rc, RecoveryCrashSpec) and rc.sample else None

    def _recovery_crashes(
        self, size: int
    ) -> Iterator[tuple[crashstates.CrashState, states.Checked]]:
        """The run's states are judged (each committed before this resumes): record the
        recovery of a sample of the consistent ones, and check its crash states."""
        run, rc = self.run, self.recovery_crash()
        assert rc is not None
        outcomes = {i.item: i.outcome for i in run.store.item_outcomes(run.run_id)}
        parents = recoverycrash.pick_parents(
            self.states, outcomes, rc.sample, run.seed, fsck_recovers=not self.fsspec.journaled
        )
        if not parents:
            return
        run.progress(f"recording the recovery of {len(parents)} crash states", 0, 0)
        sources = recoverycrash.sources(
            run.dir, self.fsspec, self.log, parents,
            oracle=self.oracle, size=size, seed=run.seed, most=rc.max_states,
            timeout=self.sc.check.timeout, stack=self._stack,
        )  # fmt: skip
        done = self.run.store.done_state_ids(self.run.run_id)  # lifecycle.Experiment.done()
        for src in sources:
            add_log(run.store, run.run_id, src.log, role="recovery")
            assert src.judged_as is not None
            for s in src.states:
                self.parents[s.id] = src.judged_as.id
        self.recovery_states = len(self.parents)
        for src in sources:
            src.states = [s for s in src.states if s.id not in done]
        for c in states.check_sources(
            self.sc, self.fsspec, sources, run.dir, run.progress, self.reuse()
        ):
            yield c.state, c

    def reuse(self) -> reuse.Reuse:
        """Where this run finds a state's twin. An application pattern's classes are
        stored as observations the store's lookup does not return, so its states are
        reused only within the run's own call."""
        return reuse.for_run(
            self.run,
            self.sc.check,
            self.sc.crash,
            self.fsspec,
            kernel=self.meta.get("guest_kernel"),
            across_runs=not isinstance(getattr(self.sc, "workload", None), AppWorkload),
        )

    def close(self) -> None:
        self._stack.close()

    def commit(self, item: Any, result: Any) -> None:
        assert isinstance(item, crashstates.CrashState) and isinstance(result, states.Checked)
        # Classes first: a state with a verdict is skipped on resume, so its classes
        # must already be stored (recording them again replaces them).
        _record_classes(self.run.store, self.run.run_id, self.sc, item, result.results)
        commit_state(self.run.store, self.run.run_id, result, parent=self.parents.get(item.id))

    def expected(self, item: ItemOutcome) -> bool:
        # A filesystem without a journal recovers by a full fsck: its repair is the design.
        return expected_without_journal(item.outcome, self.sc.fs.journaled)

    def summary(self) -> dict[str, Any]:
        # Recovery crash states are states of the run too: generated counts them.
        out = {
            "states": len(self.states),
            "recording": self.recording,
            "reuse": reuse.counts(self.run, len(self.states) + self.recovery_states),
        }
        if self.spread_from is not None:
            out["spread_from"] = self.spread_from
        if self.recovery_crash():
            out["recovery_crash"] = {
                "parents": len(set(self.parents.values())),
                "states": self.recovery_states,
            }
        return out


def check_states(
    sc: Scenario,
    lg: logwrites.Log,
    fs: FsSpec,
    oracle: dict[str, Any],
    todo: list[crashstates.CrashState],
    size: int,
    rdir: Path,
    progress: Progress,
    reuse: reuse.Reuse | None = None,
    second_device: states.SecondLog | None = None,
) -> Iterator[states.Checked]:
    """The states of one log, checked (``states.check_sources``)."""
    src = states.Source(lg, todo, oracle, size, second_device=second_device)
    yield from states.check_sources(sc, fs, [src], rdir, progress, reuse)


def add_log(
    st: store.Store, run_id: str, lg: logwrites.Log, *, role: str = "workload"
) -> logwrites.LogStats:
    """A log of the run in the store (and its events); its stats."""
    stats = lg.stats()
    st.add_log(
        store.LogInfo(
            hash=lg.hash,
            path=str(lg.path),
            entries=stats.entries,
            flushes=stats.flushes,
            fuas=stats.fuas,
            marks=stats.marks,
            discards=stats.discards,
            bytes=stats.bytes_written,
        ),
        run_id=run_id,
        role=role,
    )
    logevents.record_events(st, lg)
    return stats


def commit_state(
    st: store.Store, run_id: str, checked: states.Checked, *, parent: str | None = None
) -> None:
    """One checked state's results in the store (one transaction), with its identity,
    check key and, if it took an earlier verdict, whose; a recovery crash state with the
    state whose recovery it interrupted (``parent``)."""
    state, results = checked.state, checked.results
    says = f"crash during the recovery of {parent}: " if parent else ""
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
            description=says + state.describe(),
            identity=checked.identity,
            check_key=checked.check_key,
            reused_from=checked.reused_from,
            parent=parent,
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
        _promise(verdict, results),
    )


def _promise(verdict: Outcome, results: Sequence[check.CheckResult]) -> Promise | None:
    """The profile the state was judged by and, for a finding, the promise and rule it
    broke (harness/check/promises.py); None where no oracle judged it."""
    profile, broken = promises.broken(verdict, results)
    if profile is None and is_finding(verdict) and verdict is not Outcome.DATA_LOSS:
        # no oracle got to judge it (the mount came first), and none needs to: a refused
        # mount or damage a checker found breaks the floor under every profile
        return Promise(None, "posix", promises.rule_of(verdict, results)[0])
    if profile is None:
        return None
    if not is_finding(verdict):
        return Promise(profile)
    rule = next((r.rule for r in results if r.rule), None) or promises.rule_of(verdict, results)[0]
    return Promise(profile, broken, rule)


def _record_classes(
    st: store.Store,
    run_id: str,
    sc: Any,  # a crash scenario, or a check-log one (no workload)
    state: crashstates.CrashState,
    results: list[check.CheckResult],
) -> None:
    """An application pattern's per-target classes of one state, as observations
    (``scenario results table patterns``)."""
    w = getattr(sc, "workload", None)  # a log checked without its workload has none
    if not isinstance(w, AppWorkload):
        return
    for r in results:
        for c in r.classes:
            cell = {
                "fs": str(sc.fs.type),
                "mount_options": ",".join(sc.fs.all_mount_options()) or "defaults",
                "workload": str(w.pattern),
                "pattern": c["case"],
                "target": c["target"],
            }
            metrics = {k: v for k, v in c.items() if k not in ("case", "target")}
            st.record_observation(
                run_id, f"{state.id}:{c['target']}", cell, {**metrics, "state": state.id}, None
            )
