"""A run's JUnit testcases (harness/report/junit.py builds the XML around them).

A run's items are grouped by how they count (``outcome.counts_as``, with the run's
stored expected items) and by symptom: a search run's findings as ``results bugs``
clusters them (harness/report/search.py), any other finding or harness outcome by its
outcome and the checks that gave it. Each group of findings is one testcase that names
a crash state and the ``scenario triage`` command for it; each group of harness
outcomes is one ``<error>``; the rest of the run (consistent, expected, skipped items)
is one testcase named after the run's scenario.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from harness.outcome import EXIT_FINDING, Counted, Outcome, counts_as
from harness.paths import default_db
from harness.report import search
from harness.store.db import Store
from harness.store.model import RunDetail, RunRow, RunStatus


class Result(StrEnum):
    PASSED = "passed"
    FAILURE = "failure"
    ERROR = "error"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Case:
    classname: str
    name: str
    result: Result = Result.PASSED
    message: str = ""
    type: str = ""  # an outcome, "quarantined", "not_run" ...
    text: str = ""  # the failure's, error's or skip's body
    out: str = ""  # system-out: what a passing case counted
    seconds: float | None = None


@dataclass
class _Group:
    counted: Counted
    outcome: Outcome
    symptom: str
    items: list[str] = field(default_factory=list)
    state: str | None = None  # the crash state to triage
    seconds: float = 0.0  # its items' checks
    smallest: str = ""  # a search cluster's smallest workload


def cases(st: Store, detail: RunDetail) -> list[Case]:
    """The testcases of one run, findings first, worst first."""
    r = detail.run
    groups, rest = _groups(st, detail)
    # A finding fails the run only where its account says so (a control that expects
    # findings exits 0 with them): the stored exit status decides, not this module.
    failing = r.exit == EXIT_FINDING
    out = [_group_case(g, r, st.path, failing) for g in groups]
    if failing and not any(g.counted is Counted.FINDING for g in groups):
        why = r.account.control_failed or f"run {r.id} exited {r.exit}"
        out.append(Case(r.scenario, "control", Result.FAILURE, why, "control"))
    unfinished = _unfinished(r)
    if unfinished:
        out.append(Case(r.scenario, "run", Result.ERROR, unfinished, str(r.status)))
    counted = ", ".join(f"{n} {what}" for (_, what), n in rest.items())
    if any(c in (Counted.CLEAN, Counted.EXPECTED) for c, _ in rest) or not (rest or out):
        out.append(Case(r.scenario, r.scenario, out=counted or "no item to check"))
    elif rest:
        why = f"not checked: {counted}"
        out.append(Case(r.scenario, r.scenario, Result.SKIPPED, why, "not_run"))
    return out


def _groups(st: Store, detail: RunDetail) -> tuple[list[_Group], dict[tuple[Counted, str], int]]:
    """The run's findings and harness outcomes by symptom; the rest counted by outcome."""
    r = detail.run
    states = {s.id: s for s in detail.states}
    clusters = {sid: c for c in search.clusters(st, r.id) for sid in c.states}
    groups: dict[str, _Group] = {}
    rest: dict[tuple[Counted, str], int] = {}
    for item in st.item_outcomes(r.id):
        counted = counts_as(item.outcome, item.item in r.account.expected_items)
        if counted not in (Counted.FINDING, Counted.HARNESS):
            why = r.account.waived.get(item.item)
            label = f" (expected: {why} waived the promise)" if why else " (expected)"
            what = f"{item.outcome}" + (label if counted is Counted.EXPECTED else "")
            rest[counted, what] = rest.get((counted, what), 0) + 1
            continue
        state = states.get(item.item)
        cluster = clusters.get(item.item) if counted is Counted.FINDING else None
        if cluster:
            symptom = " ".join(f"{k}={v}" for k, v in cluster.symptom.items())
        else:
            checks = state.checks if state else []
            by = sorted({f"{c.stage}/{c.checker}" for c in checks if c.outcome == item.outcome})
            symptom = f"{item.outcome}" + (f" ({', '.join(by)})" if by else "")
        g = groups.setdefault(symptom, _Group(counted, item.outcome, symptom))
        g.items.append(item.item)
        g.seconds += sum(c.seconds for c in state.checks) if state else 0.0
        if cluster:
            g.state = cluster.to_triage
            g.smallest = ": ".join(cluster.smallest)
    for g in groups.values():
        g.items.sort()
        if g.state is None and g.counted is Counted.FINDING:
            g.state = next((i for i in g.items if i in states), None)
    worst_first = sorted(
        groups.values(),
        key=lambda g: (g.counted is not Counted.FINDING, -g.outcome.severity, g.symptom),
    )
    return worst_first, rest


def _group_case(g: _Group, r: RunRow, db: Path, failing: bool) -> Case:
    n, t = len(g.items), g.seconds or None
    listed = ", ".join(g.items[:5]) + (f" and {n - 5} more" if n > 5 else "")
    every = [f"{n} item(s):", *(f"  {i}" for i in g.items)]
    if g.counted is Counted.HARNESS:
        # A rerun of the run redoes the items the lab could not judge.
        why = f"{g.symptom}: the lab could not check {n} item(s): {listed}"
        text = "\n".join([f"symptom: {g.symptom}", f"run: {r.id}", *every])
        return Case(r.scenario, g.symptom, Result.ERROR, why, str(g.outcome), text, "", t)
    if g.state:
        cmd = shlex.join(["scenario", "triage", g.state, *_db_option(db)])
        why = f"{g.symptom}: {n} state(s); state {g.state}; triage: {cmd}"
        steps = [f"state: {g.state}", f"triage: {cmd}"]
    else:  # not a crash state (a fault or ZFS item): nothing to triage, the run says all
        cmd = shlex.join(["scenario", "results", "show", r.id, *_db_option(db)])
        why = f"{g.symptom}: {n} item(s): {listed}; see: {cmd}"
        steps = [f"see: {cmd}"]
    steps += [f"smallest workload: {g.smallest}"] if g.smallest else []
    text = "\n".join([f"symptom: {g.symptom}", f"run: {r.id}", *steps, *every])
    if not failing:
        said = f"the known-answer control's finding (run {r.id} exited {r.exit}): {why}"
        return Case(r.scenario, g.symptom, out=said, seconds=t)
    return Case(r.scenario, g.symptom, Result.FAILURE, why, str(g.outcome), text, "", t)


def _db_option(db: Path) -> list[str]:
    """``--db PATH`` unless the store is the default one: a command to paste as is."""
    return [] if db.resolve() == default_db().resolve() else ["--db", str(db)]


def _unfinished(r: RunRow) -> str | None:
    """Why a run that did not finish is an error, or None."""
    if r.status is RunStatus.DONE:
        return None
    error = (r.summary or {}).get("error")
    if error:
        return f"run {r.status}: {error}"
    if r.status is RunStatus.FAILED:
        return None  # left failed by items the lab could not judge: their errors say it
    return f"run {r.status}: it did not finish; running it again resumes it"
