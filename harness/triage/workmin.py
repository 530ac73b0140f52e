"""The minimal workload: ddmin over a failing state's workload ops (``opmin.py``), each
candidate re-recorded in a guest under dm-log-writes and its crash states re-checked,
to the fewest ops whose states still fail the same way (``symptom.py``).

One ddmin round is one recording guest and one checking pass: the crash-state core's
batch recorder (``harness/crashstate/workloads.py``, the search kind's) records every
candidate of the round in one guest, each on its own slices under its own log, and
``check_sources`` checks the states of all their logs in shared guest batches. Round 0
records the whole workload and the empty one (P alone) together: the whole must still
fail the same way re-recorded, else the workload is not minimised (the README says so).

A candidate's states: the run's own crash-state spec of the failing state's kind, cut
from the candidate's log, those at the candidate's oracle point (``Plan.point_mark``)
and as exact as the failing state, at most :data:`STATES_PER_CANDIDATE` spread along
the log; the candidate fails the same way when one of them does. What a candidate
can come to, besides failing or not (each counted, none a finding):

* ``invalid``: not a workload (an op's file left out: the host's model says so before
  recording, or the guest's op fails) -- it fails not, as ddmin's "unresolved";
* ``harness``: its recording failed (dm-log-writes lost entries, a step of the guest's
  failed) or a check could not judge a state -- the lab's problem for that candidate,
  taken as not failing (ddmin may keep more ops than it needed); a whole recording
  guest that fails is the triage's harness error (exit 3).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.crash import CheckSpec, CrashSpec
from harness.crashstate import checking
from harness.crashstate import workloads as record
from harness.crashstate.statelog import file_name
from harness.crashstate.stored import ONE_LOG_KINDS
from harness.model import ace
from harness.model.oracle.doc import OracleDoc
from harness.outcome import is_harness
from harness.record import logwrites
from harness.replay import crashstates
from harness.triage import ddmin, opmin, symptom
from harness.triage.target import Target

STATES_PER_CANDIDATE = 4  # a mark state is one; reorder, torn, fua points have more
RECORD_TIMEOUT = 300.0  # seconds one candidate's recording may take in the guest


@dataclass(frozen=True)
class Workload:
    """The minimal workload of a failing state, or why there is none."""

    not_minimised: str = ""  # the reason, when there is no search
    plan: opmin.Plan | None = None
    search: ddmin.Minimal[int] | None = None
    tally: dict[str, int] = dataclasses.field(default_factory=dict)
    rounds: int = 0  # recording guests (round 0 included)
    seconds: float = 0.0
    found: symptom.Symptom | None = None  # the minimal workload's failing state's
    kept: opmin.Subset = ()  # the minimal workload's ops: ddmin's subset, closed, and P

    @property
    def keep(self) -> opmin.Subset:
        return self.kept

    @property
    def candidates(self) -> int:
        """Candidates judged: round 0's two, then ddmin's."""
        return 0 if self.search is None else 2 + self.search.tried


@dataclass(frozen=True)
class _Checking:
    """What ``check_sources`` reads of a scenario."""

    check: CheckSpec
    crash: CrashSpec


def candidate_id(keep: opmin.Subset) -> str:
    """A candidate's content address: its kept ops."""
    return "w" + hashlib.sha256(json.dumps(list(keep)).encode()).hexdigest()[:12]


