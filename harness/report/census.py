"""The census as data and as Markdown (``scenario campaign census --json / --markdown``).

docs/census.md embeds the Markdown between two markers, and a test regenerates it, so
the document and campaigns/census.toml cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.config.census import NEEDS, Census, Fix, Reach


@dataclass(frozen=True)
class Meeting:
    """Where a nightly run first meets a fix's shapes (harness/campaign/nights.py)."""

    run: str
    workload: str  # the first meeting workload's id
    position: int  # 1-based, in the seed's order (1 for a selection taken whole)
    size: int  # the workloads the run walks
    per_night: int
    nights: int

    def text(self) -> str:
        if not self.per_night:
            return f"night 1: {self.run} takes its {self.size:,} workloads every night"
        return (
            f"night {self.nights}: {self.run}, {self.workload} is {self.position:,} of "
            f"{self.size:,} in the seed's order, {self.per_night:,} a night"
        )

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


BEGIN = "<!-- census:begin (generated: scenario campaign census --markdown) -->"
END = "<!-- census:end -->"


def select(census: Census, reach: Reach | None) -> list[Fix]:
    return [f for f in census.fixes if reach is None or f.reach is reach]


def reach_text(f: Fix) -> str:
    """The reach cell: the catching bug, why not yet, or what is missing."""
    if f.reach is Reach.CAUGHT:
        return f"caught by {f.bug}"
    if f.reach is Reach.EXPRESSIBLE:
        return f"expressible: {f.why}"
    return "needs " + ", ".join(f.needs) + (f": {f.why}" if f.why else "")


def nightly_text(f: Fix, met: Sequence[Meeting] = ()) -> str:
    """The family or slice said, the soonest nightly run that meets the shapes, and why."""
    if not f.nightly:
        return "-"
    out = f.nightly
    if met:
        out += f"; {met[0].text()}"
    elif f.shapes:
        out += "; no nightly run meets its shapes"
    return out + (f" ({f.nightly_why})" if f.nightly_why else "")


def summary(census: Census) -> str:
    n = len(census.fixes)
    caught, expressible = len(census.of(Reach.CAUGHT)), len(census.of(Reach.EXPRESSIBLE))
    r1, r2 = census.ratios()
    return (
        f"{n} fixes: {caught} caught, {expressible} expressible, "
        f"{n - caught - expressible} not expressible; reach {caught}/{n} = {r1:.0%} caught, "
        f"{caught + expressible}/{n} = {r2:.0%} caught or expressible"
    )


def to_json(
    census: Census, met: dict[str, list[Meeting]], reach: Reach | None = None
) -> dict[str, Any]:
    """The census and, per fix, the nightly runs that meet it (``nights.nights``)."""
    r1, r2 = census.ratios()
    return {
        "file": str(census.path),
        "total": len(census.fixes),
        "counts": {str(r): len(census.of(r)) for r in Reach},
        "by_fs": {fs: dict(c) for fs, c in sorted(census.by_fs().items())},
        "ratio_caught": round(r1, 4),
        "ratio_reachable": round(r2, 4),
        "needs": [{"need": k, "fixes": n, "alone": a} for k, n, a in census.needs_counts()],
        "nightly": census.nightly.model_dump(mode="json") if census.nightly else None,
        "fixes": [
            {**f.model_dump(mode="json"), "nights": [m.to_json() for m in met[f.title]]}
            for f in select(census, reach)
        ],
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(census: Census, met: dict[str, list[Meeting]]) -> str:
    """The tables of docs/census.md: per filesystem, the fixes, the needs, the nights."""
    out = [summary(census) + ".", ""]
    out += ["| fs | caught | expressible | not expressible | total |", "|---|---|---|---|---|"]
    for fs, c in sorted(census.by_fs().items()):
        row = [c[str(r)] for r in Reach]
        out.append(f"| {fs} | " + " | ".join(str(v) for v in row) + f" | {sum(row)} |")
    out += [
        "",
        "Which capabilities the rest need (a fix counts once under each need it names;",
        "'alone': the fixes that one capability by itself would bring into reach):",
        "",
    ]
    out += ["| need | fixes | alone | what |", "|---|---|---|---|"]
    for k, n, a in census.needs_counts():
        out.append(f"| {k} | {n} | {a} | {_cell(NEEDS[k])} |")
    out += [
        "",
        "| fix | fs | area | fixed in | buggy | reach | nightly | basis |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in census.fixes:
        fix = f"{f.commit or '(no hash)'} {f.title}" + (f" ({f.fstests})" if f.fstests else "")
        cells = (
            fix,
            f.fs,
            f.area,
            ", ".join(f.fixed_in) or "none",
            ", ".join(f.buggy) or "-",
            reach_text(f),
            nightly_text(f, met[f.title]),
            f.basis,
        )
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(out) + "\n"
