"""Campaigns: many scenario runs (scenarios x a matrix of ``--set`` overrides x seeds)
that survive SIGKILL.

A campaign file (``campaigns/*.toml``)::

    description = "what it is for"
    max_failures = 2          # a run that made the harness fail this often is quarantined
    max_interruptions = 5     # ... or that was killed with the harness this often
    stall_factor = 4.0        # stall budget: this times the longest earlier run ...
    stall_floor = 600         # ... but never under this many seconds

    [[run]]
    scenario = "ext4-ordered-fsync"
    matrix = { "fs.data_mode" = ["ordered", "journal"] }   # every combination
    set = ["workload.ops=100"]                             # applied to each
    repetitions = 2           # seeds: the scenario's seed, seed + 1, ... (or seeds = [...])
    optional = false          # true: skip (with a note) while the scenario does not exist

**Bookkeeping.** A campaign is a row in ``campaigns``, each element (scenario,
overrides, seed) a row in ``campaign_elements`` keyed by its canonical JSON, so an
element exists once however often the campaign is resumed. Every state change of an
element is ONE SQL statement (so atomic): ``pending -> running -> done``, or ``failed``
(retried) and finally ``quarantined``. The element's scenario run resumes itself
(``run.execute`` finds the unfinished run with the same scenario, parameters and seed
and skips the states that have verdicts), so a SIGKILL loses at most the state being
checked and duplicates nothing. An element found ``running`` when the campaign starts
was killed with the harness: that counts as an *interruption*, and an element that
keeps taking the harness down (``max_interruptions``) is quarantined like one that keeps
failing (``max_failures``), instead of looping.

**History.** The expected duration of an element (for the ETA) and its stall budget are
learnt from earlier finished runs of the same scenario in the store. A step that runs
past its budget is a hang: it is stopped with ``Stalled`` and counted as a failure with a
timeout outcome.

The engine takes the element runner as a callable, so the bookkeeping is unit-tested
without guests; the default runner hands each element to the run lifecycle
(``harness/experiments/lifecycle.py``), which finds the scenario's experiment kind.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from harness import paths
from harness.config import scenario
from harness.config.campaign import Campaign, Element
from harness.errors import CrashlabError, InputError, NotRun, ToolMissing
from harness.experiments import lifecycle
from harness.experiments.lifecycle import Stalled, stall_budget
from harness.store.campaigns import ElementUpdate, element_update
from harness.store.db import RunStatus, Store, canonical_json, pid_alive, utc_now

# With no history at all, a guess for the ETA only (never a stall budget).
DEFAULT_EXPECTED = 240.0


class ElementStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    QUARANTINED = "quarantined"


# --- history ------------------------------------------------------------------------


@dataclass(frozen=True)
class History:
    """What earlier finished runs of a scenario took (seconds)."""

    durations: Sequence[float]

    @property
    def expected(self) -> float | None:
        return statistics.median(self.durations) if self.durations else None

    def stall_budget(self, factor: float, floor: float) -> float | None:
        """``factor`` x the longest earlier run, at least ``floor``; None without history."""
        return max(floor, factor * max(self.durations)) if self.durations else None


def history(store: Store, scenario_name: str, limit: int = 20) -> History:
    return History(store.scenario_durations(scenario_name, limit))


# --- running ------------------------------------------------------------------------

ProgressFn = Callable[[str, int, int], None]


@dataclass(frozen=True)
class ElementContext:
    db: Path
    progress: ProgressFn
    budget: float | None
    # The run an earlier attempt of this element began (None: none), the only one it
    # may resume; ``began`` records the run an attempt uses the moment it has one.
    run_id: str | None = None
    began: Callable[[str], None] = lambda run_id: None


Runner = Callable[[Element, ElementContext], str]  # returns the run id


class View(Protocol):
    """What the engine tells a progress display; ``NullView`` ignores it all."""

    def start(self, campaign: Campaign, rows: Sequence[ElementRow], eta: float) -> None: ...
    def element(self, row: ElementRow, expected: float, budget: float | None) -> None: ...
    def progress(self, what: str, done: int, total: int) -> None: ...
    def finished(self, row: ElementRow, eta: float) -> None: ...


class NullView:
    def start(self, campaign: Campaign, rows: Sequence[ElementRow], eta: float) -> None:
        pass

    def element(self, row: ElementRow, expected: float, budget: float | None) -> None:
        pass

    def progress(self, what: str, done: int, total: int) -> None:
        pass

    def finished(self, row: ElementRow, eta: float) -> None:
        pass


@dataclass(frozen=True)
class ElementRow:
    element: Element
    status: ElementStatus
    run_id: str | None
    failures: int
    interruptions: int
    last_error: str | None
    seconds: float | None


@dataclass
class CampaignReport:
    campaign_id: str
    campaign: Campaign
    db: Path
    resumed: bool
    rows: list[ElementRow] = field(default_factory=list)
    ran: int = 0  # elements run (to completion or not) by this invocation

    def by_status(self, status: ElementStatus) -> list[ElementRow]:
        return [r for r in self.rows if r.status is status]


def failure(e: BaseException, budget: float | None) -> str:
    """What an element's failed attempt says in ``last_error``."""
    if isinstance(e, Stalled):
        return f"timeout: stalled past its budget of {budget or 0:.0f} s"
    if isinstance(e, CrashlabError):
        return f"{type(e).__name__}: {e.message}"
    return f"{type(e).__name__}: {e}"


