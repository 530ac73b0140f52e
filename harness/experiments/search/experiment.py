"""Search (kind ``search``): every workload of a generated space recorded, its crash
states checked, its findings grouped by symptom.

prepare: the selection of workloads (``harness/model/acespace.py``); those not yet recorded
are recorded ``workloads_per_boot`` per guest (``harness/crashstate/workloads.py``);
each recorded log is cut into crash states after the workload's base (the file set it
starts from), its ids prefixed with the workload's. Checks run through the crash-state
core's ``check_sources``, whose guest batches take states of many workloads. Each
workload is one observation (its op classes, its recording, no outcome: its states carry
those), and each finding one more, its symptom, which ``scenario results bugs``
clusters.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from harness.crashstate import checking, guestpool, reuse
from harness.crashstate import onelog as crash
from harness.crashstate import workloads as record
from harness.experiments import lifecycle
from harness.experiments.search import budget, symptom
from harness.experiments.search.settings import SearchScenario
from harness.model import ace, acespace, kernlog
from harness.outcome import Outcome, expected_without_journal, is_finding, is_harness, reduce
from harness.record import logwrites
from harness.replay import crashstates
from harness.store.model import ItemOutcome

log = logging.getLogger("crashlab.search")
BASE_MARK = f"{crashstates.SYNC_MARK_PREFIX}1"  # the base file set, synced


@dataclass(frozen=True)
class Judged:
    """A state of a workload whose log is gone: its verdict is in the store."""

    id: str


class Search(lifecycle.Experiment):
    """Record many generated workloads, check every crash state of each."""

    sc: SearchScenario

    def __init__(self, run: lifecycle.Run):
        super().__init__(run)
        self._stack = contextlib.ExitStack()
        self.sources: dict[str, checking.Source] = {}
        self.workloads: dict[str, dict[str, Any]] = {}
        self.seconds: dict[str, float] = {}
        self.recorded_now = 0  # workloads this process recorded (a resume skips the rest)
        self.rerecorded = 0  # ... of them recorded again after a disk failed
        self.deadline: float | None = None  # workload.budget's end (time.monotonic)
        # States of workloads whose log a finished run let go: judged, never checked again.
        self.judged: list[Judged] = []

    @classmethod
    def preflight(cls, sc: Any) -> None:
        crash.OneLog.preflight(sc)  # the same host checker, before any guest boots

    def prepare(self) -> None:
        w = self.sc.workload
        if w.budget:
            self._prepare_budgeted()
            return
        picked = acespace.selection(
            w.seq,
            w.sample,
            self.run.seed,
            w.limit,
            w.op_classes,
            indices=w.indices,
            grammar=w.grammar,
            family=w.chosen_family(),
        )
        wanted = [ace.describe(w.seq, i, w.grammar) for i in picked]
        self._record_missing(wanted)
        self._load(wanted)

    def _load(self, wanted: Sequence[dict[str, Any]]) -> None:
        for d in wanted:
            self.workloads[d["id"]] = d
            rec = record.load(self.run.dir, d["id"])
            assert rec is not None  # _record_missing kept every one
            self._observe(d, rec)
            if rec.dropped:
                self.judged += [Judged(i) for i in rec.dropped]
            elif rec.status == "recorded":
                self.sources[d["id"]] = self._source(d["id"], rec)

    def _prepare_budgeted(self) -> None:
        """``workload.budget``: the selection in the seed's order (``budget.order``), the
        workloads recorded so far taken again, then -- only when every state of those is
        checked, so a backlog is checked before more is recorded -- more recorded until
        ``RECORD_SHARE`` of the budget is spent; ``check`` stops at the budget's end."""
        w = self.sc.workload
        self.deadline = time.monotonic() + w.budget_seconds()
        recorded, order = budget.recorded_prefix(
            budget.order(w, self.run.seed), lambda d: record.load(self.run.dir, d["id"])
        )
        self._load(recorded)
        if len(self.done() & {s.id for s in self.items()}) < len(self.items()):
            self.more_to_do = True  # the backlog first; the order stays where it was
            return
        stop = time.monotonic() + budget.RECORD_SHARE * w.budget_seconds()
        per = self.sc.workloads_per_boot * self.sc.check.guests
        while time.monotonic() < stop:
            batch = list(itertools.islice(order, per))
            if not batch:
                return
            self._record_missing(batch)
            self._load(batch)
        self.more_to_do = next(order, None) is not None

    def _record_missing(self, wanted: Sequence[dict[str, Any]]) -> None:
        """Record the workloads of ``wanted`` not recorded yet, ``workloads_per_boot``
        a guest, in ``check.guests`` guests at once (each its share of the cores:
        under TCG on 2 cores two 1-vCPU guests did half as much again as one)."""
        todo = [d for d in wanted if record.load(self.run.dir, d["id"]) is None]
        self.recorded_now += len(todo)
        self._record(todo)
        again = self._disk_failed(todo)
        if again:  # the host's file failed a write, not the workload: once more, elsewhere
            log.warning("recording %d workloads again after a disk failed", len(again))
            self.rerecorded += len(again)
            self._record(again)

    def _disk_failed(self, done: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The workloads of ``done`` whose recording failed because a guest's disk did
        (the block layer's I/O errors on the host's file: once in 281 ext4 workloads on
        6.12.117, session 22), their first recording kept aside as evidence."""
        out = []
        for d in done:
            rec = record.load(self.run.dir, d["id"])
            if (
                rec is not None
                and rec.status == "failed"
                and rec.facts.get("error") == kernlog.DISK_FAILED
            ):
                (rec.folder / "recording.json").rename(rec.folder / "recording.disk-failed.json")
                out.append(d)
        return out

    def _record(self, todo: Sequence[dict[str, Any]]) -> None:
        if not todo:
            return
        guests = self.sc.check.guests
        per = min(self.sc.workloads_per_boot, max(1, math.ceil(len(todo) / guests)))
        batches = [todo[b : b + per] for b in range(0, len(todo), per)]
        cpus = guestpool.vcpus(min(guests, len(batches)))
        counts = [0] * len(batches)

        def call(i: int) -> tuple[int, dict[str, float]]:
            def step(done: int) -> None:
                counts[i] = done
                self.run.progress("recording workloads in a guest", sum(counts), len(todo))

            secs = record.record_batch(
                self.run.dir,
                self.sc.fs,
                batches[i],
                timeout=self.sc.timeout,
                noop_sync=self.sc.workload.noop_sync,
                ordered_metadata=self.sc.workload.ordered_metadata,
                progress=step,
                flush_after_sync=self.sc.workload.flush_after_sync,
                end=self.sc.crash.end_op(),
                tag=f"-{i}",
                cpus=cpus,
            )
            return i, secs

        calls = [functools.partial(call, i) for i in range(len(batches))]
        for i, secs in guestpool.parallel(calls, guests):
            for k, v in secs.items():
                self.seconds[k] = self.seconds.get(k, 0.0) + v
            if "boot" in secs:  # the recording guest's boot: no workload's alone
                store = self.run.store
                store.add_phase_seconds(
                    self.run.run_id, f"boot:{batches[i][0]['id']}", "boot", secs["boot"]
                )

    def _source(self, wid: str, rec: record.Recorded) -> checking.Source:
        lg = self._stack.enter_context(logwrites.open_log(rec.log))
        crash.add_log(self.run.store, self.run.run_id, lg)
        specs = [{"kind": str(s.kind), **s.params()} for s in self.sc.crash.states]
        base = lg.find_mark(BASE_MARK)
        if base is None:
            raise RuntimeError(f"workload {wid}: its log has no {BASE_MARK} mark")
        after = [
            s
            for s in crashstates.generate(lg, specs, self.run.seed)
            if s.prefix > base + 1 and s.first_divergent > base
        ]
        states = [
            dataclasses.replace(s, id=f"{wid}/{s.id}")
            for s in crashstates.spread(after, self.sc.crash.max_states)
        ]
        return checking.Source(lg, states, rec.oracle(), int(rec.facts["device_size"]), wid)

    def _observe(self, d: dict[str, Any], rec: record.Recorded) -> None:
        cell = {
            "fs": str(self.sc.fs.type),
            "op_class": d["op_class"],
            "persistence": d["persistence"],
            "seq": d["seq"],
        }
        metrics = {
            "workload": d["id"],
            "ops": d["ops"],
            "status": rec.status,
            "record_seconds": rec.facts["seconds"],
            "error": rec.facts.get("error"),
        }
        # A workload that failed for another reason than an unsupported op is the lab's
        # failure (its states are unknown), never a finding and never silently dropped.
        failed = Outcome.HARNESS_ERROR if rec.status == "failed" else None
        self.run.store.record_observation(
            self.run.run_id, f"workload:{d['id']}", cell, metrics, failed
        )

    def items(self) -> Sequence[crashstates.CrashState | Judged]:
        return [*self.judged, *(s for src in self.sources.values() for s in src.states)]

    def check(
        self, todo: Sequence[lifecycle.Item]
    ) -> Iterator[tuple[crashstates.CrashState, checking.Checked]]:
        want = {s.id for s in todo}
        sources = [
            dataclasses.replace(src, states=[s for s in src.states if s.id in want])
            for src in self.sources.values()
        ]
        twins = reuse.for_run(self.run, self.sc.check, self.sc.crash, self.sc.fs)

        def cut(src: checking.Source, seconds: float) -> None:
            self.run.store.add_phase_seconds(self.run.run_id, f"cut:{src.key}", "cut", seconds)

        for c in checking.check_sources(
            self.sc, self.sc.fs, sources, self.run.dir, self.run.progress, twins, cut
        ):
            yield c.state, c
            if self.deadline is not None and time.monotonic() >= self.deadline:
                # The budget is spent: stop cleanly; the states left are the next run's.
                self.more_to_do = True
                log.info("search: the budget is spent; run the command again to go on")
                return

    def commit(self, item: lifecycle.Item, result: Any) -> None:
        assert isinstance(item, crashstates.CrashState) and isinstance(result, checking.Checked)
        wid = item.id.split("/", 1)[0]
        verdict = reduce(r.outcome for r in result.results)
        if is_finding(verdict) and not self._expected(verdict):
            cell, metrics = symptom.of(
                verdict, result.results, self.workloads[wid], str(self.sc.fs.type)
            )
            # No outcome: the state's verdict already counts it; this row only groups it.
            self.run.store.record_observation(
                self.run.run_id, f"bug:{item.id}", cell, metrics, None
            )
        crash.commit_state(self.run.store, self.run.run_id, result)

    def _expected(self, verdict: Outcome) -> bool:
        return expected_without_journal(verdict, self.sc.fs.journaled)

    def expected(self, item: ItemOutcome) -> bool:
        # Without a journal a full fsck is the recovery: its repair is the design.
        return self._expected(item.outcome)

    def finish(self) -> None:
        """With ``keep_logs = "findings"``, let go of the log of every workload whose
        states are all judged and none a finding: at ~2.7 MB a workload on disk (xfs;
        btrfs 5.5 MB), a nightly's whole seq-1 on three filesystems would keep ~1.9 GB a
        night. A finding's workload keeps its log for triage and reproduce, and so does one
        with a state the lab failed to judge (a resume redoes it from the log)."""
        if self.sc.keep_logs == "all":
            return
        by_state = {i.item: i for i in self.run.store.item_outcomes(self.run.run_id)}
        self._stack.close()  # the logs' maps: a dropped log is unlinked under none
        for wid, src in self.sources.items():
            ids = [s.id for s in src.states]
            if not all(self._settled(by_state.get(i)) for i in ids):
                continue
            rec = record.load(self.run.dir, wid)
            assert rec is not None and not rec.dropped
            record.drop_log(rec, ids)

    def _settled(self, item: ItemOutcome | None) -> bool:
        """A state judged, and no finding: its log has nothing left to show."""
        if item is None or is_harness(item.outcome):
            return False
        return not is_finding(item.outcome) or self.expected(item)

    def close(self) -> None:
        self._stack.close()

    def summary(self) -> dict[str, Any]:
        generated = len(self.items())
        family = self.sc.workload.chosen_family()
        status: dict[str, int] = {}
        dropped = {"workloads": 0, "freed_bytes": 0}
        for d in self.workloads.values():
            rec = record.load(self.run.dir, d["id"])
            key = rec.status if rec else "missing"
            status[key] = status.get(key, 0) + 1
            if rec is not None and rec.dropped:
                dropped["workloads"] += 1
                dropped["freed_bytes"] += int(rec.facts["log_dropped"]["bytes"])
        return {
            "workloads": len(self.workloads),
            "workload_status": status,
            "states": generated,
            "reuse": reuse.counts(self.run, generated),
            "recording_seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            "recorded_now": self.recorded_now,
            **({"rerecorded_after_disk_failed": self.rerecorded} if self.rerecorded else {}),
            **({"family": family} if family else {}),
            **({"budget_left_work": self.more_to_do} if self.sc.workload.budget else {}),
            **({"logs_dropped": dropped} if self.sc.keep_logs != "all" else {}),
        }
