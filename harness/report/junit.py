"""JUnit XML of campaigns and runs (``campaign run --junit``, ``results export --junit``),
for the CI dashboards that read it (Jenkins, GitLab, kdevops).

One ``<testsuite>`` per campaign or run, inside ``<testsuites>``.

* A **campaign**'s testcases are its elements, named by their label (scenario, ``--set``
  items, seed): a ``<failure>`` when the element's run found something, an ``<error>``
  when the lab could not finish it (exit 3: a quarantined element, a run whose states it
  could not judge), ``<skipped>`` with the reason when it was not run (its kernel lacks
  what it needs, an optional scenario that does not exist yet, a campaign stopped first).
* A **run**'s testcases are its finding clusters (a search run's are ``results bugs``'s:
  symptom and smallest workload; any other run's: outcome and the checks that decided
  it), one ``<error>`` per harness outcome, and one testcase named after the run for the
  rest of it: a run with no finding is that one passing testcase.

Every failure says the symptom, a crash state and the ``scenario triage`` command for it.
What counts as a finding or the lab's is outcome.py's rule (``counts_as``) and the run's
stored exit status, never decided here: a known-answer control that expects findings
passes with them. Testcase names stay the same from night to night (a symptom, a label),
so a dashboard follows each one's history; ids and counts are in messages and properties.
"""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from harness.errors import InputError
from harness.outcome import EXIT_FINDING, EXIT_HARNESS
from harness.report import junit_runs
from harness.report.campaign_diff import label
from harness.report.junit_runs import Case, Result
from harness.store.campaigns import CampaignRun
from harness.store.db import Store


@dataclass
class Suite:
    name: str
    id: str
    cases: list[Case] = field(default_factory=list)
    seconds: float | None = None
    timestamp: str | None = None
    hostname: str | None = None
    properties: dict[str, str] = field(default_factory=dict)

    def count(self, result: Result) -> int:
        return sum(1 for c in self.cases if c.result is result)


# --- what a store says --------------------------------------------------------------


def suites(st: Store, refs: Sequence[str]) -> list[Suite]:
    """A suite per run or campaign ``refs`` name (ids, unique prefixes, campaign names).

    :raise InputError: a ref names nothing, or more than one thing.
    """
    out = []
    for ref in refs:
        kind, full = resolve(st, ref)
        out.append(campaign_suite(st, full) if kind == "campaign" else run_suite(st, full))
    return out


def resolve(st: Store, ref: str) -> tuple[str, str]:
    """("campaign", id) or ("run", id) for a campaign id, prefix or name, or a run id or
    prefix (a campaign name means its newest campaign).

    :raise InputError: nothing, or several things, by that name.
    """
    cids = st.resolve_campaign_id(ref)
    if not cids:
        latest = st.latest_campaign(ref)
        cids = [latest[0]] if latest else []
    if not cids:
        return "run", st.resolve_run_id(ref)
    if len(cids) > 1:
        raise InputError(
            f"campaign id {ref!r} is ambiguous in {st.path}",
            hint="it matches " + ", ".join(cids[:8]) + "; give more characters",
        )
    try:
        run = st.resolve_run_id(ref)
    except InputError:
        return "campaign", cids[0]
    both = f"{ref!r} names both run {run} and campaign {cids[0]}"
    raise InputError(both, hint="give more characters")


def run_suite(st: Store, run_id: str) -> Suite:
    detail = st.run_detail(run_id)
    r = detail.run
    cases = junit_runs.cases(st, detail)
    props = {
        "run": r.id,
        "scenario": r.scenario,
        "kind": r.kind,
        "fs": r.fs or "",
        "kernel": r.guest_kernel or "",
        "status": str(r.status),
        "exit_status": str(r.exit),
        "store": str(st.path),
    }
    return Suite(r.scenario, r.id, cases, r.duration, r.started_at, r.host, props)


def campaign_suite(st: Store, cid: str, absent: Iterable[str] = ()) -> Suite:
    """A campaign's suite; ``absent``: its optional scenarios that do not exist (only the
    campaign file knows them)."""
    info = st.campaign(cid)
    if info is None:
        raise InputError(f"no campaign {cid!r} in {st.path}")
    cases = [_element(st, info.name, r) for r in st.campaign_runs(cid)]
    cases += [
        Case(info.name, n, Result.SKIPPED, f"optional scenario {n} does not exist yet", "not_run")
        for n in absent
    ]
    seconds = _span(info.started_at, info.finished_at)
    if seconds is None:
        seconds = sum(c.seconds or 0.0 for c in cases)
    props = {"campaign": info.id, "file": info.path, "status": info.status, "store": str(st.path)}
    name = f"campaign {info.name}"
    return Suite(name, info.id, cases, seconds, info.started_at, info.host, props)


