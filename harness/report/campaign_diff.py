"""``scenario results diff CAMPAIGN_A CAMPAIGN_B``: the runs of two campaigns paired, and
each pair compared as ``diff.diff_runs`` compares two runs (outcome counts, the states
whose verdict changed, recovery-time ratios).

Pairing takes two passes over the campaigns' elements that have a run. First the same
element (scenario, ``--set`` items, seed) in both: one campaign file run twice, last
night's and tonight's, or one kernel matrix against another build of it. Then, among the
rest, the same element but for its kernel (``kernel=...`` left out), where that leaves
one run on each side: one campaign per kernel. A key with several runs on a side is not
guessed at; what stays unpaired is listed as in one campaign only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import InputError
from harness.report.diff import RunDiff, diff_runs
from harness.store.campaigns import CampaignRun
from harness.store.db import Store

KERNEL = "kernel="


def label(r: CampaignRun, *, kernel: bool = True) -> str:
    """The element as a campaign file names it: ``scenario --set items seed=N``."""
    items = [o for o in r.overrides if kernel or not o.startswith(KERNEL)]
    return " ".join([r.scenario, *items, *([f"seed={r.seed}"] if r.seed is not None else [])])


@dataclass(frozen=True)
class Pair:
    cell: str  # the element without its kernel
    diff: RunDiff

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.cell, **self.diff.to_json()}


@dataclass(frozen=True)
class Unpaired:
    element: str
    status: str
    run_id: str | None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class CampaignDiff:
    a: str
    b: str
    name_a: str
    name_b: str
    pairs: Sequence[Pair]
    only_a: Sequence[Unpaired]
    only_b: Sequence[Unpaired]

    def to_json(self) -> dict[str, Any]:
        return {
            "a": {"campaign": self.a, "name": self.name_a},
            "b": {"campaign": self.b, "name": self.name_b},
            "pairs": [p.to_json() for p in self.pairs],
            "only_a": [u.to_json() for u in self.only_a],
            "only_b": [u.to_json() for u in self.only_b],
        }


def campaign_ids(store: Store, a: str, b: str) -> tuple[str, str] | None:
    """The two campaigns ``a`` and ``b`` name (ids or unique prefixes); None when neither
    names a campaign (then they are runs).

    :raise InputError: one is a campaign and the other not, or an id names several.
    """
    found = [store.resolve_campaign_id(x) for x in (a, b)]
    if not any(found):
        return None
    for x, ids in zip((a, b), found, strict=True):
        if len(ids) > 1:
            raise InputError(
                f"campaign id {x!r} is ambiguous", hint="it matches " + ", ".join(ids[:8])
            )
        if not ids:
            raise InputError(
                f"{x!r} is not a campaign id, and the other one is",
                hint="diff two runs or two campaigns (scenario campaign status shows its id)",
            )
        if _is_run(store, x):
            raise InputError(
                f"{x!r} names both a run and campaign {ids[0]}", hint="give more characters"
            )
    return found[0][0], found[1][0]


def _is_run(store: Store, x: str) -> bool:
    try:
        store.resolve_run_id(x)
    except InputError:
        return False
    return True


Rows = list[CampaignRun]


def _match(
    a: Rows, b: Rows, key: Callable[[CampaignRun], str]
) -> tuple[list[tuple[CampaignRun, CampaignRun]], Rows, Rows]:
    """Rows whose key is one row's on each side, paired; the rest of each side."""
    ka: dict[str, Rows] = {}
    kb: dict[str, Rows] = {}
    for rows, by in ((a, ka), (b, kb)):
        for r in rows:
            by.setdefault(key(r), []).append(r)
    pairs = [(ka[k][0], kb[k][0]) for k in ka if len(ka[k]) == 1 and len(kb.get(k, [])) == 1]
    paired = {id(r) for p in pairs for r in p}
    return pairs, [r for r in a if id(r) not in paired], [r for r in b if id(r) not in paired]


def diff_campaigns(store: Store, a: str, b: str) -> CampaignDiff:
    """The runs of campaigns ``a`` and ``b`` (full ids) paired and diffed; see the module."""
    ra, rb = store.campaign_runs(a), store.campaign_runs(b)
    with_run_a, with_run_b = [r for r in ra if r.run_id], [r for r in rb if r.run_id]
    same, rest_a, rest_b = _match(with_run_a, with_run_b, label)
    other_kernel, rest_a, rest_b = _match(rest_a, rest_b, lambda r: label(r, kernel=False))
    pairs = [
        Pair(label(x, kernel=False), diff_runs(store, str(x.run_id), str(y.run_id)))
        for x, y in [*same, *other_kernel]
    ]

    def unpaired(all_rows: Rows, rest: Rows) -> list[Unpaired]:
        left = [r for r in all_rows if not r.run_id or r in rest]
        return [Unpaired(label(r), r.status, r.run_id) for r in left]

    return CampaignDiff(
        a,
        b,
        store.campaign_name(a),
        store.campaign_name(b),
        pairs,
        unpaired(ra, rest_a),
        unpaired(rb, rest_b),
    )
