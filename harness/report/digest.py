"""The morning digest (``scenario campaign digest``, issue 48): what changed between the
last two nights of one campaign, in the words a person reads over coffee.

- clusters of search findings new tonight (each with its ``docs/findings/known.toml``
  label when it has one) and gone since last night;
- crash states whose verdict got worse, per paired element (``campaign_diff``); where
  the element's recording changed (a kernel update between the nights: other cuts, other
  state ids), the finding outcomes it has more of;
- recovery phases slower or faster beyond last night's own noise: the change is more
  than twice the standard error of last night's mean (its states are the repetitions)
  *and* more than 20 %;
- the elements that failed, were quarantined or could not run, with their reason;
- the night's wall time and the lab's disk use (``prune.usage``).

``needs_a_person``: a new unlabelled cluster, a worse verdict (or more findings), or a
harness failure --
the command's exit status (1) and the JUnit's failures say so; known clusters seen
again, clusters gone and a faster phase do not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any
from xml.etree import ElementTree as ET

from harness.errors import InputError
from harness.outcome import Outcome, is_finding
from harness.report import campaign_diff, known, search
from harness.store import prune
from harness.store.db import Store

BAND = 0.2  # a recovery phase within ±20 % of last night is never news
FINDINGS = {str(o) for o in Outcome if is_finding(o)}


@dataclass(frozen=True)
class Phase:
    element: str
    phase: str
    before: float
    after: float

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before else math.inf


@dataclass
class Digest:
    name: str
    night: str  # the campaign id of tonight
    previous: str | None  # last night's, None on the first night
    new: list[dict[str, str]] = field(default_factory=list)  # cluster symptoms
    gone: list[dict[str, str]] = field(default_factory=list)
    worse: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)
    # element, outcome, count last night, tonight, what changed between (a kernel): more
    # findings where the recordings differ and so pair no state by id
    more: list[tuple[str, str, int, int, str]] = field(default_factory=list)
    phases: list[Phase] = field(default_factory=list)
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # element, status, why
    seconds: float = 0.0
    disk: dict[str, int] = field(default_factory=dict)

    @property
    def unknown_new(self) -> list[dict[str, str]]:
        return [s for s in self.new if known.label(s) is None]

    @property
    def needs_a_person(self) -> bool:
        return bool(self.unknown_new or self.worse or self.more or self.failures)


def nights(store: Store, name: str) -> tuple[str, str | None]:
    """The campaign ``name``'s newest night and the one before it (None: the first).

    :raise InputError: no night of it in the store."""
    ids = store.campaign_nights(name, 2)
    if not ids:
        raise InputError(f"no campaign {name!r} in {store.path}", hint="scenario campaign status")
    return ids[0], ids[1] if len(ids) > 1 else None


def build(store: Store, name: str) -> Digest:
    night, previous = nights(store, name)
    d = Digest(name, night, previous)
    tonight = store.campaign_runs(night)
    d.seconds = sum(r.seconds or 0.0 for r in tonight)
    d.failures = [
        (campaign_diff.label(r), r.status, (r.last_error or "").strip()[:300])
        for r in tonight
        if r.status in ("failed", "quarantined") or (r.last_error or "").startswith("not run")
    ]
    found = _clusters(store, night)
    before = _clusters(store, previous) if previous else {}
    d.new = [found[k] for k in sorted(found.keys() - before.keys())]
    d.gone = [before[k] for k in sorted(before.keys() - found.keys())]
    if previous:
        for pair in campaign_diff.diff_campaigns(store, previous, night).pairs:
            d.worse += [(pair.cell, c.state_id, c.before, c.after) for c in pair.diff.worse]
            d.more += [] if pair.diff.worse else _more_findings(pair)
            d.phases += _beyond_noise(store, pair)
    d.disk = prune.usage()
    return d


def _clusters(store: Store, cid: str) -> dict[tuple[str, ...], dict[str, str]]:
    out = {}
    for r in store.campaign_runs(cid):
        if r.run_id and store.run(r.run_id).kind == "search":
            for c in search.clusters(store, r.run_id):
                out[tuple(c.symptom.get(k, "") for k in search.KEY)] = c.symptom
    return out


def _more_findings(pair: campaign_diff.Pair) -> list[tuple[str, str, int, int, str]]:
    """Finding outcomes an element has more of tonight. A kernel update between the
    nights records the workload anew: its states are other cuts, with other ids, so no
    state pairs with last night's and only the counts compare (``diff.RunDiff``)."""
    why = "; ".join(pair.diff.notes)
    return [
        (pair.cell, o, a, b, why)
        for o, (a, b) in sorted(pair.diff.outcomes.items())
        if b > a and o in FINDINGS
    ]