def _element(st: Store, camp: str, r: CampaignRun) -> Case:
    name, t = label(r), r.seconds
    if r.status in ("quarantined", "failed"):
        tries = f"{r.failures} failure(s), {r.interruptions} interruption(s)"
        why = f"{r.status} after {tries}: {r.last_error or 'no error kept'}"
        return Case(camp, name, Result.ERROR, why, r.status, seconds=t)
    if r.run_id is None:
        # Done without a run: its kernel could not run it (NotRun's reason kept), or
        # its run was removed from the store since.
        gone = "done, but its run is no longer in the store"
        stopped = f"not run: the campaign stopped before it (element {r.status})"
        why = (r.last_error or gone) if r.status == "done" else stopped
        return Case(camp, name, Result.SKIPPED, why, "not_run", seconds=t)
    detail = st.run_detail(r.run_id)
    run, cases = detail.run, junit_runs.cases(st, detail)
    fold = {EXIT_FINDING: Result.FAILURE, EXIT_HARNESS: Result.ERROR}.get(run.exit)
    if fold is None:
        out = "\n".join(f"{c.name}: {c.out or c.message}" for c in cases)
        return Case(camp, name, out=f"run {run.id}\n{out}", seconds=t)
    bad = [c for c in cases if c.result is fold]
    head = bad[0].message if bad else f"run {run.id} exited {run.exit}"
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    text = "\n\n".join(c.text or f"{c.name}: {c.message}" for c in bad)
    kind = bad[0].type if bad else str(run.exit)
    return Case(camp, name, fold, f"run {run.id}: {head}{more}", kind, text, seconds=t)


def _span(start: str, end: str | None) -> float | None:
    if end is None:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


# --- XML ----------------------------------------------------------------------------

# What XML 1.0 cannot hold at all (a checker's output may have it): dropped.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _clean(text: str) -> str:
    return _NOT_XML.sub("", text)


def _attrs(**values: str | float | int | None) -> dict[str, str]:
    """Attributes without the missing ones; seconds as the schema's plain decimals."""
    out = {}
    for k, v in values.items():
        if v is None or v == "":
            continue
        out[k] = f"{v:.3f}" if isinstance(v, float) else _clean(str(v))
    return out


def to_xml(all_suites: Sequence[Suite]) -> bytes:
    """The suites as one JUnit XML document (the Jenkins xunit plugin's junit-10.xsd)."""
    total = _totals(all_suites)
    root = ET.Element(
        "testsuites",
        _attrs(
            name="crashlab",
            tests=sum(len(s.cases) for s in all_suites),
            failures=total[Result.FAILURE],
            errors=total[Result.ERROR],
            time=float(sum(s.seconds or 0.0 for s in all_suites)),
        ),
    )
    for s in all_suites:
        _suite(root, s)
    ET.indent(root)
    xml: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return xml + b"\n"


def _totals(all_suites: Sequence[Suite]) -> dict[Result, int]:
    return {r: sum(s.count(r) for s in all_suites) for r in Result}


def _suite(root: ET.Element, s: Suite) -> None:
    e = ET.SubElement(
        root,
        "testsuite",
        _attrs(
            name=s.name,
            id=s.id,
            tests=len(s.cases),
            failures=s.count(Result.FAILURE),
            errors=s.count(Result.ERROR),
            skipped=s.count(Result.SKIPPED),
            time=s.seconds,
            timestamp=s.timestamp,
            hostname=s.hostname,
        ),
    )
    if s.properties:
        props = ET.SubElement(e, "properties")
        for k, v in s.properties.items():
            if v:
                ET.SubElement(props, "property", name=k, value=_clean(v))
    for c in s.cases:
        head = _attrs(classname=c.classname, name=c.name, time=c.seconds)
        tc = ET.SubElement(e, "testcase", head)
        if c.result is not Result.PASSED:
            r = ET.SubElement(tc, str(c.result), _attrs(message=c.message, type=c.type))
            r.text = _clean(c.text) or None
        if c.out:
            ET.SubElement(tc, "system-out").text = _clean(c.out)


# --- where it goes ------------------------------------------------------------------


def destination(path: str) -> Path | None:
    """The file ``--junit PATH`` names, None for ``-`` (stdout); checked before any work.

    :raise InputError: a directory, or a file in a directory that does not exist.
    """
    if path == "-":
        return None
    p = Path(path)
    if p.is_dir():
        raise InputError(f"--junit {path}: is a directory", hint="give a file, e.g. junit.xml")
    if not p.parent.is_dir():
        raise InputError(
            f"--junit {path}: directory {p.parent} does not exist",
            hint=f"create it first: mkdir -p {shlex.quote(str(p.parent))}",
        )
    return p


def summary_line(all_suites: Sequence[Suite], dest: Path) -> str:
    n = _totals(all_suites)
    tests = sum(len(s.cases) for s in all_suites)
    return (
        f"junit: {len(all_suites)} testsuite(s), {tests} testcase(s): {n[Result.FAILURE]}"
        f" failure(s), {n[Result.ERROR]} error(s), {n[Result.SKIPPED]} skipped -> {dest}"
    )


def write(xml: bytes, dest: Path | None) -> None:
    """To ``dest`` whole (a reader never sees half a file), or to stdout.

    :raise InputError: the file cannot be written.
    """
    if dest is None:
        import sys

        sys.stdout.write(xml.decode())
        sys.stdout.flush()
        return
    tmp = dest.with_name(f".{dest.name}.tmp")
    try:
        tmp.write_bytes(xml)
        tmp.replace(dest)
    except OSError as e:
        raise InputError(f"--junit {dest}: cannot write it: {e.strerror}") from None