class Rerecorder:
    """Subsets of a plan's items -> whether each fails the way ``original`` does."""

    def __init__(
        self,
        t: Target,
        p: opmin.Plan,
        original: symptom.Symptom,
        work: Path,
        progress: Callable[[str], None],
        keep_of: Callable[[opmin.Subset], opmin.Subset],
    ) -> None:
        self.t, self.p, self.original, self.work, self.progress = t, p, original, work, progress
        self.keep_of = keep_of  # a subset of the items -> the ops its candidate records
        self.tally: Counter[str] = Counter()
        self.rounds = 0
        self.failing: dict[str, symptom.Symptom] = {}  # candidate id -> its same-way state's
        params = t.params
        self.sc = _Checking(t.check, CrashSpec.model_validate(params.get("crash", {})))
        self.workload = params.get("workload") or {}

    def __call__(self, subsets: list[opmin.Subset]) -> list[bool]:
        # Two subsets closed to the same ops are one candidate.
        ids = [candidate_id(self.keep_of(s)) for s in subsets]
        keeps = {i: self.keep_of(s) for i, s in zip(ids, subsets, strict=True)}
        wanted: list[dict[str, Any]] = [
            {"id": i, "index": n, "source": self.p.source, "keep": list(k)}
            for n, (i, k) in enumerate(keeps.items())
        ]
        todo = [w for w in wanted if record.load(self.work, w["id"]) is None]
        self.progress(f"workload ddmin round {self.rounds}: recording {len(todo)} candidates")
        if todo:
            record.record_batch(
                self.work,
                self.t.fs,
                todo,
                timeout=RECORD_TIMEOUT,
                noop_sync=bool(self.workload.get("noop_sync")),
                flush_after_sync=bool(self.workload.get("flush_after_sync")),
                ordered_metadata=bool(self.workload.get("ordered_metadata")),
                progress=lambda _: None,
                end=self.sc.crash.end_op(),
            )
        verdicts = dict(zip(keeps, self.judge(wanted), strict=True))
        self.rounds += 1  # round 0: the whole workload and the empty one
        return [verdicts[i] == "fails" for i in ids]

    def judge(self, wanted: list[dict[str, Any]]) -> list[str]:
        """Each candidate's verdict word: fails, passes, no-state, invalid, harness."""
        verdict: dict[str, str] = {}
        with contextlib.ExitStack() as stack:
            sources = []
            for w in wanted:
                rec = record.load(self.work, w["id"])
                assert rec is not None  # record_batch kept every one
                if rec.status != "recorded":
                    verdict[w["id"]] = "harness" if rec.status == "failed" else "invalid"
                    continue
                lg = stack.enter_context(logwrites.open_log(rec.log))
                states = self._states(lg, rec.oracle(), w["id"])
                if not states:
                    verdict[w["id"]] = "no-state"
                    continue
                size = int(rec.facts["device_size"])
                sources.append(checking.Source(lg, states, rec.oracle(), size, w["id"]))
            self.progress(
                f"workload ddmin round {self.rounds}: checking "
                f"{sum(len(s.states) for s in sources)} states of {len(sources)} candidates"
            )
            found: dict[str, list[symptom.Symptom]] = {}
            for c in checking.check_sources(
                self.sc, self.t.fs, sources, self.work, lambda *_: None, None
            ):
                found.setdefault(c.state.id.split("/", 1)[0], []).append(symptom.of(c.results))
        for wid, got in found.items():
            same = [s for s in got if s.same_way(self.original)]
            if same:
                verdict[wid] = "fails"
                self.failing[wid] = same[0]
            elif any(is_harness(s.outcome) for s in got):
                verdict[wid] = "harness"
            else:
                verdict[wid] = "passes"
        out = [verdict[w["id"]] for w in wanted]
        self.tally.update(out)
        return out

    def _states(
        self, lg: logwrites.Log, oracle: dict[str, Any], wid: str
    ) -> list[crashstates.CrashState]:
        """The candidate's states at its oracle point, of the failing state's kind."""
        s = self.t.state
        mark = self.p.point_mark(OracleDoc.of(oracle))
        specs = [
            {**spec, **({"max_states": 100_000} if "max_states" in spec else {})}
            for spec in self._specs()
            if spec.get("kind") == s.generator
        ]
        at = [
            c
            for c in crashstates.generate(lg, specs, self.t.run.seed or 0)
            if c.mark == mark and c.exact == s.exact
        ]
        picked = crashstates.spread(at, STATES_PER_CANDIDATE)
        return [dataclasses.replace(c, id=f"{wid}/{c.id}") for c in picked]

    def _specs(self) -> list[dict[str, Any]]:
        return [{"kind": str(st.kind), **st.params()} for st in self.sc.crash.states]


def minimise(
    t: Target,
    original: symptom.Symptom,
    *,
    max_candidates: int,
    progress: Callable[[str], None] = lambda _: None,
) -> Workload:
    """The minimal workload of ``t``'s failing state (the module docstring).

    :raise HarnessError: a recording guest failed as a whole.
    """
    started = time.monotonic()
    kind = t.params.get("kind", t.run.kind)  # a check-log run is stored as a crash run
    if kind not in ONE_LOG_KINDS:
        return Workload(
            not_minimised=f"a {kind} run: its log was recorded elsewhere, by a "
            "workload the lab does not re-record"
        )
    try:
        p = opmin.plan(t.params, t.oracle, t.state.mark, t.run.seed, t.workload)
    except opmin.NotMinimised as e:
        return Workload(not_minimised=str(e))
    all_ops = ace.source_ops(p.source)
    fsync_names = bool(p.source["fsync_names"])

    work = t.rdir / "triage" / f"workload-{file_name(t.state.id)}"
    shutil.rmtree(work, ignore_errors=True)  # a candidate's recording is never reused

    def closed(s: opmin.Subset) -> opmin.Subset | None:
        return opmin.closed(all_ops, p.keep(s), fsync_names)

    def keep_of(s: opmin.Subset) -> opmin.Subset:
        k = closed(s)
        assert k is not None  # only a workload is asked
        return k

    rr = Rerecorder(t, p, original, work, progress, keep_of)

    def is_valid(s: opmin.Subset) -> bool:
        """Asked once per candidate (ddmin asks a subset once): the refused are counted."""
        ok = closed(s) is not None
        if not ok:
            rr.tally["invalid"] += 1
        return ok

    try:
        progress(f"re-recording the whole workload ({len(p.items)} ops before its oracle point)")
        first = [p.items, *([()] if is_valid(()) else [])]
        judged = dict(zip(first, rr(first), strict=True))
        if not judged[p.items]:
            why = "re-recorded, the whole workload does not fail the same way at its oracle point"
            return Workload(why, p, None, dict(rr.tally), rr.rounds, time.monotonic() - started)
        known: dict[opmin.Subset, bool] = {(): judged.get((), False)}
        search = opmin.minimise(
            p, rr, max_candidates=max_candidates, known=known, is_valid=is_valid
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    kept = keep_of(search.items)
    seconds = time.monotonic() - started
    found = rr.failing.get(candidate_id(kept))
    return Workload("", p, search, dict(rr.tally), rr.rounds, seconds, found, kept)