def _beyond_noise(store: Store, pair: campaign_diff.Pair) -> list[Phase]:
    stats = {s.phase: s for s in store.run_detail(pair.diff.a.id).recovery}
    out = []
    for p in pair.diff.phases:
        s = stats.get(p.phase)
        if s is None or p.n < 2 or not p.mean_before:
            continue
        noise = 2 * s.stdev / math.sqrt(s.n)
        if abs(p.delta) > noise and abs(p.delta) > BAND * p.mean_before:
            out.append(Phase(pair.cell, p.phase, p.mean_before, p.mean_after))
    return out


def _sym(s: dict[str, str]) -> str:
    k = known.label(s)
    said = " ".join(f"{key}={s[key]}" for key in search.KEY if s.get(key))
    return said + (f" (known: {k.name})" if k else " (new)")


def markdown(d: Digest) -> str:
    since = f"since {d.previous}" if d.previous else "(the first night: nothing to compare)"
    head = "**needs a person**" if d.needs_a_person else "nothing new needs a person"
    out = [f"# {d.name}, night {d.night} {since}", "", head, ""]
    sections = [
        ("New finding clusters", [_sym(s) for s in d.new]),
        ("Clusters gone", [_sym(s) for s in d.gone]),
        ("Verdicts worse than last night",
         [f"{e}: state {s} {b or '-'} -> {a or '-'}" for e, s, b, a in d.worse]
         + [f"{e}: {o} {b} -> {a} states ({why or 'the recordings differ'})"
            for e, o, b, a, why in d.more]),
        ("Recovery time beyond last night's noise",
         [f"{p.element}: {p.phase} {p.before:.3f} s -> {p.after:.3f} s ({p.ratio:.2f} x)"
          for p in d.phases]),
        ("Harness failures, quarantined, not run",
         [f"{e}: {st}: {why}" for e, st, why in d.failures]),
    ]  # fmt: skip
    for title, lines in sections:
        out += [f"## {title}", "", *([f"- {x}" for x in lines] or ["none"]), ""]
    disk = ", ".join(f"{k} {prune.human(n)}" for k, n in d.disk.items())
    out += [f"Wall time {d.seconds / 3600:.2f} h; disk: {disk}.", ""]
    return "\n".join(out)


def mail(d: Digest, to: str) -> bytes:
    m = EmailMessage()
    m["To"] = to
    m["Subject"] = f"[crashlab] {d.name}: " + (
        f"{len(d.unknown_new)} new, {len(d.worse) + len(d.more)} worse, {len(d.failures)} failures"
        if d.needs_a_person
        else "nothing new"
    )
    m.set_content(markdown(d))
    return bytes(m)


def junit(d: Digest) -> bytes:
    """One test case per kind of news: a failure where it needs a person."""
    suite = ET.Element("testsuite", name=f"crashlab digest {d.name}")
    cases: Sequence[tuple[str, list[str]]] = [
        ("new clusters", [_sym(s) for s in d.unknown_new]),
        (
            "verdicts",
            [f"{e}: {s} {b} -> {a}" for e, s, b, a in d.worse]
            + [f"{e}: {o} {b} -> {a} states ({why})" for e, o, b, a, why in d.more],
        ),
        ("harness", [f"{e}: {st}: {why}" for e, st, why in d.failures]),
    ]
    for case, problems in cases:
        tc = ET.SubElement(suite, "testcase", classname="digest", name=case)
        if problems:
            ET.SubElement(tc, "failure", message=f"{len(problems)}").text = "\n".join(problems)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(bool(p) for _, p in cases)))
    return bytes(ET.tostring(suite, xml_declaration=True, encoding="utf-8"))


def to_json(d: Digest) -> dict[str, Any]:
    return {
        "name": d.name, "night": d.night, "previous": d.previous,
        "needs_a_person": d.needs_a_person,
        "new": [{**s, "known": (k.name if (k := known.label(s)) else None)} for s in d.new],
        "gone": d.gone,
        "worse": [dict(zip(("element", "state", "before", "after"), w, strict=True))
                  for w in d.worse],
        "more": [dict(zip(("element", "outcome", "before", "after", "why"), m, strict=True))
                 for m in d.more],
        "phases": [{**p.__dict__, "ratio": p.ratio} for p in d.phases],
        "failures": [dict(zip(("element", "status", "why"), f, strict=True)) for f in d.failures],
        "seconds": d.seconds, "disk": d.disk,
    }  # fmt: skip
