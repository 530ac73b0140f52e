"""After how many nights the nightly search meets a census fix untold (issue 46).

A fix's ``shapes`` (campaigns/census.toml) are runs of ACE steps spelt as ``ace
describe`` spells them: the workloads known to show the bug. The nightly campaign's
search runs on the fix's filesystem each walk a part of ACE's space: a slice or a seq-1
space taken whole every night, or a family walked in its seed's order (``acespace
.shuffled``) for a wall-clock budget a night, taken up where the last night stopped.
A workload *meets* a fix when its steps hold one of the shapes' steps in a row. For a
budgeted walk the answer is the first meeting workload's position in the order over the
workloads a night's budget checks (``[nightly] workloads_per_hour``, measured).

This is where the shape stands, not a promise the search finds it: a kernel that has
the bug shows it on the shape's workloads, and every other workload of the family is
checked before or after. A fix with no shapes is "not computed", never "never met".
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from harness.config import campaign, scenario
from harness.config.census import Census, Fix
from harness.experiments.search.settings import AceSpec, SearchScenario, budget_seconds
from harness.model import ace, acespace
from harness.report.census import Meeting

# A census filesystem and the runs that reach it: jbd2's fixes show through ext4.
FS_RUNS = {"jbd2": ("ext4", "ext3")}


@dataclass(frozen=True)
class Walked:
    """One nightly search run: what it walks, and how much of it a night."""

    label: str
    fs: str
    spec: AceSpec
    seed: int
    per_night: int  # workloads a night's budget checks; 0: the whole selection every night


def runs(census: Census) -> list[Walked]:
    """The nightly campaign's ACE search runs (every other element is no search)."""
    n = census.nightly
    if n is None:
        return []
    path = census.path.parent / n.campaign
    out = []
    for el in campaign.load(path).elements:
        sc = scenario.load(el.scenario, scenario.seeded(el.overrides, el.seed))
        if not isinstance(sc, SearchScenario) or sc.workload.sample:
            continue  # a sample is drawn afresh by seed: no order to stand in
        spec = sc.workload
        fam = spec.chosen_family() or "all"
        label = f"{el.scenario} {sc.fs.type} {spec.grammar} seq-{spec.seq} {fam}"
        if spec.indices:
            label += f" ({len(spec.indices)}-workload slice)"
        per = 0
        if spec.budget:
            per = int(budget_seconds(spec.budget) / 3600 * n.workloads_per_hour)
        out.append(Walked(label, sc.fs.type, spec, sc.seed, per))
    return out


def spelled(seq: int, index: int, grammar: str) -> tuple[str, ...]:
    """Workload ``index``'s steps as ``ace describe`` spells them."""
    return tuple(ace.unit_label(c, p) for c, p in ace.decode(seq, index, grammar))


def meets(shapes: tuple[str, ...], steps: tuple[str, ...]) -> bool:
    """Whether a workload's ``steps`` hold one of the shapes' steps in a row."""
    for want in _split(shapes):
        if any(steps[k : k + len(want)] == want for k in range(len(steps) - len(want) + 1)):
            return True
    return False


@functools.cache
def _split(shapes: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(s.strip() for s in shape.split(";")) for shape in shapes)


def meeting(fix: Fix, run: Walked) -> Meeting | None:
    """Where ``run`` first meets ``fix``'s shapes, if it does."""
    w = run.spec
    if run.fs not in FS_RUNS.get(fix.fs, (fix.fs,)) or not fix.shapes:
        return None
    fam = w.chosen_family()
    if not run.per_night:  # a slice or a whole space, taken every night
        chosen = _chosen(w, fam)
        first = next((i for i in chosen if meets(fix.shapes, spelled(w.seq, i, w.grammar))), None)
        if first is None:
            return None
        return Meeting(run.label, ace.describe(w.seq, first, w.grammar)["id"], 1, len(chosen), 0, 1)
    found = _first(w.seq, run.seed, w.grammar, fam, fix.shapes, w.op_classes)
    if found is None:
        return None
    pos, index, size = found
    wid = ace.describe(w.seq, index, w.grammar)["id"]
    return Meeting(run.label, wid, pos, size, run.per_night, math.ceil(pos / run.per_night))


def _chosen(w: AceSpec, fam: str) -> list[int]:
    return acespace.selection(w.seq, 0, 1, w.limit, w.op_classes, w.indices,
                              grammar=w.grammar, family=fam)  # fmt: skip


def _first(
    seq: int, seed: int, grammar: str, fam: str, shapes: tuple[str, ...], classes: tuple[str, ...]
) -> tuple[int, int, int] | None:
    """(position, index, size) of the first workload meeting ``shapes`` as
    ``budget.order`` walks: the family in the seed's order, only the workloads whose ops
    are all of ``classes`` when given."""
    order = _walked(seq, seed, grammar, fam, classes)
    hit = next((n for n, (_, steps) in enumerate(order) if meets(shapes, steps)), None)
    return None if hit is None else (hit + 1, order[hit][0], len(order))


@functools.cache  # every fix walks the same orders: each once (new-dir-name's takes seconds)
def _walked(
    seq: int, seed: int, grammar: str, fam: str, classes: tuple[str, ...]
) -> list[tuple[int, tuple[str, ...]]]:
    keep = set(classes)
    out = []
    for i in acespace.ordered(seq, seed, grammar, fam):
        picked = ace.decode(seq, i, grammar)
        if not keep or all(c.op_class in keep for c, _ in picked):
            out.append((i, tuple(ace.unit_label(c, p) for c, p in picked)))
    return out


def nights(census: Census) -> dict[str, list[Meeting]]:
    """Per fix title, the nightly runs that meet it, soonest first."""
    walked = runs(census)
    out: dict[str, list[Meeting]] = {}
    for fix in census.fixes:
        found = [m for r in walked if (m := meeting(fix, r)) is not None]
        out[fix.title] = sorted(found, key=lambda m: (m.nights, m.position))
    return out
