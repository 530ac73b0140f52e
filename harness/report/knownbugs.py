"""The known-bugs table (``scenario campaign known-bugs FILE``): each real bug of the
catalogue on the kernel that has it, the first that has the fix, and the image's own --
caught, clean, MISSED (the buggy kernel passed), FOUND (a kernel that should be clean
was not), or not run with its reason. A bug that does not reproduce stays in the table.

A pure function of the catalogue, the elements' statuses and their runs' accounts, so
``--json`` and the table say the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.config.campaign import BugSpec
from harness.outcome import Account, is_finding
from harness.store.model import ItemOutcome

ROLES = ("buggy", "fixed", "image")


@dataclass(frozen=True)
class Verdict:
    """One bug on one kernel."""

    role: str  # buggy | fixed | image
    kernel: str
    result: str  # caught | clean | MISSED | FOUND | not run | failed | pending
    findings: int = 0
    states: int = 0
    seconds: float | None = None
    finding_states: tuple[str, ...] = ()
    run_id: str | None = None


@dataclass
class BugRow:
    bug: BugSpec
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    @property
    def roles(self) -> list[str]:
        """The kernels the catalogue runs this bug on."""
        b = self.bug
        return ["buggy", *(["fixed"] if b.fixed else []), *(["image"] if b.image != "skip" else [])]

    @property
    def as_expected(self) -> bool:
        """Caught where present, clean where fixed, on every kernel it runs on (one still
        to run is not yet; a bug that does not reproduce here is no failure: its reason
        is in the table)."""
        if not self.bug.reproduces:
            return True
        got = [self.verdicts.get(r) for r in self.roles]
        return all(v is not None and v.result in ("caught", "clean") for v in got)

    def to_json(self) -> dict[str, Any]:
        b = self.bug
        head: dict[str, Any] = {"bug": b.name, "fs": b.fs, "commit": b.commit, "title": b.title}
        head |= {"fstests": b.fstests, "reproduces": b.reproduces, "reason": b.reason}
        return {**head, "verdicts": {r: asdict(v) for r, v in self.verdicts.items()}}


def _kernel(bug: BugSpec, role: str) -> str:
    return {"buggy": bug.buggy, "fixed": bug.fixed}.get(role, "image")


def verdict(
    bug: BugSpec,
    role: str,
    status: str,
    seconds: float | None,
    run: tuple[str, Account, Sequence[ItemOutcome]] | None,
) -> Verdict:
    """What one element says: a finding is expected on the buggy kernel (and on the
    image's where the catalogue says it has the bug), none elsewhere."""
    kernel = _kernel(bug, role)
    if run is None:
        failed = status in ("failed", "quarantined")
        return Verdict(role, kernel, "failed" if failed else "pending")
    run_id, account, items = run
    found = tuple(sorted(i.item for i in items if is_finding(i.outcome)))
    expect = role == "buggy" or (role == "image" and bug.image == "buggy")
    if account.findings:
        result = "caught" if expect else "FOUND"
    else:
        result = "MISSED" if expect else "clean"
    return Verdict(role, kernel, result, account.findings, len(items), seconds, found[:5], run_id)


def table(
    bugs: Sequence[BugSpec],
    rows: Sequence[Any],
    reads: Mapping[str, tuple[Account, Sequence[ItemOutcome]]],
) -> list[BugRow]:
    """One row a bug, from campaign element rows (``campaign.runner.ElementRow``) and
    each run's account and items (run id -> both)."""
    out = {b.name: BugRow(b) for b in bugs}
    for b in bugs:
        if not b.reproduces:
            for role in ("buggy", "fixed")[: 1 + bool(b.fixed)]:
                out[b.name].verdicts[role] = Verdict(role, _kernel(b, role), "not run")
    for r in rows:
        if r.element.bug is None:
            continue
        name, role = r.element.bug
        run = (r.run_id, *reads[r.run_id]) if r.run_id in reads else None
        row = out[name]
        row.verdicts[role] = verdict(row.bug, role, str(r.status), r.seconds, run)
    return list(out.values())


def summary_line(rows: Sequence[BugRow]) -> str:
    ran = [r for r in rows if r.bug.reproduces]
    caught = sum(r.verdicts.get("buggy", Verdict("", "", "")).result == "caught" for r in ran)
    fixable = [r for r in ran if r.bug.fixed]
    clean = sum(r.verdicts.get("fixed", Verdict("", "", "")).result == "clean" for r in fixable)
    line = (
        f"known bugs: {caught} of {len(ran)} caught on the kernel that has them, "
        f"{clean} of {len(fixable)} clean on the first that has the fix"
    )
    if kept := [r.bug.name for r in rows if not r.bug.reproduces]:
        line += f"; {len(kept)} not reproduced here (reasons in the table): " + ", ".join(kept)
    if wrong := [r.bug.name for r in rows if not r.as_expected]:
        line += "; not as expected: " + ", ".join(wrong)
    return line
