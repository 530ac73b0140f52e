"""The detection table of a mutant campaign (``campaigns/mutants.toml``): per mutant and
scenario, whether the lab caught the bug the mutant put back (the run has findings), with
the state ids that show it; the stock kernel's runs of the same scenarios as the negative
controls; the detection rate; and the mutants nothing caught -- the lab's gaps, listed,
never dropped.

A pure function of the elements' kernels, statuses and the runs' accounts, so ``--json``
and the table say the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.kernel import mutant
from harness.outcome import Account, is_finding
from harness.store.model import ItemOutcome


@dataclass(frozen=True)
class Cell:
    """One element of the campaign: a scenario on a kernel."""

    mutant: str | None  # None: the stock kernel (a negative control)
    scenario: str
    result: str  # caught | missed | clean | FOUND | not run | failed | pending
    findings: int = 0
    states: tuple[str, ...] = ()
    run_id: str | None = None


@dataclass
class Detection:
    cells: list[Cell] = field(default_factory=list)

    @property
    def mutants(self) -> list[str]:
        return sorted({c.mutant for c in self.cells if c.mutant})

    def caught(self, mutant: str) -> bool:
        return any(c.mutant == mutant and c.result == "caught" for c in self.cells)

    def pending(self, mutant: str) -> bool:
        """Not measured yet: an element still to run, or one the harness failed (a build
        that broke is the lab's failure, never the mutant's escape)."""
        return any(c.mutant == mutant and c.result in ("pending", "failed") for c in self.cells)

    @property
    def gaps(self) -> list[str]:
        """Mutants no scenario caught, once none of their elements is still to run."""
        return [m for m in self.mutants if not self.caught(m) and not self.pending(m)]

    @property
    def rate(self) -> float:
        ms = self.mutants
        return sum(self.caught(m) for m in ms) / len(ms) if ms else 0.0

    @property
    def false_alarms(self) -> list[Cell]:
        """Stock-kernel controls that found something: the scenario, not the mutant."""
        return [c for c in self.cells if c.mutant is None and c.result == "FOUND"]

    def to_json(self) -> dict[str, Any]:
        return {
            "cells": [asdict(c) for c in self.cells],
            "rate": self.rate,
            "gaps": self.gaps,
            "false_alarms": [c.scenario for c in self.false_alarms],
        }


def mutant_of(overrides: Sequence[str]) -> str | None:
    """The mutant an element's ``kernel=`` override names (``+NAME`` or
    ``<release>+NAME``), or None for the stock kernel."""
    kernel = next((o.split("=", 1)[1] for o in overrides if o.startswith("kernel=")), None)
    if kernel is None or "+" not in kernel:
        return None
    # 6.12.95+deb12-amd64 is a release with a '+', not a mutant.
    name = kernel.partition("+")[2]
    return name if name in mutant.names() else None


def cell(
    scenario: str,
    overrides: Sequence[str],
    status: str,
    last_error: str | None,
    run: tuple[str, Account, Sequence[ItemOutcome]] | None,
) -> Cell:
    mutant = mutant_of(overrides)
    if last_error and last_error.startswith("not run"):
        return Cell(mutant, scenario, "not run")
    if run is None:
        failed = status in ("failed", "quarantined")
        return Cell(mutant, scenario, "failed" if failed else "pending")
    run_id, account, items = run
    states = tuple(sorted(i.item for i in items if is_finding(i.outcome)))[:5]
    if account.findings:
        result = "caught" if mutant else "FOUND"
    else:
        result = "missed" if mutant else "clean"
    return Cell(mutant, scenario, result, account.findings, states, run_id)


def detection(cells: Sequence[Cell]) -> Detection:
    return Detection(list(cells))


def summary_line(d: Detection) -> str:
    caught = sum(d.caught(m) for m in d.mutants)
    line = f"detection: {caught} of {len(d.mutants)} mutants caught ({d.rate:.0%})"
    if waiting := [m for m in d.mutants if d.pending(m) and not d.caught(m)]:
        line += f"; {len(waiting)} not measured (still to run, or the harness failed)"
    if d.gaps:
        line += "; the lab's gaps: " + ", ".join(d.gaps)
    if d.false_alarms:
        line += "; stock kernel found something in: " + ", ".join(
            c.scenario for c in d.false_alarms
        )
    return line


def runs_of(
    rows: Sequence[Any], reads: Mapping[str, tuple[Account, Sequence[ItemOutcome]]]
) -> list[Cell]:
    """The cells of campaign element rows (``campaign.runner.ElementRow``), with each
    run's account and items from ``reads`` (run id -> both)."""
    out = []
    for r in rows:
        run = (r.run_id, *reads[r.run_id]) if r.run_id in reads else None
        out.append(cell(r.element.scenario, r.element.overrides, str(r.status), r.last_error, run))
    return out