def run_scenario_element(el: Element, ctx: ElementContext) -> str:
    """The default runner: the scenario on the run lifecycle, resuming the element's own
    unfinished run (never another campaign's run of the same scenario and seed: a night
    would re-judge, and claim, the night before's); done only with a finished run."""

    sc = scenario.load(el.scenario, scenario.seeded(el.overrides, el.seed))
    report = lifecycle.execute(
        sc,
        db=ctx.db,
        fresh=ctx.run_id is None,
        only=ctx.run_id,
        began=ctx.began,
        progress=ctx.progress,
    )
    return lifecycle.finished(report)


class Engine:
    """Runs one campaign against one store; see the module docstring."""

    def __init__(
        self,
        campaign: Campaign,
        db: Path,
        *,
        runner: Runner = run_scenario_element,
        view: View | None = None,
        after_element: Callable[[Store, ElementRow], None] | None = None,
    ):
        self.campaign = campaign
        self.db = db
        self.runner = runner
        self.view: View = view or NullView()
        self.after_element = after_element

    def run(self, *, new: bool = False) -> CampaignReport:
        """Run (or resume) the campaign until every element is done or quarantined.

        :raise InputError: the same campaign is running in another live process.
        """
        with Store.open(self.db) as st:
            cid, resumed = self._adopt(st, new)
            report = CampaignReport(cid, self.campaign, self.db, resumed)
            try:
                self._run_elements(st, report)
            except BaseException:
                st.interrupt_campaign(cid)
                raise
            report.rows = self.rows(st, cid)
            st.finish_campaign(cid, utc_now())
        return report

    # -- bookkeeping (each statement atomic on its own)

    def _adopt(self, st: Store, new: bool) -> tuple[str, bool]:
        c = self.campaign
        row = st.unfinished_campaign(c.name, c.spec_hash)
        cid: str | None = None
        if row and not new:
            cid, host, pid = row
            if host == socket.gethostname() and pid and pid != os.getpid() and pid_alive(pid):
                raise InputError(
                    f"campaign {c.name} ({cid}) is running in process {pid}",
                    hint="wait for it, or stop it first; it resumes where it stopped",
                )
            st.resume_campaign(cid, socket.gethostname(), os.getpid())
        resumed = cid is not None
        if cid is None:
            cid = uuid.uuid4().hex[:12]
            spec = {
                "elements": [json.loads(e.key) for e in c.elements],
                "max_failures": c.max_failures,
                "max_interruptions": c.max_interruptions,
            }
            st.begin_campaign(
                cid,
                c.name,
                str(c.path),
                c.spec_hash,
                canonical_json(spec),
                utc_now(),
                socket.gethostname(),
                os.getpid(),
            )
        # Idempotent: a campaign killed while inserting its elements completes them here.
        st.add_campaign_elements(
            cid,
            [
                (e.key, e.position, e.scenario, json.dumps(list(e.overrides)), e.seed)
                for e in c.elements
            ],
        )
        return cid, resumed

    def rows(self, st: Store, cid: str) -> list[ElementRow]:
        by_key = {e.key: e for e in self.campaign.elements}
        out = []
        for key, status, run_id, failures, interruptions, error, seconds in st.campaign_elements(
            cid
        ):
            if key in by_key:
                out.append(
                    ElementRow(
                        by_key[key],
                        ElementStatus(status),
                        run_id,
                        int(failures),
                        int(interruptions),
                        error,
                        seconds,
                    )
                )
        return out

    def _row(self, st: Store, cid: str, el: Element) -> ElementRow:
        return next(r for r in self.rows(st, cid) if r.element.key == el.key)

    def _set(self, st: Store, cid: str, el: Element, **values: Any) -> None:
        st.update_element(element_update(cid, el.key, **values))

    # -- the loop

    def _plan(self, st: Store, cid: str) -> Plan:
        hist = {name: history(st, name) for name in {e.scenario for e in self.campaign.elements}}
        expected_all = [h.expected for h in hist.values() if h.expected is not None]
        fallback = statistics.median(expected_all) if expected_all else DEFAULT_EXPECTED
        return Plan(self, st, cid, hist, fallback)

    def _run_elements(self, st: Store, report: CampaignReport) -> None:
        cid = report.campaign_id
        plan = self._plan(st, cid)
        rows = self.rows(st, cid)
        self.view.start(self.campaign, rows, plan.eta())
        for row in rows:
            el = row.element
            self._recover(st, cid, row)
            while not self._settled(st, cid, el, plan):
                self._attempt(st, cid, el, plan, report)
                self.view.finished(self._row(st, cid, el), plan.eta())

    def _recover(self, st: Store, cid: str, row: ElementRow) -> None:
        if row.status is ElementStatus.RUNNING:
            # Left running by a harness that was killed: an interruption, not a failure.
            self._set(
                st,
                cid,
                row.element,
                count="interruptions",
                status="failed",
                last_error="interrupted: the harness was killed during this run",
            )

    def _settled(self, st: Store, cid: str, el: Element, plan: Plan) -> bool:
        """Whether ``el`` needs no further attempt; quarantines it when it has used up its
        failures or interruptions."""
        c, row = self.campaign, self._row(st, cid, el)
        if row.status in (ElementStatus.DONE, ElementStatus.QUARANTINED):
            return True
        if row.failures >= c.max_failures or row.interruptions >= c.max_interruptions:
            self._set(st, cid, el, status="quarantined", finished_at=utc_now())
            self.view.finished(self._row(st, cid, el), plan.eta())
            return True
        return False

    def _begin(
        self, st: Store, cid: str, el: Element, plan: Plan, report: CampaignReport
    ) -> float | None:
        """Mark ``el`` running and show it; its stall budget."""
        budget = plan.budget(el)
        self._set(st, cid, el, status="running", pid=os.getpid(), started_at=utc_now())
        report.ran += 1
        self.view.element(self._row(st, cid, el), plan.expected(el), budget)
        return budget

    def _attempt(
        self, st: Store, cid: str, el: Element, plan: Plan, report: CampaignReport
    ) -> None:
        own = self._row(st, cid, el).run_id
        if own is not None and st.run(own).status == RunStatus.DONE:
            # Its run finished but the harness died before the element was marked done.
            st.update_element(self._done(cid, el, own, 0.0))
            return
        budget = self._begin(st, cid, el, plan, report)

        def began(run_id: str) -> None:
            st.update_element(element_update(cid, el.key, run_id=run_id))

        ctx = ElementContext(self.db, self.view.progress, budget, own, began)
        t0 = time.monotonic()
        try:
            with stall_budget(budget):
                run_id = self.runner(el, ctx)
        except (KeyboardInterrupt, ToolMissing):
            # A person stopped it, or the host lacks a program every element would need
            # (QEMU gone from PATH): not the element's fault, so neither a failure nor an
            # interruption. Retried at once it failed again and was quarantined, and so
            # would every element after it; now the campaign stops (exit 3) and a rerun
            # takes the element up again.
            self._set(st, cid, el, status="pending", pid=None)
            raise
        except NotRun as e:
            # This kernel cannot run the element (no ZFS, no dm-dust for it): done, with
            # the reason and no run, never a failure or a finding.
            done = self._done(cid, el, None, time.monotonic() - t0)
            st.update_element(done)
            st.update_element(element_update(cid, el.key, last_error=f"not run: {e.message}"))
            return
        except (Stalled, Exception) as e:  # a bug in a runner is a harness failure, not a loop
            self._fail(st, cid, el, failure(e, budget), t0)
            return
        st.update_element(self._done(cid, el, run_id, time.monotonic() - t0))
        self._after(st, cid, el)

    @staticmethod
    def _done(cid: str, el: Element, run_id: str | None, seconds: float) -> ElementUpdate:
        return element_update(
            cid,
            el.key,
            status="done",
            run_id=run_id,
            seconds=round(seconds, 2),
            finished_at=utc_now(),
            pid=None,
        )

    def _after(self, st: Store, cid: str, el: Element) -> None:
        if self.after_element:
            self.after_element(st, self._row(st, cid, el))

    def _fail(self, st: Store, cid: str, el: Element, error: str, t0: float) -> None:
        st.update_element(self._failed(cid, el, error, time.monotonic() - t0))

    @staticmethod
    def _failed(
        cid: str, el: Element, error: str, seconds: float, *, counter: str = "failures"
    ) -> ElementUpdate:
        """The update that counts a failed attempt (or, with ``counter``, an
        interruption); never over a done element, so a late failure of a duplicate attempt
        changes nothing."""
        return element_update(
            cid,
            el.key,
            count=counter,
            unless_done=True,
            status="failed",
            last_error=error[:1000],
            seconds=round(seconds, 2),
            pid=None,
        )


@dataclass
class Plan:
    """What history says of a campaign's elements: expected durations, stall budgets."""

    engine: Engine
    st: Store
    cid: str
    hist: dict[str, History]
    fallback: float

    def expected(self, el: Element) -> float:
        return self.hist[el.scenario].expected or self.fallback

    def budget(self, el: Element) -> float | None:
        c = self.engine.campaign
        return self.hist[el.scenario].stall_budget(c.stall_factor, c.stall_floor)

    def eta(self) -> float:
        return sum(
            self.expected(r.element)
            for r in self.engine.rows(self.st, self.cid)
            if r.status not in (ElementStatus.DONE, ElementStatus.QUARANTINED)
        )


def default_db() -> Path:
    return paths.default_db()
